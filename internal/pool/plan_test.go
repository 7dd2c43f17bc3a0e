package pool

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// wideSizing gives 8 MiB first pages, so a test can lay out several MiB-sized
// allocations per page, and 10 MiB pages at most, so a growth for 9 MiB
// takes 10 MiB pages whatever sizes the arena served before (a tiled growth
// could otherwise pick up to 18 MiB).
var wideSizing = PageSizing{Min: 8 * MiB, Max: 10 * MiB, Align: 32}

// outdatedPages builds an arena whose 8 MiB pages hold exactly the live
// sizes (in MiB) given, one page per entry: every page is filled with a
// filler that is then freed. It returns the live handles per page. The
// arena has not grown yet.
func outdatedPages(t *testing.T, st storage.Storage, g *handle.ErrorGraph, pages ...[]uint64) (*Arena, [][]*handle.Handle) {
	t.Helper()
	a := NewArena(wideSizing, Limits{}, nil)
	live := fillPages(t, func(size uint64) *handle.Handle { return arenaReserve(t, a, st, size, g) }, 8, pages)
	return a, live
}

// fillPages lays out pages of pageMiB MiB through reserve, one page per
// entry of pages holding live allocations of the sizes (in MiB) given:
// each page is filled with a filler that is then freed, so the next
// entry's allocations start a new page. It returns the live handles per
// page.
func fillPages(t *testing.T, reserve func(size uint64) *handle.Handle, pageMiB uint64, pages [][]uint64) [][]*handle.Handle {
	t.Helper()
	var live [][]*handle.Handle
	var fillers []*handle.Handle
	for i, sizes := range pages {
		var hs []*handle.Handle
		var used uint64
		for _, s := range sizes {
			h := reserve(s * MiB)
			if int(h.Location().Page()) != i {
				t.Fatalf("setup: %d MiB landed at %v, want page %d", s, h.Location(), i)
			}
			hs = append(hs, h)
			used += s
		}
		if used < pageMiB {
			fillers = append(fillers, reserve((pageMiB-used)*MiB))
		}
		live = append(live, hs)
	}
	for _, f := range fillers {
		f.Release()
	}
	return live
}

// growTo10 grows the arena to 10 MiB pages (wideSizing's Max), leaving the
// current page drawn as layout (sizes in MiB, free ones in parentheses): the
// growth's 9 MiB is freed and the pieces reserved in order, then the
// parenthesised ones freed.
func growTo10(t *testing.T, a *Arena, st storage.Storage, g *handle.ErrorGraph, layout []uint64, free []bool) []*handle.Handle {
	t.Helper()
	arenaReserve(t, a, st, 9*MiB, g).Release()
	if a.PageSize() != 10*MiB {
		t.Fatalf("setup: page size %d, want 10 MiB", a.PageSize())
	}
	var kept []*handle.Handle
	for i, s := range layout {
		h := arenaReserve(t, a, st, s*MiB, g)
		if free[i] {
			defer h.Release()
			continue
		}
		kept = append(kept, h)
	}
	return kept
}

// moveIDs lists the allocations a plan moves, in plan order.
func moveIDs(r *relocation.Relocation) []handle.ID {
	var ids []handle.ID
	for _, m := range r.Moves() {
		ids = append(ids, m.Allocation().ID())
	}
	return ids
}

func ids(hs ...*handle.Handle) []handle.ID {
	var out []handle.ID
	for _, h := range hs {
		out = append(out, h.ID())
	}
	return out
}

// design §12.3 scenario 14 (which pages enter a plan).
func TestPlanTakesOnlyUnguardedUnboundPagesWithALiveSlice(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a, live := outdatedPages(t, st, g,
		[]uint64{1},    // page 0: plain → planned
		[]uint64{1},    // page 1: guarded
		[]uint64{1, 1}, // page 2: one allocation bound
		[]uint64{1},    // page 3: its allocation freed → empty
	)
	guard, _ := a.Current().Guard(live[1][0].Location())
	defer guard.Release()
	bound := live[2][0].Binding()
	defer bound.Release()
	live[3][0].Release()
	arenaReserve(t, a, st, 9*MiB, g) // grow: the 8 MiB pool is outdated

	plan := a.Plan(relocation.MayAllocate, st, g)
	defer plan.Abandon()
	if got, want := moveIDs(plan), ids(live[0][0]); !slices.Equal(got, want) {
		t.Fatalf("plan moves %v, want only page 0's %v", got, want)
	}
}

// design §12.3 scenario 14 (order).
func TestPlanMovesCheapestPagesFirst(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a, live := outdatedPages(t, st, g, []uint64{3, 2}, []uint64{1}, []uint64{4})
	arenaReserve(t, a, st, 9*MiB, g)

	plan := a.Plan(relocation.MayAllocate, st, g)
	defer plan.Abandon()
	want := ids(live[1][0], live[2][0], live[0][0], live[0][1]) // [1], [4], [3, 2]
	if got := moveIDs(plan); !slices.Equal(got, want) {
		t.Fatalf("plan moves %v, want %v", got, want)
	}
	cur := a.Current().Index()
	for _, m := range plan.Moves() {
		c := m.Copy()
		if m.Target().Location().Pool() != cur || m.Allocation().Location().Pool() != ArenaFirstIndex {
			t.Fatalf("move %v → %v, want outdated pool %d → current pool %d", m.Allocation().Location(), m.Target().Location(), ArenaFirstIndex, cur)
		}
		if c.Source.ID == c.Target.ID || c.Source.Size != c.Target.Size || c.Source != arenaSlice(t, a, m.Allocation()).Region {
			t.Fatalf("copy %+v for allocation at %v", c, m.Allocation().Location())
		}
	}
}

// design §12.3 scenario 14 (commit).
func TestCommitOfALandedNotFromCopyPanics(t *testing.T) {
	for name, l := range map[string]*relocation.Landed{"Zero": {}, "Nil": nil} {
		t.Run(name, func(t *testing.T) {
			st := hoststorage.NewSim(32, nil)
			a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
			defer func() {
				if recover() == nil {
					t.Fatal("Commit of a Landed not made by Copy returned")
				}
			}()
			a.Commit(l, st, nil)
		})
	}
}

// relocate plans, copies on q and commits, failing on a copy error.
func relocate(t *testing.T, a *Arena, room relocation.TargetRoom, st storage.Storage, g *handle.ErrorGraph) int {
	t.Helper()
	plan := a.Plan(room, st, g)
	n := plan.Len()
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	a.Commit(landed, st, g)
	return n
}

func TestCommitMovesBytesCursorAndMarksAndEveryOwnerFollows(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	sizes := []uint64{1*MiB + 3, 100, 512 << 10, 4097, 300 << 10}
	type owner struct {
		h, clone *handle.Handle
		id       handle.ID
		seed     byte
	}
	var owners []owner
	for i, size := range sizes {
		h := arenaReserve(t, a, st, size, g)
		fillPattern(t, st, arenaSlice(t, a, h).Region, byte(i*31+1))
		owners = append(owners, owner{h, h.Clone(), h.ID(), byte(i*31 + 1)})
	}
	src := arenaSlice(t, a, owners[0].h)
	src.Cursor = 42
	f := g.Fail(errors.New("kernel failed"))
	marks := &handle.Taint{}
	marks.Mark(g, f, 8, 16)
	src.SetTaint(marks)
	arenaReserve(t, a, st, 10*MiB, g) // grow: every allocation above is outdated

	if n := relocate(t, a, relocation.MayAllocate, st, g); n != len(sizes) {
		t.Fatalf("%d moves, want %d", n, len(sizes))
	}
	if a.HasOutdated() || st.BytesAllocated() != uint64(len(a.Current().pages))*a.PageSize() {
		t.Fatalf("after the commit: outdated %v, %d bytes held; want only current pages", a.HasOutdated(), st.BytesAllocated())
	}
	for i, o := range owners {
		for _, ref := range []*handle.Handle{o.h, o.clone} {
			s := arenaSlice(t, a, ref)
			if ref.ID() != o.id || ref.Location().Pool() != a.Current().Index() {
				t.Fatalf("allocation %d is now %d at %v", o.id, ref.ID(), ref.Location())
			}
			if s.Region.Size != sizes[i] {
				t.Fatalf("allocation %d holds %d bytes, want %d", o.id, s.Region.Size, sizes[i])
			}
			expectPattern(t, st, s.Region, o.seed)
		}
		if d := o.h.Descriptor(); d.Refs() != 3 || d.Handles() != 3 {
			t.Fatalf("allocation %d counts %d refs, %d handles; want the slice and two owners", o.id, d.Refs(), d.Handles())
		}
	}
	dst := arenaSlice(t, a, owners[0].h)
	if dst.Cursor != 42 || dst.Taint() != marks {
		t.Fatalf("target cursor %d, marks %p; want 42 and %p", dst.Cursor, dst.Taint(), marks)
	}
	if got, ok := dst.Taint().Find(0, 1*MiB); !ok || got != f || g.Carriers(f) != 1 {
		t.Fatalf("marks on the target: %v %v with %d carriers; want failure %d carried once", got, ok, g.Carriers(f), f)
	}
	a.Check()
}

func TestCommittedSourceSliceIsFreeWithoutMarks(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	h := arenaReserve(t, a, st, 1*MiB, g)
	srcLoc := h.Location()
	s := arenaSlice(t, a, h)
	s.Cursor = 7
	marks := &handle.Taint{}
	marks.Mark(g, g.Fail(errors.New("kernel failed")), 0, 64)
	s.SetTaint(marks)
	// Grow to 10 MiB pages (1 MiB served: too little to tile): the 9 MiB
	// leaves the 1 MiB of held room the Held plan moves the 1 MiB to.
	arenaReserve(t, a, st, 9*MiB, g)

	plan := a.Plan(relocation.Held, st, g)
	// Keep the source page past the commit's drain to look at it.
	guard, _ := a.Pool(srcLoc.Pool()).Guard(srcLoc)
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatal(err)
	}
	a.Commit(landed, st, g)
	from := a.sliceAt(srcLoc)
	if from == nil || !from.IsFree() || from.Taint() != nil || from.Cursor != 0 || from.Handle().Location() != srcLoc {
		t.Fatalf("source slice after the commit: %+v; want free, no marks, cursor 0, at %v", from, srcLoc)
	}
	if from.Handle().Descriptor() == h.Descriptor() {
		t.Fatal("the source slice still carries the moved allocation")
	}
	if a.State().Shape.OutdatedGuarded != 1 {
		t.Fatalf("shape %+v, want the guarded source page counted", a.State().Shape)
	}
	guard.Release()
	if pages, _ := a.Drain(st, g); pages != 1 || a.HasOutdated() {
		t.Fatalf("after the guard went, Drain released %d pages, outdated %v", pages, a.HasOutdated())
	}
	if dst := arenaSlice(t, a, h); dst.Taint() != marks || dst.Cursor != 7 {
		t.Fatal("releasing the source page disturbed the moved marks or cursor")
	}
}

func TestHeldPlanLeavesAPageInPlaceWhenOneOfItsAllocationsFindsNoTarget(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a, live := outdatedPages(t, st, g, []uint64{1, 3})
	growTo10(t, a, st, g, []uint64{2, 8}, []bool{true, false}) // current page: (2) 8
	before := drawPage(a.Current().pages[0], MiB)
	held := st.BytesAllocated()

	plan := a.Plan(relocation.Held, st, g)
	if !plan.IsEmpty() {
		t.Fatalf("plan moves %v; the 3 MiB has no target, so neither moves", moveIDs(plan))
	}
	for _, h := range live[0] {
		if h.Location().Pool() != ArenaFirstIndex {
			t.Fatalf("allocation %d moved to %v", h.ID(), h.Location())
		}
		arenaSlice(t, a, h)
	}
	a.Current().pages[0].coalesce(g) // merge what the abandoned target split
	if got := drawPage(a.Current().pages[0], MiB); got != before {
		t.Fatalf("current page %q, want its room back (%q)", got, before)
	}
	if st.BytesAllocated() != held || a.State().Shape.CurrentPages != 1 {
		t.Fatal("a Held plan added a page")
	}
}

// Abandoning a page's moves must give their room back whole: the targets
// it split are merged again before the next page is placed.
func TestRoomAnAbandonedPageTookServesTheNextPage(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a, live := outdatedPages(t, st, g, []uint64{1}, []uint64{3, 3}, []uint64{4, 2})
	growTo10(t, a, st, g, []uint64{1, 1, 4, 1, 2, 1}, []bool{true, false, true, false, true, false}) // (1) 1 (4) 1 (2) 1
	plan := a.Plan(relocation.Held, st, g)
	defer plan.Abandon()
	// [1] takes the 1-hole. [3, 3]: the first 3 takes the 4-hole, the
	// second finds nothing, so the page stays. [4, 2] then fits the 4- and
	// 2-holes exactly, once the abandoned split is merged again.
	if got, want := moveIDs(plan), ids(live[0][0], live[2][0], live[2][1]); !slices.Equal(got, want) {
		t.Fatalf("plan moves %v, want %v", got, want)
	}
}

// A Held plan places each allocation first fit on the current pool, as
// TryReserve would: holes before an earlier target are not skipped.
func TestHeldPlanUsesHolesBeforeItsEarlierTargets(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a, live := outdatedPages(t, st, g, []uint64{3}, []uint64{2, 1})
	growTo10(t, a, st, g, []uint64{2, 1, 2, 1, 3, 1}, []bool{true, false, true, false, true, false}) // (2) 1 (2) 1 (3) 1
	plan := a.Plan(relocation.Held, st, g)
	if got, want := moveIDs(plan), ids(live[0][0], live[1][0], live[1][1]); !slices.Equal(got, want) {
		plan.Abandon()
		t.Fatalf("plan moves %v, want every allocation %v", got, want)
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatal(err)
	}
	a.Commit(landed, st, g)
	if got := drawPage(a.Current().pages[0], MiB); got != "2 1 1 (1) 1 3 1" {
		t.Fatalf("current page %q after the commit", got)
	}
	if a.HasOutdated() {
		t.Fatal("outdated pages left after every allocation moved")
	}
}

func TestHeldPlanNeverAddsAPageMayAllocateDoes(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a, live := outdatedPages(t, st, g, []uint64{2})
	growTo10(t, a, st, g, []uint64{10}, []bool{false}) // the current page is full
	held := st.BytesAllocated()

	if plan := a.Plan(relocation.Held, st, g); !plan.IsEmpty() {
		t.Fatalf("Held plan moves %v with no held room", moveIDs(plan))
	}
	if st.BytesAllocated() != held || a.State().Shape.CurrentPages != 1 {
		t.Fatalf("a Held plan added a page: %d → %d bytes", held, st.BytesAllocated())
	}
	if n := relocate(t, a, relocation.MayAllocate, st, g); n != 1 {
		t.Fatalf("MayAllocate plan of %d moves, want 1", n)
	}
	if s := a.State(); s.Shape.CurrentPages != 2 || s.HasOutdated {
		t.Fatalf("after a MayAllocate relocation: %+v; want a second current page, nothing outdated", s)
	}
	if loc := live[0][0].Location(); loc.Pool() != a.Current().Index() || loc.Page() != 1 {
		t.Fatalf("2 MiB at %v, want the new current page", loc)
	}
}

func TestGuardedOutdatedPageIsLeftAloneAndCounted(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	h := arenaReserve(t, a, st, 1*MiB, g)
	guard, _ := a.Current().Guard(h.Location())
	arenaReserve(t, a, st, 10*MiB, g) // 10 MiB pages: 1 MiB served is too little to tile

	if plan := a.Plan(relocation.MayAllocate, st, g); !plan.IsEmpty() {
		t.Fatalf("plan moves %v off a guarded page", moveIDs(plan))
	}
	h.Release()
	a.Cleanup(st, 1, Explicit, g)
	want := relocation.ArenaShape{CurrentPages: 1, OutdatedPools: 1, OutdatedPages: 1, OutdatedGuarded: 1}
	if s := a.State(); s.Shape != want {
		t.Fatalf("shape %+v, want %+v: the empty guarded page stays", s.Shape, want)
	}
	guard.Release()
	a.Cleanup(st, 2, Periodic, g)
	if s := a.State(); s.HasOutdated || st.BytesAllocated() != 10*MiB {
		t.Fatalf("after the guard went: %+v, %d bytes", s, st.BytesAllocated())
	}
}

func TestAbandonedPlanLeavesEveryAllocationInPlace(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	a, live := outdatedPages(t, st, g, []uint64{1, 2}, []uint64{3})
	for i, hs := range live {
		for j, h := range hs {
			fillPattern(t, st, arenaSlice(t, a, h).Region, byte(10*i+j))
		}
	}
	arenaReserve(t, a, st, 9*MiB, g)
	before := a.State()
	plan := a.Plan(relocation.MayAllocate, st, g)
	if plan.Len() != 3 {
		t.Fatalf("plan of %d moves, want 3", plan.Len())
	}
	plan.Abandon()
	for i, hs := range live {
		for j, h := range hs {
			if h.Location().Pool() != ArenaFirstIndex || int(h.Location().Page()) != i {
				t.Fatalf("allocation %d at %v after an abandoned plan", h.ID(), h.Location())
			}
			expectPattern(t, st, arenaSlice(t, a, h).Region, byte(10*i+j))
		}
	}
	a.Cleanup(st, 1, Explicit, g)
	if got := a.State(); got.Shape != before.Shape {
		t.Fatalf("after the abandoned plan and a cleanup: %+v, want %+v", got.Shape, before.Shape)
	}
}

// The search skips a current page only for moves its free room cannot hold:
// once 2 MiB moves passed over a page with a 1 MiB hole, a later 1 MiB move
// still finds that hole first, as TryReserve would.
func TestPlanSkipsAPageOnlyForMovesLargerThanItsRoom(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a, live := outdatedPages(t, st, g, []uint64{2}, []uint64{2, 1})
	growTo10(t, a, st, g, []uint64{1, 9}, []bool{true, false}) // (1) 9
	plan := a.Plan(relocation.MayAllocate, st, g)
	defer plan.Abandon()
	if got, want := moveIDs(plan), ids(live[0][0], live[1][0], live[1][1]); !slices.Equal(got, want) {
		t.Fatalf("plan moves %v, want %v", got, want)
	}
	var pages []uint32
	for _, m := range plan.Moves() {
		pages = append(pages, m.Target().Location().Page())
	}
	if want := []uint32{1, 1, 0}; !slices.Equal(pages, want) {
		t.Fatalf("targets on current pages %v, want %v (the 1 MiB move takes page 0's hole)", pages, want)
	}
}
