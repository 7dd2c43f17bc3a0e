package pool

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// persistentFlushes counts Flush calls on a real storage.
type persistentFlushes struct {
	storage.Storage
	n int
}

func (s *persistentFlushes) Flush() { s.n++; s.Storage.Flush() }

func TestPersistentReusesAFreedSliceForTheSameEffectiveSizeOnly(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewPersistent(1<<20, 32, Limits{})
	if p.Index() != 255 || PersistentIndex != 255 {
		t.Fatalf("persistent pool index %d", p.Index())
	}
	a := singleReserve(t, p, st, 64)
	loc := a.Location()
	if loc != handle.MustLocation(255, 0, 0) {
		t.Fatalf("first allocation at %v", loc)
	}
	if p.TryReserve(st, 64, nil, Bind{}) != nil {
		t.Fatal("a live slice was reserved again")
	}
	a.Release()
	for _, size := range []uint64{32, 65, 96, 128} {
		if h := p.TryReserve(st, size, nil, Bind{}); h != nil {
			t.Fatalf("%d B reused the 64-byte slice", size)
		}
	}
	b := p.TryReserve(st, 40, nil, Bind{}) // 40 + 24 padding = 64
	if b == nil || b.Location() != loc {
		t.Fatal("40 B did not reuse the free 64-byte slice")
	}
	if s := singleSlice(t, p, b); s.Region.Size != 40 || s.Padding != 24 {
		t.Errorf("reused window %d + %d, want 40 + 24", s.Region.Size, s.Padding)
	}
	c := singleReserve(t, p, st, 64) // the bucket's only slice is live: a new one
	if c.Location().Page() != 1 || p.Pages() != 2 || st.BytesAllocated() != 128 {
		t.Errorf("64 B with the bucket busy: at %v, %d slices, %d bytes", c.Location(), p.Pages(), st.BytesAllocated())
	}
	for size, want := range map[uint64]bool{33: true, 40: true, 64: true, 32: false, 65: false} {
		if p.HasSize(size) != want {
			t.Errorf("HasSize(%d) = %v, want %v", size, !want, want)
		}
	}
	p.Check()
	b.Release()
	c.Release()
}

// Reserved bytes persist after frees until an Explicit cleanup, after which
// the renumbered live slices still resolve to their bytes.
func TestPersistentReservedBytesPersistUntilAnExplicitCleanup(t *testing.T) {
	base := hoststorage.NewHost(32, nil)
	st := &persistentFlushes{Storage: base}
	p := NewPersistent(1<<20, 32, Limits{})
	a := singleReserve(t, p, st, 64)
	b := singleReserve(t, p, st, 128)
	c := singleReserve(t, p, st, 256)
	d := singleReserve(t, p, st, 100) // effective 128, same bucket as b
	singleFill(t, p, st, c, 5)
	singleFill(t, p, st, d, 6)
	bind := d.Binding()
	a.Release()
	b.Release()

	want := Usage{Allocations: 2, BytesInUse: 356, BytesPadding: 28, BytesReserved: 576}
	if u := p.Report().Usage; u != want {
		t.Fatalf("usage after frees %+v, want %+v", u, want)
	}
	p.Cleanup(st, 1<<30, Periodic, nil)
	if p.Pages() != 4 || st.BytesAllocated() != 576 || st.n != 0 {
		t.Fatalf("a periodic cleanup changed the pool: %d slices, %d bytes, %d flushes", p.Pages(), st.BytesAllocated(), st.n)
	}

	p.Cleanup(st, 0, Explicit, nil)
	if p.Pages() != 2 || st.BytesAllocated() != 384 || p.Report().Usage.BytesReserved != 384 {
		t.Fatalf("after the Explicit cleanup: %d slices, %d bytes held, %d reserved; want 2, 384, 384",
			p.Pages(), st.BytesAllocated(), p.Report().Usage.BytesReserved)
	}
	if st.n != 1 {
		t.Errorf("the Explicit cleanup flushed %d times, want 1", st.n)
	}
	if c.Location().Page() != 0 || bind.Location().Page() != 1 {
		t.Errorf("survivors at %v and %v, want pages 0 and 1", c.Location(), bind.Location())
	}
	singleExpectBytes(t, p, st, c, 5)
	singleExpectBytes(t, p, st, bind, 6)
	if p.HasSize(64) || !p.HasSize(100) || !p.HasSize(256) {
		t.Errorf("index not rebuilt: HasSize 64/100/256 = %v/%v/%v", p.HasSize(64), p.HasSize(100), p.HasSize(256))
	}
	p.Check()

	// The rebuilt index serves the renumbered slice.
	bind.Release()
	d.Release()
	e := p.TryReserve(st, 128, nil, Bind{})
	if e == nil || e.Location().Page() != 1 {
		t.Fatalf("128 B after the rebuild took %v, want page 1", e)
	}
	if r := p.Report(); r.PagesPeak != 4 || r.LargestAlloc != 256 || r.Kind != (PersistentKind{}) {
		t.Errorf("report %+v", r)
	}
	e.Release()
	c.Release()
}

func TestPersistentRefusesSizesAboveMaxAlloc(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewPersistent(4096, 32, Limits{})
	if !p.Accept(4096) || p.Accept(4097) {
		t.Errorf("Accept(4096) = %v, Accept(4097) = %v", p.Accept(4096), p.Accept(4097))
	}
	_, err := p.Alloc(st, 4097)
	if !errors.Is(err, ErrBufferTooBig) || !strings.Contains(err.Error(), "4097") || !strings.Contains(err.Error(), "4096") {
		t.Fatalf("Alloc(4097): %v, want ErrBufferTooBig naming size and limit", err)
	}
	if p.Pages() != 0 || st.BytesAllocated() != 0 || p.HasSize(4097) {
		t.Error("a refused Alloc changed the pool")
	}
}

func TestPersistentGuardedFreeSliceIsNeitherReusedNorReleased(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewPersistent(1<<20, 32, Limits{})
	a := singleReserve(t, p, st, 512)
	guard, ok := p.Guard(a.Location())
	if !ok {
		t.Fatal("Guard found no slice at a live allocation")
	}
	if !a.CanMut() {
		t.Error("a guard made CanMut false")
	}
	a.Release()
	if p.TryReserve(st, 512, nil, Bind{}) != nil {
		t.Fatal("the guarded slice was reserved again")
	}
	p.Cleanup(st, 0, Explicit, nil)
	if p.Pages() != 1 || st.BytesAllocated() != 512 {
		t.Fatalf("Explicit cleanup released the guarded slice")
	}
	guard.Release()
	p.Cleanup(st, 0, Explicit, nil)
	if p.Pages() != 0 || st.BytesAllocated() != 0 {
		t.Errorf("after the guard went: %d slices, %d bytes", p.Pages(), st.BytesAllocated())
	}
	if _, ok := p.Guard(handle.MustLocation(255, 0, 0)); ok {
		t.Error("Guard found a slice in an empty pool")
	}
}

func TestPersistentReleasedSliceDropsItsFailureMarks(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	p := NewPersistent(1<<20, 32, Limits{})
	a := singleReserve(t, p, st, 256)
	f := singleTaint(t, p, g, a, 32)
	a.Release()
	p.Cleanup(st, 0, Explicit, g)
	if _, live := g.Err(f); live || g.Live() != 0 {
		t.Errorf("failure %d still live after its slice was released", f)
	}
}

func TestPersistentRefusesTheSliceBeyondItsLimitChangingNothing(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewPersistent(1<<20, 32, Limits{MaxPages: 3})
	var hs []*handle.Handle
	for range 3 {
		h, err := p.Alloc(st, 1024)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	_, err := p.Alloc(st, 2048)
	if !errors.Is(err, handle.ErrIndexOverflow) || !strings.Contains(err.Error(), "3") {
		t.Fatalf("fourth slice: %v, want ErrIndexOverflow naming the count", err)
	}
	if p.Pages() != 3 || p.HasSize(2048) || st.BytesAllocated() != 3*1024 {
		t.Errorf("refused alloc changed the pool: %d slices", p.Pages())
	}
	for i, h := range hs {
		if int(h.Location().Page()) != i {
			t.Errorf("allocation %d moved to %v", i, h.Location())
		}
		h.Release()
	}
	p.Check()
}
