package pool

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// GiB is the adaptive preset's max page size.
const GiB = 1 << 30

// arenaReserve reserves size on the arena, failing the test on error.
func arenaReserve(t tb, a *Arena, st storage.Storage, size uint64, g *handle.ErrorGraph) *handle.Handle {
	t.Helper()
	h, err := a.Reserve(st, size, g, Bind{})
	if err != nil {
		t.Fatalf("reserve %d bytes (page size %d): %v", size, a.PageSize(), err)
	}
	return h
}

// arenaSlice returns the arena slice ref's location names, failing the test
// when there is none or it carries another allocation.
func arenaSlice(t tb, a *Arena, ref handle.Ref) *Slice {
	t.Helper()
	loc := ref.Descriptor().Location()
	p := a.Pool(loc.Pool())
	if p == nil {
		t.Fatalf("allocation %d at %v: no arena pool there", ref.Descriptor().ID(), loc)
	}
	return ownSlice(t, p, ref)
}

// design §12.4 scenario 24, plus the padding and floor cases of §5.3.
func TestFitAnswersFitsGrowOrTooLargeOnTheEffectiveSize(t *testing.T) {
	preset := NewPageSizing(GiB, 32)
	max16 := NewPageSizing(16*MiB, 32)
	max15 := NewPageSizing(15*MiB, 32)
	floor8 := PageSizing{Min: 8 * MiB, Max: GiB, Align: 32}
	odd := NewPageSizing(GiB, 50)
	cases := []struct {
		name     string
		sizing   PageSizing
		size     uint64
		pageSize uint64
		want     FitKind
		wantPage uint64
	}{
		{"1MiBIn2MiBPages", preset, 1 * MiB, 2 * MiB, Fits, 2 * MiB},
		{"WholePage", preset, 2 * MiB, 2 * MiB, Fits, 2 * MiB},
		// For a growth Fit answers the smallest page that holds the
		// effective size: rounded up to TileStep and the alignment, within
		// [Min, Max] (the growth itself may tile to more, tiling_test.go).
		{"10MiBGrowsFrom10MiB", preset, 10 * MiB, 2 * MiB, Grow, 10 * MiB},
		{"RoundsUpToTheTileStep", preset, 10*MiB + 1, 2 * MiB, Grow, 12 * MiB},
		{"OddMiBRoundsUpToTheTileStep", preset, 11 * MiB, 2 * MiB, Grow, 12 * MiB},
		{"FloorAtMin", floor8, 3 * MiB, 2 * MiB, Grow, 8 * MiB},
		{"WholeMaxPage", max16, 16 * MiB, 2 * MiB, Grow, 16 * MiB},
		// 15 MiB rounds to a 16 MiB step, which Max cuts back to 15 MiB.
		{"TileStepClippedAtMax", max15, 15 * MiB, 2 * MiB, Grow, 15 * MiB},
		{"AboveMax", max16, 16*MiB + 1, 2 * MiB, TooLarge, 0},
		// 2 MiB − 1 at alignment 50 pads to 2 MiB + 48: it fits by its
		// requested size but not by its effective size, and the growth
		// starts at the next step, 4 MiB, rounded up to the alignment.
		{"PaddingOverflowsThePage", odd, 2*MiB - 1, 2 * MiB, Grow, storage.RoundUp(4*MiB, 50)},
		{"PaddedFitsExactly", odd, 2*MiB - 52, 2 * MiB, Fits, 2 * MiB},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kind, page := c.sizing.Fit(c.size, c.pageSize)
			if kind != c.want || page != c.wantPage {
				t.Fatalf("Fit(%d, %d) = %v, %d; want %v, %d", c.size, c.pageSize, kind, page, c.want, c.wantPage)
			}
		})
	}
}

func TestPageSizingRoundsMaxDownAndTheFloorUp(t *testing.T) {
	cases := []struct {
		name             string
		deviceMax, align uint64
		want             PageSizing
	}{
		{"Preset", GiB, 32, PageSizing{Min: 2 * MiB, Max: GiB, Align: 32}},
		{"SmallDevice", 1 * MiB, 32, PageSizing{Min: 1 * MiB, Max: 1 * MiB, Align: 32}},
		{"OddAlignment", 16 * MiB, 50, PageSizing{Min: storage.RoundUp(2*MiB, 50), Max: 16 * MiB / 50 * 50, Align: 50}},
		{"BelowOneUnit", 10, 32, PageSizing{Min: 32, Max: 32, Align: 32}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NewPageSizing(c.deviceMax, c.align); got != c.want {
				t.Fatalf("NewPageSizing(%d, %d) = %+v, want %+v", c.deviceMax, c.align, got, c.want)
			}
		})
	}
}

func TestArenaGrowsWhenAllocationDoesNotFitCurrentPageSize(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	small := arenaReserve(t, a, st, 1*MiB, nil)
	if loc := small.Location(); loc.Pool() != ArenaFirstIndex || a.PageSize() != 2*MiB || a.HasOutdated() {
		t.Fatalf("1 MiB at %v, page size %d, outdated %v; want slot 0 of 2 MiB pages", loc, a.PageSize(), a.HasOutdated())
	}
	// 10 MiB does not fit 2 MiB pages; the arena served only 1 MiB, too
	// little to tile, so the page is the smallest that holds it: 10 MiB.
	big := arenaReserve(t, a, st, 10*MiB, nil)
	if loc := big.Location(); loc.Pool() != ArenaFirstIndex+1 || loc.Page() != 0 {
		t.Fatalf("10 MiB at %v, want the first page of slot 1", loc)
	}
	if a.PageSize() != 10*MiB || a.Growths() != 1 || !a.HasOutdated() {
		t.Fatalf("page size %d after %d growths, outdated %v; want 10 MiB, 1, true", a.PageSize(), a.Growths(), a.HasOutdated())
	}
	// Growth never releases anything: the 1 MiB stays on its outdated page.
	arenaSlice(t, a, small)
	if st.BytesAllocated() != 12*MiB {
		t.Fatalf("%d bytes held, want 12 MiB", st.BytesAllocated())
	}
	a.Check()
}

func TestArenaOutdatedPoolServesNoReservationEvenWithRoom(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	arenaReserve(t, a, st, 1*MiB, nil) // 1 MiB left on the 2 MiB page
	arenaReserve(t, a, st, 9*MiB, nil) // 1 MiB left on the 10 MiB page
	h := a.TryReserve(st, 512<<10, nil, Bind{})
	if h == nil || h.Location().Pool() != ArenaFirstIndex+1 {
		t.Fatalf("TryReserve(512 KiB) at %v, want the current pool %d", h, ArenaFirstIndex+1)
	}
	if h := a.TryReserve(st, 1*MiB, nil, Bind{}); h != nil {
		t.Fatalf("TryReserve(1 MiB) served at %v; only the outdated page has that room", h.Location())
	}
	h = arenaReserve(t, a, st, 1*MiB, nil)
	if loc := h.Location(); loc.Pool() != ArenaFirstIndex+1 || loc.Page() != 1 {
		t.Fatalf("1 MiB at %v, want a new page of the current pool", loc)
	}
	// TryReserve only serves what fits the current page size.
	if h := a.TryReserve(st, 12*MiB, nil, Bind{}); h != nil || a.Growths() != 1 {
		t.Fatalf("TryReserve of a growth-sized request: %v, %d growths", h, a.Growths())
	}
}

// design §12.4 scenario 22.
func TestRefusedGrowthKeepsThePageSizeAndOutdatesNothing(t *testing.T) {
	st := hoststorage.NewSim(32, storage.NewBudget(8*MiB))
	a := NewArena(NewPageSizing(16*MiB, 32), Limits{}, nil)
	first := arenaReserve(t, a, st, 1*MiB, nil)
	h, err := a.Reserve(st, 10*MiB, nil, Bind{})
	if !errors.Is(err, storage.ErrOutOfMemory) || h != nil {
		t.Fatalf("10 MiB on an 8 MiB budget: %v, %v; want ErrOutOfMemory", h, err)
	}
	s := a.State()
	if a.PageSize() != 2*MiB || s.HasOutdated || s.Shape != (relocation.ArenaShape{CurrentPages: 1}) || a.Growths() != 0 {
		t.Fatalf("after a refused growth: %+v, %d growths; want 2 MiB pages, one current page, nothing outdated", s, a.Growths())
	}
	if a.Pool(ArenaFirstIndex+1) != nil {
		t.Fatal("the refused growth left a pool in slot 1")
	}
	second := arenaReserve(t, a, st, 1*MiB, nil)
	if first.Location().Page() != 0 || second.Location().Pool() != ArenaFirstIndex || second.Location().Page() != 0 {
		t.Fatalf("1 MiB at %v, want the existing page (pool %d page 0)", second.Location(), ArenaFirstIndex)
	}
	if st.BytesAllocated() != 2*MiB {
		t.Fatalf("%d bytes held, want the one 2 MiB page", st.BytesAllocated())
	}
	a.Check()
}

func TestArenaRefusesATooLargeRequestChangingNothing(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a := NewArena(NewPageSizing(16*MiB, 32), Limits{}, nil)
	if !a.Accept(16 * MiB) {
		t.Fatal("the largest page size is not accepted")
	}
	if a.Accept(16*MiB + 1) {
		t.Fatal("a request above the largest page size is accepted")
	}
	if _, err := a.Reserve(st, 16*MiB+1, nil, Bind{}); !errors.Is(err, ErrBufferTooBig) {
		t.Fatalf("16 MiB + 1: %v, want ErrBufferTooBig", err)
	}
	if st.BytesAllocated() != 0 || a.Growths() != 0 || a.PageSize() != 2*MiB {
		t.Fatalf("refused request changed the arena: %d bytes, %d growths, page %d", st.BytesAllocated(), a.Growths(), a.PageSize())
	}
}

func TestArenaPoolBeyondItsPageLimitIsRefusedChangingNothing(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a := NewArena(NewPageSizing(GiB, 32), Limits{MaxPages: 1}, nil)
	arenaReserve(t, a, st, 2*MiB, nil)
	if _, err := a.Reserve(st, 1*MiB, nil, Bind{}); !errors.Is(err, handle.ErrIndexOverflow) {
		t.Fatalf("a second page over a limit of 1: %v, want ErrIndexOverflow", err)
	}
	if s := a.State(); s.Shape.CurrentPages != 1 || st.BytesAllocated() != 2*MiB {
		t.Fatalf("refused page changed the arena: %+v, %d bytes", s, st.BytesAllocated())
	}
}

// growArena makes an arena holding one live allocation in each of three
// pools: slot 0 (2 MiB pages, 1 MiB), slot 1 (10 MiB pages, 10 MiB) and the
// current slot 2 (20 MiB pages, 20 MiB). Each growth comes before the arena
// served as many bytes as it needs, so each page is its allocation's size.
func growArena(t *testing.T, st storage.Storage) (*Arena, [3]*handle.Handle) {
	t.Helper()
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	var hs [3]*handle.Handle
	for i, size := range []uint64{1 * MiB, 10 * MiB, 20 * MiB} {
		hs[i] = arenaReserve(t, a, st, size, nil)
	}
	return a, hs
}

func TestDrainDropsPagelessOutdatedPoolsAndGrowthReusesTheLowestEmptySlot(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a, hs := growArena(t, st)
	hs[1].Release()
	a.Cleanup(st, 1, Periodic, nil)
	if a.Pool(ArenaFirstIndex+1) != nil {
		t.Fatal("the emptied 10 MiB pool survived the cleanup")
	}
	if s := a.State(); s.Shape.OutdatedPools != 1 || s.Shape.OutdatedPages != 1 {
		t.Fatalf("after the drain: %+v; want the 2 MiB pool alone outdated", s.Shape)
	}
	h := arenaReserve(t, a, st, 30*MiB, nil)
	if loc := h.Location(); loc.Pool() != ArenaFirstIndex+1 {
		t.Fatalf("the growth after the drain placed 30 MiB at %v, want the freed slot 1 (pool %d)", loc, ArenaFirstIndex+1)
	}
	// The arena served 31 MiB (1, 10 and 20) before this 30 MiB growth, so
	// the growth tiles, but it holds only 51 MiB (1, 20 and 30): the 20's
	// 10 MiB tail in a 30 MiB page, 11 % of what was served, costs 5.6 MiB
	// of those 51, less than the 15 MiB more of half page a 60 MiB page
	// (two 30s, three 20s, six 10s, no tail) costs. It keeps 30 MiB.
	if a.PageSize() != 30*MiB {
		t.Fatalf("page size %d, want 30 MiB", a.PageSize())
	}
	a.Check()
}

func TestDrainKeepsOutdatedPagesThatHoldALiveAllocation(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a, hs := growArena(t, st)
	if pages, _ := a.Drain(st, nil); pages != 0 || a.OutdatedPages() != 2 {
		t.Fatalf("Drain released %d pages, %d left; want none released", pages, a.OutdatedPages())
	}
	hs[0].Release()
	pages, bytes := a.Drain(st, nil)
	if pages != 1 || bytes != 2*MiB || a.Pool(ArenaFirstIndex) != nil {
		t.Fatalf("Drain released %d pages, %d bytes; want the 2 MiB page and its pool", pages, bytes)
	}
	arenaSlice(t, a, hs[1])
	arenaSlice(t, a, hs[2])
}

func TestPeriodicCleanupKeepsEmptyCurrentPagesExplicitReleasesThem(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a, hs := growArena(t, st)
	hs[2].Release()
	a.Cleanup(st, 1, Periodic, nil)
	if a.State().Shape.CurrentPages != 1 {
		t.Fatal("a periodic cleanup released an empty current page")
	}
	a.Cleanup(st, 2, Explicit, nil)
	if s := a.State(); s.Shape.CurrentPages != 0 || a.PageSize() != 20*MiB {
		t.Fatalf("after an explicit cleanup: %+v; want no current page, page size kept", s)
	}
}

func TestArenaStateCountsCurrentAndOutdatedPagesAndGuards(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a, hs := growArena(t, st)
	arenaReserve(t, a, st, 20*MiB, nil) // a second current page
	guard, ok := a.Pool(hs[0].Location().Pool()).Guard(hs[0].Location())
	if !ok {
		t.Fatal("no guard for the 2 MiB page")
	}
	want := relocation.ArenaState{
		HasOutdated: true,
		Shape:       relocation.ArenaShape{CurrentPages: 2, OutdatedPools: 2, OutdatedPages: 2, OutdatedGuarded: 1},
	}
	if got := a.State(); got != want {
		t.Fatalf("state %+v, want %+v", got, want)
	}
	guard.Release()
	want.Shape.OutdatedGuarded = 0
	if got := a.State(); got != want {
		t.Fatalf("after the guard went: %+v, want %+v", got, want)
	}
}

func TestArenaReportListsTheCurrentPoolThenOutdatedPoolsInGrowthOrder(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a, hs := growArena(t, st)
	hs[1].Release()
	a.Drain(st, nil)                    // slot 1 goes
	arenaReserve(t, a, st, 30*MiB, nil) // slot 1 again, now current, 30 MiB pages (too little held to tile)
	kinds := []Kind{
		AdaptiveKind{PageSize: 30 * MiB, OutdatedPages: 2},
		SlicedKind{PageSize: 2 * MiB, MaxSlice: 2 * MiB},   // outdated first
		SlicedKind{PageSize: 20 * MiB, MaxSlice: 20 * MiB}, // outdated second
	}
	reports := a.Report()
	if len(reports) != len(kinds) {
		t.Fatalf("%d reports, want %d", len(reports), len(kinds))
	}
	for i, r := range reports {
		if !reflect.DeepEqual(r.Kind, kinds[i]) || r.Pages != 1 {
			t.Fatalf("report %d: %+v with %d pages, want %+v with one page", i, r.Kind, r.Pages, kinds[i])
		}
	}
	if u := reports[0].Usage; u.BytesInUse != 30*MiB || u.Allocations != 1 {
		t.Fatalf("current usage %+v, want the 30 MiB allocation", u)
	}
}

// design §12.4 scenario 23.
func TestFullArenaRefusesGrowthUntilARelocationEmptiesIt(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	g := handle.NewErrorGraph()
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	// An allocation 32 bytes larger than the current page forces a growth
	// whatever page size the growth tiles to; 63 of them from 2 MiB pages
	// stay well under the 1 GiB Max.
	var hs []*handle.Handle
	var sizes []uint64
	for k := range uint64(63) {
		size := a.PageSize() + 32
		h := arenaReserve(t, a, st, size, g)
		if a.Growths() != k+1 || h.Location().Pool() != uint8(ArenaFirstIndex+k+1) {
			t.Fatalf("growth %d: %d bytes at %v after %d growths; want a growth into slot %d", k, size, h.Location(), a.Growths(), k+1)
		}
		hs = append(hs, h)
		sizes = append(sizes, size)
	}
	if !a.Full() || !a.State().Full {
		t.Fatal("64 pools and the arena is not full")
	}
	held, page := st.BytesAllocated(), a.PageSize()
	if over := page + 32; !a.Accept(over) {
		t.Fatalf("setup: %d bytes (page + 32) is above the largest page size", over)
	}
	if _, err := a.Reserve(st, page+32, g, Bind{}); !errors.Is(err, ErrPageSizesExhausted) {
		t.Fatalf("page + 32 bytes on a full arena: %v, want ErrPageSizesExhausted", err)
	}
	if st.BytesAllocated() != held || a.Growths() != 63 || a.PageSize() != page {
		t.Fatalf("the refused growth changed the arena: %d → %d bytes, %d growths, page %d → %d", held, st.BytesAllocated(), a.Growths(), page, a.PageSize())
	}

	plan := a.Plan(relocation.MayAllocate, st, g)
	// Slots 1..62 hold one live allocation each; slot 0 never carved a page
	// and slot 63 is current.
	if plan.Len() != 62 {
		t.Fatalf("plan of %d moves, want 62", plan.Len())
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatalf("copy: %v", err)
	}
	a.Commit(landed, st, g)
	if s := a.State(); s.HasOutdated || s.Full || s.Shape.OutdatedPools != 0 {
		t.Fatalf("after the commit: %+v; want nothing outdated", s)
	}
	for k, h := range hs {
		s := arenaSlice(t, a, h)
		if h.Location().Pool() != ArenaFirstIndex+63 || s.Region.Size != sizes[k] {
			t.Fatalf("allocation %d at %v holds %d bytes; want %d on the current pool", k, h.Location(), s.Region.Size, sizes[k])
		}
	}
	h, err := a.Reserve(st, page+32, g, Bind{})
	if err != nil {
		t.Fatalf("page + 32 bytes after the relocation: %v", err)
	}
	if h.Location().Pool() != ArenaFirstIndex || a.Growths() != 64 {
		t.Fatalf("page + 32 bytes at %v after %d growths, want a growth into the lowest empty slot 0", h.Location(), a.Growths())
	}
	a.Check()
}
