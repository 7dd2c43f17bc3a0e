package pool

import (
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// tb is what the helpers need of *testing.T, *testing.B and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// slicedReserve serves size the way the memory does: held room first, else
// a new page.
func slicedReserve(t tb, p *Sliced, st storage.Storage, size uint64, g *handle.ErrorGraph) *handle.Handle {
	t.Helper()
	if h := p.TryReserve(st, size, g, Bind{}); h != nil {
		return h
	}
	h, err := p.Alloc(st, size)
	if err != nil {
		t.Fatalf("reserve %d bytes: %v", size, err)
	}
	return h
}

// ownSlice returns the slice ref's location names in p, failing the test
// when there is none or it carries another allocation.
func ownSlice(t tb, p Pool, ref handle.Ref) *Slice {
	t.Helper()
	loc := ref.Descriptor().Location()
	s := p.Slice(loc)
	if s == nil {
		t.Fatalf("allocation %d at %v: no slice there", ref.Descriptor().ID(), loc)
	}
	if s.Handle().Descriptor() != ref.Descriptor() {
		t.Fatalf("allocation %d at %v: the slice there belongs to allocation %d", ref.Descriptor().ID(), loc, s.Handle().ID())
	}
	return s
}

// fillPattern writes a pattern derived from seed into r's bytes (Host).
func fillPattern(t tb, st storage.Storage, r storage.Region, seed byte) {
	t.Helper()
	res, err := st.Resolve(r)
	if err != nil {
		t.Fatalf("resolve %+v: %v", r, err)
	}
	for i := range res.Bytes {
		res.Bytes[i] = seed + byte(i*7)
	}
}

// expectPattern checks that r's bytes hold fillPattern's pattern for seed.
func expectPattern(t tb, st storage.Storage, r storage.Region, seed byte) {
	t.Helper()
	res, err := st.Resolve(r)
	if err != nil {
		t.Fatalf("resolve %+v: %v", r, err)
	}
	if uint64(len(res.Bytes)) != r.Size {
		t.Fatalf("window %+v resolves to %d bytes", r, len(res.Bytes))
	}
	for i, b := range res.Bytes {
		if want := seed + byte(i*7); b != want {
			t.Fatalf("byte %d of %+v is %d, want %d", i, r, b, want)
		}
	}
}

// design §12.4 scenario 19 (accept).
func TestSlicedAcceptsUpToMaxSliceOrANearPageSize(t *testing.T) {
	cases := []struct {
		name     string
		nearPage bool
		size     uint64
		want     bool
	}{
		{"MaxSlice", false, 64 << 10, true},
		{"AboveMaxSlice", false, 64<<10 + 1, false},
		{"NearPageOff7MiB", false, 7 * MiB, false},
		{"NearPage7MiB", true, 7 * MiB, true},  // leaves 1/8 of the page
		{"NearPage6MiB", true, 6 * MiB, false}, // leaves 1/4 of the page
		{"NearPageWhole", true, 8 * MiB, true}, // leaves nothing
		{"NearPageAbove", true, 8*MiB + 1, false},
		{"NearPageSmall", true, 1024, true}, // still ≤ maxSlice
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewSliced(8*MiB, 64<<10, c.nearPage, 32, 1, Limits{})
			if got := p.Accept(c.size); got != c.want {
				t.Fatalf("Accept(%d) = %v, want %v", c.size, got, c.want)
			}
		})
	}
}

func TestSlicedMaxSliceIsCappedAtThePageSize(t *testing.T) {
	p := NewSliced(1*MiB, 4*MiB, false, 32, 1, Limits{})
	if p.Accept(1*MiB + 1) {
		t.Fatal("a pool of 1 MiB pages accepts more than a page")
	}
	if k := p.Report().Kind.(SlicedKind); k.MaxSlice != 1*MiB {
		t.Fatalf("max slice %d, want the page size %d", k.MaxSlice, 1*MiB)
	}
}

func TestSlicedTryReserveCoalescesEachPageItVisits(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewSliced(8*MiB, 8*MiB, false, 32, 1, Limits{})
	a := slicedReserve(t, p, st, 3*MiB, nil)
	b := slicedReserve(t, p, st, 5*MiB, nil)
	a.Release()
	b.Release()
	// Two free slices of 3 and 5 MiB: only their merge holds 8 MiB.
	h := p.TryReserve(st, 8*MiB, nil, Bind{})
	if h == nil {
		t.Fatal("8 MiB refused on a page whose free slices add up to 8 MiB")
	}
	if p.Pages() != 1 || h.Location().Slice() != 0 {
		t.Fatalf("8 MiB at %v on %d pages, want slice 0 of the only page", h.Location(), p.Pages())
	}
	p.Check()
}

// design §12.4 scenario 19 (guards).
func TestGuardedPageServesNoReservation(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewSliced(8*MiB, 8*MiB, false, 32, 1, Limits{})
	a := slicedReserve(t, p, st, 4*MiB, nil)
	guard, ok := p.Guard(a.Location())
	if !ok || !guard.IsPageGuard() {
		t.Fatalf("Guard(%v) = %v, %v; want a page guard", a.Location(), guard, ok)
	}
	if h := p.TryReserve(st, 1*MiB, nil, Bind{}); h != nil {
		t.Fatalf("a guarded page with 4 MiB free served 1 MiB at %v", h.Location())
	}
	b := slicedReserve(t, p, st, 1*MiB, nil)
	if b.Location().Page() != 1 {
		t.Fatalf("1 MiB at %v, want the new page 1", b.Location())
	}
	guard.Release()
	guard.Release() // idempotent
	c := p.TryReserve(st, 1*MiB, nil, Bind{})
	if c == nil || c.Location().Page() != 0 {
		t.Fatalf("after the guard went, 1 MiB at %v, want page 0", c)
	}
	p.Check()
}

// design §12.4 scenario 19 (guards, renumbering).
func TestGuardedPageIsNeverReleasedAndRenumberedSurvivorsStillResolve(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	p := NewSliced(1*MiB, 1*MiB, false, 32, 1, Limits{})
	full := func() *handle.Handle { return slicedReserve(t, p, st, 1*MiB, g) }
	a, b, c, d := full(), full(), full(), full() // one per page 0..3
	guard, _ := p.Guard(b.Location())
	fillPattern(t, st, ownSlice(t, p, d).Region, 9)
	bound := d.Binding()
	d.Release() // the binding alone keeps d's slice live
	a.Release()
	b.Release()
	c.Release()

	pages, bytes := p.ReleaseEmpty(st, g)
	if pages != 2 || bytes != 2*MiB {
		t.Fatalf("released %d pages, %d bytes; want 2 pages (a's and c's), %d bytes", pages, bytes, 2*MiB)
	}
	if p.Pages() != 2 || st.BytesAllocated() != 2*MiB {
		t.Fatalf("%d pages, %d bytes held; want the guarded page and d's", p.Pages(), st.BytesAllocated())
	}
	// Survivors renumbered densely: the guarded page 1 → 0, d's page 3 → 1.
	if loc := bound.Location(); loc.Page() != 1 || loc.Slice() != 0 {
		t.Fatalf("binding at %v after renumbering, want page 1 slice 0", loc)
	}
	expectPattern(t, st, ownSlice(t, p, bound).Region, 9)
	p.Check()

	guard.Release()
	if pages, _ := p.ReleaseEmpty(st, g); pages != 1 {
		t.Fatalf("after the guard went, released %d pages, want 1", pages)
	}
	if loc := bound.Location(); loc.Page() != 0 {
		t.Fatalf("binding at %v, want page 0", loc)
	}
	expectPattern(t, st, ownSlice(t, p, bound).Region, 9)
	bound.Release()
	if pages, _ := p.ReleaseEmpty(st, g); pages != 1 || st.BytesAllocated() != 0 {
		t.Fatalf("released %d pages, %d bytes left; want the last page gone", pages, st.BytesAllocated())
	}
}

func TestSlicedCleanupReleasesOnlyWhenExplicit(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewSliced(2*MiB, 2*MiB, false, 32, 1, Limits{})
	slicedReserve(t, p, st, 1*MiB, nil).Release()
	p.Cleanup(st, 1, Periodic, nil)
	if p.Pages() != 1 {
		t.Fatalf("a periodic cleanup left %d pages, want the empty page kept", p.Pages())
	}
	p.Cleanup(st, 2, Explicit, nil)
	if p.Pages() != 0 || st.BytesAllocated() != 0 {
		t.Fatalf("an explicit cleanup left %d pages, %d bytes", p.Pages(), st.BytesAllocated())
	}
}

func TestSlicedAllocBeyondItsPageLimitIsRefusedChangingNothing(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewSliced(1*MiB, 1*MiB, false, 32, 1, Limits{MaxPages: 3})
	var hs []*handle.Handle
	for range 3 {
		hs = append(hs, slicedReserve(t, p, st, 1*MiB, nil))
	}
	before := p.Report()
	held := st.BytesAllocated()
	h, err := p.Alloc(st, 1*MiB)
	if !errors.Is(err, handle.ErrIndexOverflow) || h != nil {
		t.Fatalf("4th page: %v, %v; want ErrIndexOverflow", h, err)
	}
	if p.Report() != before || st.BytesAllocated() != held {
		t.Fatalf("refused page changed the pool: %+v → %+v, %d → %d bytes", before, p.Report(), held, st.BytesAllocated())
	}
	for _, h := range hs {
		ownSlice(t, p, h)
	}
	// Room freed on an existing page is still served.
	hs[1].Release()
	if h := p.TryReserve(st, 1*MiB, nil, Bind{}); h == nil || h.Location().Page() != 1 {
		t.Fatalf("reuse of the freed page: %v", h)
	}
	p.Check()
}

func TestSlicedAllocRefusedByStorageChangesNothing(t *testing.T) {
	st := hoststorage.NewFaulty(hoststorage.NewSim(32, nil))
	p := NewSliced(1*MiB, 1*MiB, false, 32, 1, Limits{})
	a := slicedReserve(t, p, st, 1*MiB, nil)
	st.RefuseNextAllocs(1)
	if _, err := p.Alloc(st, 1*MiB); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("refused page: %v, want ErrOutOfMemory", err)
	}
	if p.Pages() != 1 || st.BytesAllocated() != 1*MiB {
		t.Fatalf("%d pages, %d bytes after a refused page", p.Pages(), st.BytesAllocated())
	}
	ownSlice(t, p, a)
	if b, err := p.Alloc(st, 1*MiB); err != nil || b.Location().Page() != 1 {
		t.Fatalf("next page: %v, %v; want page 1", b, err)
	}
}

func TestSlicedAllocOfMoreThanAPageIsRefusedChangingNothing(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewSliced(1*MiB, 1*MiB, false, 32, 1, Limits{})
	if _, err := p.Alloc(st, 1*MiB+1); !errors.Is(err, ErrBufferTooBig) {
		t.Fatalf("Alloc above the page size: %v, want ErrBufferTooBig", err)
	}
	if p.Pages() != 0 || st.BytesAllocated() != 0 {
		t.Fatalf("%d pages, %d bytes after a refused Alloc", p.Pages(), st.BytesAllocated())
	}
}

func TestSlicedReportCountsLiveSlicesPaddingAndPeak(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewSliced(1024, 1024, false, 32, 1, Limits{})
	a := slicedReserve(t, p, st, 40, nil)   // 40 + 24
	b := slicedReserve(t, p, st, 1000, nil) // a new page, 1000 + 8
	c := slicedReserve(t, p, st, 100, nil)  // page 0, 100 + 28
	b.Release()
	p.ReleaseEmpty(st, nil)
	want := Report{
		Kind:         SlicedKind{PageSize: 1024, MaxSlice: 1024},
		Usage:        Usage{Allocations: 2, BytesInUse: 140, BytesPadding: 52, BytesReserved: 1024},
		Pages:        1,
		PagesPeak:    2,
		LargestAlloc: 1000,
	}
	if got := p.Report(); got != want {
		t.Fatalf("report %+v, want %+v", got, want)
	}
	a.Release()
	c.Release()
}

// design §12.4 scenario 18: after any sequence of reserve, free, coalesce,
// guard and release-empty, each page's slices are contiguous and sum to its
// size, every live descriptor's location names its own slice, and every
// live allocation still holds its bytes.
func TestSlicedPagesStayTiledUnderAnySequenceOfOperations(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		align := rapid.SampledFrom([]uint64{1, 32, 50}).Draw(rt, "align")
		pageSize := rapid.SampledFrom([]uint64{256, 1000, 4096}).Draw(rt, "pageSize")
		st := hoststorage.NewHost(32, nil)
		g := handle.NewErrorGraph()
		p := NewSliced(pageSize, pageSize, false, align, 1, Limits{})
		type alloc struct {
			h    *handle.Handle
			size uint64
			seed byte
		}
		var live []alloc
		var guards []*PageGuard
		seed := byte(0)

		rt.Repeat(map[string]func(*rapid.T){
			"reserve": func(rt *rapid.T) {
				size := rapid.Uint64Range(1, pageSize).Draw(rt, "size")
				if storage.SatAdd(size, storage.Padding(size, align)) > pageSize {
					rt.Skip("does not fit a page with its padding")
				}
				h := p.TryReserve(st, size, g, Bind{})
				if h == nil {
					var err error
					if h, err = p.Alloc(st, size); err != nil {
						rt.Fatalf("Alloc(%d): %v", size, err)
					}
				}
				s := ownSlice(rt, p, h)
				if p.pages[h.Location().Page()].guarded() {
					rt.Fatalf("reservation at %v on a guarded page", h.Location())
				}
				if s.Region.Size != size || s.Padding != storage.Padding(size, align) {
					rt.Fatalf("slice %+v padding %d for %d bytes", s.Region, s.Padding, size)
				}
				seed++
				fillPattern(rt, st, s.Region, seed)
				live = append(live, alloc{h, size, seed})
			},
			"free": func(rt *rapid.T) {
				if len(live) == 0 {
					rt.Skip("nothing live")
				}
				i := rapid.IntRange(0, len(live)-1).Draw(rt, "i")
				live[i].h.Release()
				live = append(live[:i], live[i+1:]...)
			},
			"coalesce": func(rt *rapid.T) {
				if p.Pages() == 0 {
					rt.Skip("no pages")
				}
				i := rapid.IntRange(0, p.Pages()-1).Draw(rt, "page")
				p.pages[i].coalesce(g)
			},
			"guard": func(rt *rapid.T) {
				if p.Pages() == 0 {
					rt.Skip("no pages")
				}
				i := rapid.IntRange(0, p.Pages()-1).Draw(rt, "page")
				guard, ok := p.Guard(handle.MustLocation(1, i, 0))
				if !ok {
					rt.Fatalf("no guard for page %d of %d", i, p.Pages())
				}
				guards = append(guards, guard)
			},
			"unguard": func(rt *rapid.T) {
				if len(guards) == 0 {
					rt.Skip("no guards")
				}
				i := rapid.IntRange(0, len(guards)-1).Draw(rt, "i")
				guards[i].Release()
				guards = append(guards[:i], guards[i+1:]...)
			},
			"releaseEmpty": func(rt *rapid.T) {
				guarded := p.guardedPages()
				p.ReleaseEmpty(st, g)
				if p.guardedPages() != guarded {
					rt.Fatalf("ReleaseEmpty changed the guarded pages from %d to %d", guarded, p.guardedPages())
				}
			},
			"": func(rt *rapid.T) {
				p.Check()
				var inUse uint64
				for _, a := range live {
					s := ownSlice(rt, p, a.h)
					if s.Region.Size != a.size {
						rt.Fatalf("allocation %d holds %d bytes, want %d", a.h.ID(), s.Region.Size, a.size)
					}
					expectPattern(rt, st, s.Region, a.seed)
					inUse += a.size
				}
				u := p.Usage()
				if u.Allocations != uint64(len(live)) || u.BytesInUse != inUse {
					rt.Fatalf("usage %+v, want %d allocations of %d bytes", u, len(live), inUse)
				}
				if want := uint64(p.Pages()) * pageSize; st.BytesAllocated() != want || u.BytesReserved != want {
					rt.Fatalf("%d bytes held, %d reserved; want %d for %d pages", st.BytesAllocated(), u.BytesReserved, want, p.Pages())
				}
			},
		})
	})
}
