package pool

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// directAlloc allocates size on p, failing the test on error.
func directAlloc(t *testing.T, p *Direct, st storage.Storage, size uint64, mayRelease bool, g *handle.ErrorGraph) *handle.Handle {
	t.Helper()
	h, err := p.AllocMayRelease(st, size, mayRelease, g)
	if err != nil {
		t.Fatalf("alloc %d bytes: %v", size, err)
	}
	return h
}

func directPages(hs ...*handle.Handle) []uint32 {
	var out []uint32
	for _, h := range hs {
		out = append(out, h.Location().Page())
	}
	return out
}

func TestDirectReusesOnlyASliceOfExactlyTheEffectiveSize(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewDirect(32, DedicatedIndex, nil, Limits{})
	if !p.Accept(1<<50) || p.Index() != 254 {
		t.Fatalf("Accept(2^50) = %v, Index = %d; want true, 254", p.Accept(1<<50), p.Index())
	}
	a := directAlloc(t, p, st, 100, true, nil)
	s := singleSlice(t, p, a)
	if s.Region.Size != 100 || s.Padding != 28 || p.slots[0].allocSize != 128 || st.BytesAllocated() != 128 {
		t.Fatalf("100 B took %d + %d of %d bytes (storage %d); want 100 + 28 of 128", s.Region.Size, s.Padding, p.slots[0].allocSize, st.BytesAllocated())
	}
	a.Release()
	for _, size := range []uint64{96, 129, 160, 256} {
		if h := p.TryReserve(st, size, nil, Bind{}); h != nil {
			t.Fatalf("%d B (effective %d) reused the 128-byte slice", size, size+storage.Padding(size, 32))
		}
	}
	b := p.TryReserve(st, 97, nil, Bind{}) // effective 128
	if b == nil || b.Location() != handle.MustLocation(254, 0, 0) {
		t.Fatalf("97 B (effective 128) did not reuse the free 128-byte slice")
	}
	if s := singleSlice(t, p, b); s.Region.Size != 97 || s.Padding != 31 {
		t.Errorf("reused window %d + %d, want 97 + 31", s.Region.Size, s.Padding)
	}
	if p.TryReserve(st, 97, nil, Bind{}) != nil {
		t.Error("a live slice was reserved again")
	}
	if r := p.Report(); r.Pages != 1 || r.LargestAlloc != 100 || r.Usage != (Usage{Allocations: 1, BytesInUse: 97, BytesPadding: 31, BytesReserved: 128}) {
		t.Errorf("report %+v", r)
	}
	p.Check()
	b.Release()
}

func TestDirectWatermarkZeroReleasesEveryFreeSliceBeforeAnAlloc(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	var zero uint64
	p := NewDirect(32, DedicatedIndex, &zero, Limits{})
	a := directAlloc(t, p, st, 1024, true, g)
	b := directAlloc(t, p, st, 2048, true, g)
	c := directAlloc(t, p, st, 4096, true, g)
	d := directAlloc(t, p, st, 512, true, g)
	singleFill(t, p, st, b, 9)
	a.Release()
	c.Release()

	e := directAlloc(t, p, st, 256, true, g)
	if st.BytesAllocated() != 2048+512+256 {
		t.Errorf("storage holds %d bytes, want %d: every free slice goes first", st.BytesAllocated(), 2048+512+256)
	}
	if got := directPages(b, d, e); got[0] != 1 || got[1] != 3 || got[2] != 0 {
		t.Errorf("b, d, e at pages %v; want 1, 3 (unchanged) and 0 (lowest vacancy)", got)
	}
	singleExpectBytes(t, p, st, b, 9)
	f := directAlloc(t, p, st, 64, true, g)
	if f.Location().Page() != 2 {
		t.Errorf("next alloc at %v, want the vacancy at page 2", f.Location())
	}
	if r := p.Report(); r.Pages != 4 || r.PagesPeak != 4 || r.Usage.BytesReserved != 2048+512+256+64 {
		t.Errorf("report %+v", r)
	}
	p.Check()
	for _, h := range []*handle.Handle{b, d, e, f} {
		h.Release()
	}
}

func TestDirectWatermarkStopsReleasingOnceTheAllocFits(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	mark := uint64(1000)
	p := NewDirect(32, DedicatedIndex, &mark, Limits{})
	var hs []*handle.Handle
	for range 4 {
		hs = append(hs, directAlloc(t, p, st, 256, false, nil))
	}
	for _, h := range hs {
		h.Release()
	}
	// 1024 + 256 > 1000: release page 0 (768 + 256 = 1024, still over), then
	// page 1 (512 + 256 ≤ 1000): stop.
	h := directAlloc(t, p, st, 256, true, nil)
	if p.Pages() != 3 || st.BytesAllocated() != 768 {
		t.Fatalf("%d slices, %d bytes held; want 3, 768", p.Pages(), st.BytesAllocated())
	}
	if h.Location().Page() != 0 || p.slots[1] != nil || p.slots[2] == nil || p.slots[3] == nil {
		t.Errorf("new slice at %v; want page 0 with 1 vacant and 2, 3 kept", h.Location())
	}
	p.Check()
	h.Release()
}

func TestDirectLiveIndicesNeverChange(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewDirect(32, DedicatedIndex, nil, Limits{})
	a := directAlloc(t, p, st, 64, true, nil)
	b := directAlloc(t, p, st, 64, true, nil)
	c := directAlloc(t, p, st, 64, true, nil)
	singleFill(t, p, st, c, 3)
	bind := c.Binding()
	a.Release()
	b.Release()
	p.Cleanup(st, 0, Periodic, nil)
	if p.Pages() != 3 {
		t.Fatalf("a periodic cleanup released %d slices", 3-p.Pages())
	}
	p.Cleanup(st, 0, Explicit, nil)
	if p.Pages() != 1 || st.BytesAllocated() != 64 {
		t.Fatalf("Explicit cleanup kept %d slices, %d bytes; want 1, 64", p.Pages(), st.BytesAllocated())
	}
	if bind.Location() != handle.MustLocation(254, 2, 0) {
		t.Errorf("the survivor moved to %v", bind.Location())
	}
	singleExpectBytes(t, p, st, bind, 3)
	if p.Slice(handle.MustLocation(254, 0, 0)) != nil || p.Slice(handle.MustLocation(254, 1, 0)) != nil {
		t.Error("a vacant index still names a slice")
	}
	if _, ok := p.Guard(handle.MustLocation(254, 1, 0)); ok {
		t.Error("Guard found a slice at a vacant index")
	}
	x := directAlloc(t, p, st, 64, true, nil)
	y := directAlloc(t, p, st, 64, true, nil)
	z := directAlloc(t, p, st, 64, true, nil)
	if got := directPages(x, y, z, c); got[0] != 0 || got[1] != 1 || got[2] != 3 || got[3] != 2 {
		t.Errorf("pages %v, want vacancies 0, 1 filled, then 3 appended, c still at 2", got)
	}
	p.Check()
	for _, h := range []*handle.Handle{x, y, z, c} {
		h.Release()
	}
	bind.Release()
	p.Cleanup(st, 0, Explicit, nil)
	if p.Pages() != 0 || len(p.slots) != 0 || st.BytesAllocated() != 0 {
		t.Errorf("after freeing everything: %d slices (%d indices), %d bytes", p.Pages(), len(p.slots), st.BytesAllocated())
	}
}

func TestDirectAllocThatMayNotReleaseReleasesNothing(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	var zero uint64
	p := NewDirect(32, DedicatedIndex, &zero, Limits{})
	a := directAlloc(t, p, st, 512, true, nil)
	a.Release()
	b := directAlloc(t, p, st, 512, false, nil)
	if p.Pages() != 2 || st.BytesAllocated() != 1024 || b.Location().Page() != 1 {
		t.Fatalf("AddOnly alloc: %d slices, %d bytes, at %v; want the free slice kept", p.Pages(), st.BytesAllocated(), b.Location())
	}
	b.Release()
}

func TestDirectReclaimReportsWhetherAnythingWent(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	var zero uint64
	p := NewDirect(32, DedicatedIndex, &zero, Limits{})
	a := directAlloc(t, p, st, 512, true, nil)
	b := directAlloc(t, p, st, 512, true, nil)
	if p.Reclaim(st, nil) {
		t.Fatal("Reclaim with nothing free reported a release")
	}
	a.Release()
	if !p.Reclaim(st, nil) || p.Pages() != 1 || st.BytesAllocated() != 512 {
		t.Fatalf("Reclaim of a free slice: %d slices, %d bytes", p.Pages(), st.BytesAllocated())
	}
	if p.Reclaim(st, nil) {
		t.Error("a second Reclaim reported a release")
	}
	if b.Location().Page() != 1 {
		t.Errorf("Reclaim moved the live slice to %v", b.Location())
	}
	b.Release()
	if !p.Reclaim(st, nil) || p.Pages() != 0 || len(p.slots) != 0 {
		t.Errorf("Reclaim of the last slice left %d slices, %d indices; want none (trailing vacancies trimmed)", p.Pages(), len(p.slots))
	}
	p.Check()

	// Without a watermark Reclaim and Alloc never release.
	q := NewDirect(32, 5, nil, Limits{})
	c := directAlloc(t, q, st, 64, true, nil)
	c.Release()
	if q.Reclaim(st, nil) || q.Pages() != 1 {
		t.Error("Reclaim without a watermark released a slice")
	}
	directAlloc(t, q, st, 64, true, nil).Release()
	if q.Pages() != 2 {
		t.Errorf("Alloc without a watermark left %d slices, want 2", q.Pages())
	}
}

func TestDirectGuardedFreeSliceIsNeitherReusedNorReleased(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	var zero uint64
	p := NewDirect(32, DedicatedIndex, &zero, Limits{})
	a := directAlloc(t, p, st, 1024, true, nil)
	guard, ok := p.Guard(a.Location())
	if !ok {
		t.Fatal("Guard found no slice at a live allocation")
	}
	if !a.CanMut() {
		t.Error("a guard made CanMut false")
	}
	a.Release()
	if p.TryReserve(st, 1024, nil, Bind{}) != nil {
		t.Fatal("the guarded slice was reserved again")
	}
	b := directAlloc(t, p, st, 1024, true, nil)
	if p.Reclaim(st, nil) {
		t.Error("Reclaim released the guarded slice")
	}
	p.Cleanup(st, 0, Explicit, nil)
	if p.Pages() != 2 || b.Location().Page() != 1 {
		t.Fatalf("guarded slice released: %d slices, b at %v", p.Pages(), b.Location())
	}
	guard.Release()
	if !p.Reclaim(st, nil) || p.Pages() != 1 {
		t.Errorf("after the guard went Reclaim kept %d slices", p.Pages())
	}
	b.Release()
}

func TestDirectRefusesTheIndexBeyondItsLimitUnlessAReleaseMakesRoom(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	var zero uint64
	p := NewDirect(32, DedicatedIndex, &zero, Limits{MaxPages: 2})
	a := directAlloc(t, p, st, 64, true, nil)
	b := directAlloc(t, p, st, 64, true, nil)
	_, err := p.AllocMayRelease(st, 64, true, nil)
	if !errors.Is(err, handle.ErrIndexOverflow) || !strings.Contains(err.Error(), "2") {
		t.Fatalf("third slice: %v, want ErrIndexOverflow naming the count", err)
	}
	a.Release()
	if _, err := p.AllocMayRelease(st, 64, false, nil); !errors.Is(err, handle.ErrIndexOverflow) {
		t.Fatalf("third slice without release: %v, want ErrIndexOverflow", err)
	}
	if p.Pages() != 2 || st.BytesAllocated() != 128 {
		t.Fatalf("refused allocs changed the pool: %d slices, %d bytes", p.Pages(), st.BytesAllocated())
	}
	c := directAlloc(t, p, st, 64, true, nil)
	if c.Location().Page() != 0 || b.Location().Page() != 1 || p.Pages() != 2 {
		t.Errorf("after releasing the free slice: c at %v, b at %v", c.Location(), b.Location())
	}
	p.Check()
	b.Release()
	c.Release()
}

func TestDirectAllocWithoutTheGraphKeepsAMarkedFreeSlice(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	var zero uint64
	p := NewDirect(32, DedicatedIndex, &zero, Limits{})
	a := directAlloc(t, p, st, 64, true, g)
	f := singleTaint(t, p, g, a, 8)
	a.Release()

	b, err := p.Alloc(st, 64) // Pool.Alloc: no graph to clear marks in
	if err != nil {
		t.Fatal(err)
	}
	if p.Pages() != 2 {
		t.Fatalf("Pool.Alloc released a marked free slice without the graph: %d slices", p.Pages())
	}
	if !p.Reclaim(st, g) || p.Pages() != 1 {
		t.Fatalf("Reclaim with the graph kept the marked free slice")
	}
	if _, live := g.Err(f); live {
		t.Errorf("failure %d still live after its slice was released", f)
	}
	b.Release()
}

func TestDirectAllocRefusedByStorageAddsNothing(t *testing.T) {
	st := hoststorage.NewFaulty(hoststorage.NewHost(32, nil))
	p := NewDirect(32, DedicatedIndex, nil, Limits{})
	st.RefuseNextAllocs(1)
	if _, err := p.AllocMayRelease(st, 64, true, nil); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("refused alloc: %v, want ErrOutOfMemory", err)
	}
	if p.Pages() != 0 || len(p.slots) != 0 || p.Report().PagesPeak != 0 {
		t.Errorf("refused alloc changed the pool: %+v", p.Report())
	}
	p.Check()
}
