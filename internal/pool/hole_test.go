package pool

import (
	"bytes"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// holePages builds two 4 MiB pages of four 1 MiB slices each, the second
// and fourth of each page freed: 4 MiB free in all, no hole of 2 MiB. It
// returns the pool and the live handles, page by page (a, c; e, g).
func holePages(t *testing.T, st storage.Storage, g *handle.ErrorGraph) (*Sliced, []*handle.Handle) {
	t.Helper()
	p := NewSliced(4*MiB, 4*MiB, false, 32, 5, Limits{})
	var all, live []*handle.Handle
	for i := range 8 {
		h := slicedReserve(t, p, st, MiB, g)
		if int(h.Location().Page()) != i/4 {
			t.Fatalf("setup: slice %d at %v, want page %d", i, h.Location(), i/4)
		}
		all = append(all, h)
	}
	for i, h := range all {
		if i%2 == 1 {
			h.Release() // after every reservation: none reuses it
			continue
		}
		live = append(live, h)
	}
	return p, live
}

func TestPlanHoleMovesTheCheapestRunAwaySoTheRetryFitsAndEveryByteSurvives(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	p, live := holePages(t, st, g)
	if h := p.TryReserve(st, 2*MiB, g, Bind{}); h != nil {
		t.Fatal("setup: a 2 MiB hole exists already")
	}
	a := live[0]
	src, _ := st.Resolve(p.Slice(a.Location()).Region)
	for i := range src.Bytes {
		src.Bytes[i] = byte(i%253 + 1)
	}
	want := slices.Clone(src.Bytes)

	if !p.CanHole(2 * MiB) {
		t.Fatal("CanHole(2 MiB) = false with 4 MiB free on two pages")
	}
	plan, info := p.PlanHole(2*MiB, CompactLimits{}, st, g)
	if got := moveIDs(plan); !slices.Equal(got, ids(a)) {
		t.Fatalf("plan moves %v, want only page 0's first allocation %v (the cheapest run, lowest page and offset)", got, ids(a))
	}
	if got := targetPages(plan); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("targets on pages %v, want [1]: never the run's own page", got)
	}
	if info.Pages != 0 || info.BytesFreed != 0 {
		t.Fatalf("plan info %+v: a hole frees no page", info)
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	p.Commit(landed, g)
	p.Check()
	dst, _ := st.Resolve(p.Slice(a.Location()).Region)
	if !bytes.Equal(dst.Bytes, want) || a.Location().Page() != 1 {
		t.Fatalf("moved allocation at %v with its bytes equal = %v; want page 1, equal", a.Location(), bytes.Equal(dst.Bytes, want))
	}
	h := p.TryReserve(st, 2*MiB, g, Bind{})
	if h == nil {
		t.Fatal("the retried 2 MiB reservation found no room after the hole was made")
	}
	if h.Location().Page() != 0 {
		t.Fatalf("2 MiB landed at %v, want page 0 (the hole)", h.Location())
	}
	h.Release()
	if p.Pages() != 2 {
		t.Fatalf("%d pages, want 2: no page was added", p.Pages())
	}
}

func TestPlanHoleLeavesBoundAndGuardedAllocationsAlone(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	p, live := holePages(t, st, g)
	// a bound: page 0's cheapest run is then the one holding c.
	b := live[0].Binding()
	plan, _ := p.PlanHole(2*MiB, CompactLimits{}, st, g)
	if got := moveIDs(plan); !slices.Equal(got, ids(live[1])) {
		t.Fatalf("with a bound, plan moves %v, want c %v", got, ids(live[1]))
	}
	plan.Abandon()
	b.Release()

	// Page 1 guarded: no target room anywhere but page 0 itself, and page
	// 1's runs are not candidates: nothing to plan.
	guard, _ := p.Guard(live[2].Location())
	plan, _ = p.PlanHole(2*MiB, CompactLimits{}, st, g)
	if !plan.IsEmpty() {
		t.Fatalf("with the other page guarded, plan moves %v, want none", moveIDs(plan))
	}
	if p.CanHole(2 * MiB) {
		t.Fatal("CanHole = true with one unguarded page")
	}
	guard.Release()
	p.Check()

	// Limits: a run costing 1 MiB does not fit MaxBytes below it.
	plan, _ = p.PlanHole(2*MiB, CompactLimits{MaxBytes: MiB / 2}, st, g)
	if !plan.IsEmpty() {
		t.Fatalf("under MaxBytes 512 KiB, plan moves %v, want none", moveIDs(plan))
	}
	// Nothing larger than a page has a run.
	if plan, _ := p.PlanHole(5*MiB, CompactLimits{}, st, g); !plan.IsEmpty() {
		t.Fatal("a 5 MiB hole planned on 4 MiB pages")
	}
	p.Check()
}

// cheapestWindow against a brute force over every run of every layout of
// up to 8 slices: the least live bytes among runs that hold need.
func TestCheapestWindowIsTheLeastLiveRunThatHoldsNeed(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	sizes := []uint64{1, 2, 1, 3, 1, 1, 2, 1} // MiB, 12 in all
	for mask := range 1 << len(sizes) {
		p := NewSliced(12*MiB, 12*MiB, false, 32, 5, Limits{})
		var all, hs []*handle.Handle
		for _, s := range sizes {
			all = append(all, slicedReserve(t, p, st, s*MiB, g))
		}
		for i, h := range all {
			if mask&(1<<i) != 0 {
				h.Release() // free, once every slice is carved
				continue
			}
			hs = append(hs, h)
		}
		pg := p.pages[0]
		pg.coalesce(g)
		for _, need := range []uint64{1, 2, 3, 5, 8, 12} {
			got, ok := pg.cheapestWindow(0, need*MiB)
			// brute force over the layout (free runs coalesced or not, the
			// live bytes of a run of whole original slices are the same)
			best, found := uint64(0), false
			for i := range sizes {
				var span, live uint64
				for j := i; j < len(sizes); j++ {
					span += sizes[j] * MiB
					if mask&(1<<j) == 0 {
						live += sizes[j] * MiB
					}
					if span >= need*MiB {
						if !found || live < best {
							best, found = live, true
						}
						break
					}
				}
			}
			if ok != found || (ok && got.live != best) {
				t.Fatalf("layout %08b need %d MiB: cheapestWindow = %+v, %v; want live %d, %v", mask, need, got, ok, best, found)
			}
		}
		for _, h := range hs {
			h.Release()
		}
	}
}

// PlanUnmap on granular pages: page 0's first granule holds one live 1 MiB
// slice beside a free MiB; page 1 has a free MiB inside a mapped granule.
// Moving the slice there maps nothing and frees the granule, which the
// cleanup then unmaps; every byte survives.
func TestPlanUnmapFreesAGranuleByMovingIntoMappedRoom(t *testing.T) {
	st := hoststorage.NewGranularHost(32, 2*MiB, nil)
	g := handle.NewErrorGraph()
	p := NewSliced(8*MiB, 8*MiB, false, 32, 5, Limits{})
	x := slicedReserve(t, p, st, MiB, g)
	y := slicedReserve(t, p, st, MiB, g)
	slicedReserve(t, p, st, 6*MiB, g)
	w := slicedReserve(t, p, st, 7*MiB, g)
	if y.Location().Page() != 0 || w.Location().Page() != 1 {
		t.Fatalf("setup: y at %v, w at %v", y.Location(), w.Location())
	}
	x.Release()
	p.UnmapFree(st)
	mappedBefore := p.Usage().BytesReserved - p.Usage().BytesUnmapped
	src, _ := st.Resolve(p.Slice(y.Location()).Region)
	for i := range src.Bytes {
		src.Bytes[i] = byte(i%241 + 7)
	}
	want := slices.Clone(src.Bytes)

	if !p.CanUnmap() {
		t.Fatal("CanUnmap = false with a free mapped MiB on page 1")
	}
	plan, info := p.PlanUnmap(0, CompactLimits{}, st, g)
	if got := moveIDs(plan); !slices.Equal(got, ids(y)) {
		t.Fatalf("plan moves %v, want y %v", got, ids(y))
	}
	if info.BytesFreed != 2*MiB || info.Pages != 0 {
		t.Fatalf("plan info %+v, want one 2 MiB granule freed, no page", info)
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	p.Commit(landed, g)
	if n := p.UnmapFree(st); n != 2*MiB {
		t.Fatalf("UnmapFree after the commit unmapped %d bytes, want the 2 MiB granule", n)
	}
	p.Check()
	if after := p.Usage().BytesReserved - p.Usage().BytesUnmapped; after != mappedBefore-2*MiB {
		t.Fatalf("mapped bytes %d → %d, want 2 MiB fewer", mappedBefore, after)
	}
	dst, _ := st.Resolve(p.Slice(y.Location()).Region)
	if y.Location().Page() != 1 || !bytes.Equal(dst.Bytes, want) {
		t.Fatalf("y at %v, bytes equal %v; want page 1 and its bytes", y.Location(), bytes.Equal(dst.Bytes, want))
	}
	// A goal above what any run frees plans nothing.
	if plan, _ := p.PlanUnmap(16*MiB, CompactLimits{}, st, g); !plan.IsEmpty() {
		t.Fatal("a 16 MiB goal was planned on 16 MiB of pages")
	}
}

// PlanUnmapWith takes a lone small-pool page's granule back by moving its
// live slice into mapped room on an arena page: the budget is the device's,
// whichever pool gives the granule back.
func TestPlanUnmapWithMovesASmallSliceIntoTheArenaToFreeItsGranule(t *testing.T) {
	st := hoststorage.NewGranularHost(32, 2*MiB, nil)
	g := handle.NewErrorGraph()
	a := NewArena(wideSizing, Limits{}, nil)
	big, err := a.Reserve(st, 7*MiB, g, Bind{}) // 8 MiB page, its last granule half free and mapped
	if err != nil {
		t.Fatal(err)
	}
	defer big.Release()
	small := NewSliced(8*MiB, 64<<10, false, 32, 1, Limits{})
	y, want := patternedSmallSlice(t, small, st, g, 3)
	if plan, _ := small.PlanUnmap(0, CompactLimits{}, st, g); !plan.IsEmpty() {
		t.Fatal("the small pool alone planned a move: it has one page")
	}
	if !a.CanUnmapWith(small) {
		t.Fatal("CanUnmapWith = false with a free mapped MiB on the arena page")
	}
	plan, info := a.PlanUnmapWith(small, 0, CompactLimits{}, st, g)
	if got := moveIDs(plan); !slices.Equal(got, ids(y)) || info.BytesFreed != 2*MiB {
		t.Fatalf("plan moves %v freeing %d bytes, want y %v and 2 MiB", got, info.BytesFreed, ids(y))
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatal(err)
	}
	a.CommitWith(small, landed, st, g)
	if got := y.Location().Pool(); got == 1 {
		t.Fatalf("y still in the small pool at %v", y.Location())
	}
	if n := small.UnmapFree(st); n != 2*MiB {
		t.Fatalf("the small page unmapped %d bytes, want its 2 MiB granule", n)
	}
	small.Check()
	a.Current().Check()
	dst, _ := st.Resolve(a.Current().Slice(y.Location()).Region)
	if !bytes.Equal(dst.Bytes, want) {
		t.Fatal("y's bytes differ after the move")
	}
	y.Release()
}
