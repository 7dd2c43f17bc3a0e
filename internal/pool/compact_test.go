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

// compactPages builds a sliced pool of 4 MiB pages whose pages hold exactly
// the live sizes (in MiB) given, one page per entry, each page's rest taken
// by a filler that is then freed. It returns the pool and the live handles
// per page.
func compactPages(t *testing.T, st storage.Storage, g *handle.ErrorGraph, pages ...[]uint64) (*Sliced, [][]*handle.Handle) {
	t.Helper()
	p := NewSliced(4*MiB, 4*MiB, false, 32, 5, Limits{})
	live := fillPages(t, func(size uint64) *handle.Handle { return slicedReserve(t, p, st, size, g) }, 4, pages)
	return p, live
}

// targetPages lists the page each move's target lies on, in plan order.
func targetPages(r *relocation.Relocation) []uint32 {
	var out []uint32
	for _, m := range r.Moves() {
		out = append(out, m.Target().Location().Page())
	}
	return out
}

func TestPlanCompactEmptiesTheSparsestPageIntoTheBestFitAndEveryByteSurvives(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	// Page 0 holds 1 MiB, page 1 3 MiB (a 1 MiB hole), page 2 2 MiB (a 2
	// MiB hole): the 1 MiB goes to page 1's hole, the best fit, not page
	// 2's; page 2's 2 MiB then finds no room and stays.
	p, live := compactPages(t, st, g, []uint64{1}, []uint64{3}, []uint64{2})
	a := live[0][0]
	src, _ := st.Resolve(p.Slice(a.Location()).Region)
	for i := range src.Bytes {
		src.Bytes[i] = byte(i%251 + 1)
	}
	want := slices.Clone(src.Bytes)

	if !p.CanCompact(false) {
		t.Fatal("CanCompact = false with 5 MiB free over three 4 MiB pages")
	}
	plan, info := p.PlanCompact(CompactLimits{}, st, g)
	if got := moveIDs(plan); !slices.Equal(got, ids(a)) {
		t.Fatalf("plan moves %v, want only page 0's %v", got, ids(a))
	}
	if got := targetPages(plan); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("targets on pages %v, want [1] (the exact 1 MiB hole)", got)
	}
	if info.Pages != 1 || info.BytesFreed != 4*MiB {
		t.Fatalf("plan info %+v, want 1 page, 4 MiB freed", info)
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	p.Commit(landed, g)
	if n, b := p.ReleaseEmpty(st, g); n != 1 || b != 4*MiB {
		t.Fatalf("ReleaseEmpty gave back %d pages (%d bytes), want the emptied 4 MiB page", n, b)
	}
	p.Check()
	if p.Pages() != 2 {
		t.Fatalf("%d pages left, want 2", p.Pages())
	}
	dst, err := st.Resolve(p.Slice(a.Location()).Region)
	if err != nil {
		t.Fatalf("resolve the moved allocation: %v", err)
	}
	if !bytes.Equal(dst.Bytes, want) {
		t.Fatal("the moved allocation's bytes differ from what was written")
	}
	if a.Location().Page() != 0 { // page 1, renumbered after page 0 went
		t.Fatalf("moved allocation at %v, want page 0", a.Location())
	}
}

func TestPlanCompactEmptiesAPageWholeOrLeavesItAlone(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	// Page 0's two 1 MiB find one 1 MiB hole between them on page 1:
	// moving one would free nothing, so nothing moves.
	p, _ := compactPages(t, st, g, []uint64{1, 1}, []uint64{3})
	before := p.Usage()
	plan, info := p.PlanCompact(CompactLimits{}, st, g)
	if !plan.IsEmpty() || info.Pages != 0 {
		t.Fatalf("plan moves %d (info %+v), want none", plan.Len(), info)
	}
	p.Check()
	if after := p.Usage(); after.BytesOccupied() != before.BytesOccupied() {
		t.Fatalf("an abandoned page left %d bytes occupied, want %d", after.BytesOccupied(), before.BytesOccupied())
	}
}

func TestPlanCompactNeitherMovesNorTargetsGuardedOrBoundPages(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	// Page 0: 1 MiB; page 1: 2 MiB (2 MiB hole); page 2: 3 MiB (1 MiB hole,
	// the best fit for page 0's allocation, but guarded).
	p, live := compactPages(t, st, g, []uint64{1}, []uint64{2}, []uint64{3})
	guard, _ := p.Guard(live[2][0].Location())
	plan, _ := p.PlanCompact(CompactLimits{}, st, g)
	if got := targetPages(plan); !slices.Equal(got, []uint32{1}) {
		t.Fatalf("targets on pages %v, want [1]: the best fit is guarded", got)
	}
	plan.Abandon()
	guard.Release()

	// A bound allocation keeps its page: page 0 is no source.
	b := live[0][0].Binding()
	defer b.Release()
	plan, _ = p.PlanCompact(CompactLimits{}, st, g)
	defer plan.Abandon()
	for _, m := range plan.Moves() {
		if m.Allocation().ID() == live[0][0].ID() {
			t.Fatal("a bound allocation was planned")
		}
	}
}

func TestPlanCompactStaysWithinItsLimits(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	p, _ := compactPages(t, st, g, []uint64{1}, []uint64{1}, []uint64{2})
	for _, tc := range []struct {
		lim   CompactLimits
		moves int
	}{
		{CompactLimits{}, 2},
		{CompactLimits{MaxMoves: 1}, 1},
		{CompactLimits{MaxBytes: MiB / 2}, 0},
		{CompactLimits{MaxBytes: MiB}, 1},
	} {
		plan, info := p.PlanCompact(tc.lim, st, g)
		if plan.Len() != tc.moves || info.Pages != tc.moves {
			t.Errorf("limits %+v: %d moves, %d pages, want %d of each", tc.lim, plan.Len(), info.Pages, tc.moves)
		}
		if tc.lim.MaxBytes > 0 && plan.Bytes() > tc.lim.MaxBytes {
			t.Errorf("limits %+v: plan copies %d bytes", tc.lim, plan.Bytes())
		}
		plan.Abandon()
		p.Check()
	}
}

func TestPlanCompactRefusesAPlanThatOnlyMapsWhatItUnmaps(t *testing.T) {
	st := hoststorage.NewGranularSim(32, 2*MiB, nil)
	g := handle.NewErrorGraph()
	// 8 MiB pages of 2 MiB granules: page 0 holds 2 MiB live (one granule
	// mapped once the free ones go), page 1 6 MiB live and an unmapped 2
	// MiB hole. Moving the 2 MiB maps a granule to free one, and moving the
	// 6 MiB the other way maps three to free three: nothing gained either way.
	p := NewSliced(8*MiB, 8*MiB, false, 32, 5, Limits{})
	slicedReserve(t, p, st, 2*MiB, g)
	f0 := slicedReserve(t, p, st, 6*MiB, g)
	slicedReserve(t, p, st, 6*MiB, g)
	f1 := slicedReserve(t, p, st, 2*MiB, g)
	f0.Release()
	f1.Release()
	p.UnmapFree(st)
	if !p.CanCompact(false) {
		t.Fatal("CanCompact = false with a page of free room")
	}
	plan, info := p.PlanCompact(CompactLimits{}, st, g)
	defer plan.Abandon()
	if !plan.IsEmpty() || info.Refused != 2 {
		t.Fatalf("plan moves %d (info %+v), want none and both pages refused by the cost rule", plan.Len(), info)
	}
	p.Check()
}

func TestCanCompactIsFalseWithoutAPageOfRoom(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	// 3 MiB live on each 4 MiB page: 2 MiB free in all, and a tight page
	// of either page's live bytes (4 MiB, in 2 MiB tiles) frees nothing.
	p, _ := compactPages(t, st, g, []uint64{3}, []uint64{3})
	if p.CanCompact(true) {
		t.Fatal("CanCompact = true with 2 MiB free over two 4 MiB pages, neither repackable")
	}
	if plan, _ := p.PlanCompact(CompactLimits{}, st, g); !plan.IsEmpty() {
		t.Fatal("a plan moved something CanCompact ruled out")
	}
}

// Under pressure (a Goal) a whole page whose live slices do not all find
// room on the other pages moves what fits there and the rest onto a new
// page of its packed size: of page 0's two 1 MiB slices, 2 MiB apart, one
// takes page 1's 1 MiB hole and the other a fresh 2 MiB page (a tile), and
// page 0's 4 MiB go back, 2 MiB net, every byte intact. Without a goal (a
// defragmentation at a quiet moment) nothing moves, and a storage that
// refuses the fresh page leaves everything as it was.
func TestPlanCompactUnderPressureRepacksAPageOntoATightNewPage(t *testing.T) {
	g := handle.NewErrorGraph()
	host := hoststorage.NewHost(32, nil)
	st := hoststorage.NewFaulty(host)
	p, live := compactPages(t, st, g, []uint64{1, 1}, []uint64{3})
	var want [][]byte
	for n, h := range live[0] {
		r, _ := st.Resolve(p.Slice(h.Location()).Region)
		for i := range r.Bytes {
			r.Bytes[i] = byte((i+n)%251 + 1)
		}
		want = append(want, slices.Clone(r.Bytes))
	}
	before := st.BytesAllocated()
	if !p.CanCompact(true) {
		t.Fatal("CanCompact(under pressure) = false with a 4 MiB page of 2 MiB live (repackable)")
	}
	if p.CanCompact(false) {
		t.Fatal("CanCompact(no pressure) = true with 1 MiB free over two 4 MiB pages: only a repack could help, and none runs there")
	}

	plan, info := p.PlanCompact(CompactLimits{}, st, g)
	if !plan.IsEmpty() || info.Repacked != 0 {
		t.Fatalf("without a goal the plan moves %d (info %+v), want none", plan.Len(), info)
	}
	st.RefuseNextAllocs(1)
	plan, info = p.PlanCompact(CompactLimits{Goal: MiB}, st, g)
	if !plan.IsEmpty() || info.Repacked != 0 || p.Pages() != 2 || st.BytesAllocated() != before {
		t.Fatalf("fresh page refused: plan moves %d (info %+v), %d pages, %d bytes allocated; want nothing changed", plan.Len(), info, p.Pages(), st.BytesAllocated())
	}
	p.Check()

	plan, info = p.PlanCompact(CompactLimits{Goal: MiB}, st, g)
	if got := moveIDs(plan); !slices.Equal(got, ids(live[0]...)) {
		t.Fatalf("plan moves %v, want page 0's %v", got, ids(live[0]...))
	}
	if got := targetPages(plan); !slices.Equal(got, []uint32{1, 2}) {
		t.Fatalf("targets on pages %v, want [1 2] (page 1's hole, then the fresh page)", got)
	}
	if info.Pages != 1 || info.Repacked != 1 || info.BytesFreed != 2*MiB {
		t.Fatalf("plan info %+v, want 1 page repacked, 2 MiB freed net", info)
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	p.Commit(landed, g)
	if n, b := p.ReleaseEmpty(st, g); n != 1 || b != 4*MiB {
		t.Fatalf("ReleaseEmpty gave back %d pages (%d bytes), want the emptied 4 MiB page", n, b)
	}
	p.Check()
	if got := st.BytesAllocated(); got != before-2*MiB {
		t.Fatalf("storage holds %d bytes, want %d (2 MiB less)", got, before-2*MiB)
	}
	for n, h := range live[0] {
		r, err := st.Resolve(p.Slice(h.Location()).Region)
		if err != nil {
			t.Fatalf("resolve moved allocation %d: %v", n, err)
		}
		if !bytes.Equal(r.Bytes, want[n]) {
			t.Fatalf("moved allocation %d: bytes differ from what was written", n)
		}
	}
}

// Under pressure on whole pages, PlanCompactWith empties a small-pool page
// into the arena's room: the page's 2 MiB are the device's bytes, and the
// arena's hole takes its few slices. Every byte survives the move.
func TestPlanCompactWithEmptiesASmallPageIntoTheArena(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	a := NewArena(wideSizing, Limits{}, nil)
	big, err := a.Reserve(st, 7*MiB, g, Bind{}) // an 8 MiB page, 1 MiB of it free
	if err != nil {
		t.Fatal(err)
	}
	defer big.Release()
	small := NewSliced(2*MiB, 64<<10, false, 32, 1, Limits{})
	y, want := patternedSmallSlice(t, small, st, g, 5)
	before := st.BytesAllocated()
	if plan, _ := a.PlanCompact(CompactLimits{Goal: 2 * MiB}, st, g); !plan.IsEmpty() {
		t.Fatal("the arena alone planned a move: its lone page holds 7 MiB of 8")
	}
	if !a.CanCompactWith(small) {
		t.Fatal("CanCompactWith = false with the small page's slice fitting the arena's hole")
	}
	plan, info := a.PlanCompactWith(small, CompactLimits{Goal: 2 * MiB}, st, g)
	if got := moveIDs(plan); !slices.Equal(got, ids(y)) || info.Pages != 1 || info.BytesFreed != 2*MiB {
		t.Fatalf("plan moves %v (info %+v), want y %v and the 2 MiB small page", got, info, ids(y))
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatal(err)
	}
	a.CommitWith(small, landed, st, g)
	if got := y.Location().Pool(); got == 1 {
		t.Fatalf("y still in the small pool at %v", y.Location())
	}
	if n, b := small.ReleaseEmpty(st, g); n != 1 || b != 2*MiB {
		t.Fatalf("the small pool gave back %d pages (%d bytes), want its 2 MiB page", n, b)
	}
	if got := st.BytesAllocated(); got != before-2*MiB {
		t.Fatalf("storage holds %d bytes, want %d", got, before-2*MiB)
	}
	small.Check()
	a.Check()
	dst, _ := st.Resolve(a.Current().Slice(y.Location()).Region)
	if !bytes.Equal(dst.Bytes, want) {
		t.Fatal("y's bytes differ after the move")
	}
	y.Release()
}

// patternedSmallSlice reserves one 64 KiB slice on small, fills it with a
// pattern of seed and returns it with a copy of its bytes.
func patternedSmallSlice(t *testing.T, small *Sliced, st storage.Storage, g *handle.ErrorGraph, seed int) (*handle.Handle, []byte) {
	t.Helper()
	y := slicedReserve(t, small, st, 64<<10, g)
	src, err := st.Resolve(small.Slice(y.Location()).Region)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Bytes {
		src.Bytes[i] = byte(i%239 + seed)
	}
	return y, slices.Clone(src.Bytes)
}
