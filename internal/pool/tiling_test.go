package pool

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// Tests of the tiled page size rule (tiling.go, Arena.grow): the served-size
// summary, the thin-history rule, the choice among the page sizes from the
// smallest holding the growth's allocation up to twice it by least cost
// (the tails' share of the footprint plus half a page), the footprint
// Arena.grow passes, and the bounds every choice keeps.

// colliding returns n sizes other than need that hash to need's slot, the
// first from from up in steps of step.
func colliding(t *testing.T, need, from, step uint64, n int) []uint64 {
	t.Helper()
	slot := servedSlot(need)
	var out []uint64
	for size := from; len(out) < n; size += step {
		if size != need && servedSlot(size) == slot {
			out = append(out, size)
		}
		if size > from+step*uint64(n)*servedSlots*64 {
			t.Fatalf("setup: only %d sizes from %d hash to the slot of %d", len(out), from, need)
		}
	}
	return out
}

// history records count reservations of each size, each count following
// its size, and fails the test unless every size kept a slot of its own
// with all its bytes, so a test's figures are not bent by a collision.
func history(t *testing.T, sizeCounts ...uint64) *servedSizes {
	t.Helper()
	var s servedSizes
	slots := map[int]uint64{}
	for i := 0; i < len(sizeCounts); i += 2 {
		size, count := sizeCounts[i], sizeCounts[i+1]
		if other, ok := slots[servedSlot(size)]; ok && other != size {
			t.Fatalf("setup: sizes %d and %d share slot %d", size, other, servedSlot(size))
		}
		slots[servedSlot(size)] = size
		for range count {
			s.record(size)
		}
	}
	for i := 0; i < len(sizeCounts); i += 2 {
		size, count := sizeCounts[i], sizeCounts[i+1]
		if got := s.bytesOf(size); got != size*count {
			t.Fatalf("setup: %d bytes held for size %d, want %d", got, size, size*count)
		}
	}
	return &s
}

func TestServedSizesCountsBytesPerSizeAndInTotal(t *testing.T) {
	var s servedSizes
	if s.total != 0 || s.bytesOf(MiB) != 0 {
		t.Fatalf("empty summary: total %d, %d bytes for 1 MiB", s.total, s.bytesOf(MiB))
	}
	s.record(0) // nothing served: nothing counted
	if s.total != 0 || s.slots != ([servedSlots]servedSize{}) {
		t.Fatalf("record(0) changed the summary: total %d", s.total)
	}
	sizes := []uint64{MiB, 3 * MiB, 100 * MiB, 4096 + 32}
	want := map[uint64]uint64{}
	var total uint64
	for i, size := range sizes {
		for range i + 1 {
			s.record(size)
			want[size] += size
			total += size
		}
	}
	if len(map[int]bool{servedSlot(sizes[0]): true, servedSlot(sizes[1]): true, servedSlot(sizes[2]): true, servedSlot(sizes[3]): true}) != len(sizes) {
		t.Fatal("setup: two of the sizes share a slot")
	}
	for size, bytes := range want {
		if got := s.bytesOf(size); got != bytes {
			t.Fatalf("bytesOf(%d) = %d, want %d", size, got, bytes)
		}
	}
	if s.total != total {
		t.Fatalf("total %d, want %d", s.total, total)
	}
	// A size never recorded holds nothing, even one whose slot another
	// size holds.
	if rival := colliding(t, 100*MiB, MiB, 32, 1)[0]; s.bytesOf(rival) != 0 || s.bytesOf(2*MiB) != 0 {
		t.Fatalf("bytesOf: %d for %d (shares 100 MiB's slot), %d for 2 MiB; want 0 and 0", s.bytesOf(rival), rival, s.bytesOf(2*MiB))
	}
	// Both the total and a slot's bytes saturate.
	var sat servedSizes
	huge := uint64(math.MaxUint64/2 + 1)
	sat.record(huge)
	sat.record(huge)
	if sat.total != math.MaxUint64 || sat.bytesOf(huge) != math.MaxUint64 {
		t.Fatalf("after 2 × %d: total %d, %d bytes for it; want both saturated", huge, sat.total, sat.bytesOf(huge))
	}
}

func TestServedSizesKeepsAHeavySizeAgainstRareRivalsInItsSlot(t *testing.T) {
	const heavy = 100 * MiB
	rivals := colliding(t, heavy, MiB, 32, 200) // each about 1 MiB, each once
	var s servedSizes
	for range 3 {
		s.record(heavy)
	}
	var worn uint64
	for i, r := range rivals {
		s.record(r)
		worn += r
		if i%50 == 49 {
			// The heavy size keeps coming; its bytes are added, not reset.
			s.record(heavy)
		}
	}
	wantHeavy := 3*heavy + 4*heavy - worn
	if got := s.bytesOf(heavy); got != wantHeavy {
		t.Fatalf("heavy size holds %d bytes after %d rare rivals, want %d (its bytes less theirs)", got, len(rivals), wantHeavy)
	}
	for _, r := range rivals {
		if s.bytesOf(r) != 0 {
			t.Fatalf("rare rival %d holds %d bytes, want none", r, s.bytesOf(r))
		}
	}
	if want := 7*heavy + worn; s.total != want {
		t.Fatalf("total %d, want %d (every byte, the rivals' too)", s.total, want)
	}
	// A rival bringing at least the bytes the holder has left replaces it.
	big := colliding(t, heavy, wantHeavy, 32, 1)[0]
	s.record(big)
	if s.bytesOf(heavy) != 0 || s.bytesOf(big) != big {
		t.Fatalf("after a %d-byte rival against %d bytes held: heavy %d, rival %d; want the rival holding the slot with its bytes", big, wantHeavy, s.bytesOf(heavy), s.bytesOf(big))
	}
	// And a rare size holding a slot first gives way to the heavy one.
	var first servedSizes
	first.record(rivals[0])
	first.record(heavy)
	if first.bytesOf(heavy) != heavy || first.bytesOf(rivals[0]) != 0 {
		t.Fatalf("heavy after one rare size: %d bytes held, the rare one %d; want the heavy size holding %d", first.bytesOf(heavy), first.bytesOf(rivals[0]), heavy)
	}
}

// The arena records the effective size of each reservation it serves,
// whichever way it serves it, and nothing for a refused one or for a
// relocation's targets.
func TestArenaRecordsTheEffectiveSizeOfEveryReservationButNoRelocationTarget(t *testing.T) {
	st := hoststorage.NewSim(32, storage.NewBudget(64*MiB))
	g := handle.NewErrorGraph()
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	var total uint64
	expect := func(what string, size, count uint64) {
		t.Helper()
		total += size * count
		if a.served.total != total {
			t.Fatalf("after %s: %d bytes served, want %d", what, a.served.total, total)
		}
	}
	small := arenaReserve(t, a, st, 1000, g) // a new page; effective 1024
	expect("Reserve on a new page", 1024, 1)
	if a.served.bytesOf(1024) != 1024 || a.served.bytesOf(1000) != 0 {
		t.Fatalf("1000 bytes recorded as %d bytes of 1024, %d of 1000; want the effective size", a.served.bytesOf(1024), a.served.bytesOf(1000))
	}
	small.Release()
	arenaReserve(t, a, st, 1000, g) // held room
	expect("Reserve on held room", 1024, 1)
	if h := a.TryReserve(st, 2000, g, Bind{}); h == nil {
		t.Fatal("TryReserve found no room on a page with room")
	}
	expect("TryReserve", 2016, 1)
	if h := a.TryReserve(st, 2*MiB, g, Bind{}); h != nil {
		t.Fatalf("TryReserve of a whole page served at %v", h.Location())
	}
	expect("a refused TryReserve", 0, 0)
	buf := handle.New(handle.Uninit)
	if h, err := a.Reserve(st, 3000, g, Bind{To: buf}); err != nil || h != buf {
		t.Fatalf("Reserve binding on held room: %v, %v; want the buffer bound at once", h, err)
	}
	expect("Reserve binding on held room", 3008, 1)
	if h, err := a.Reserve(st, 2*MiB-4096, g, Bind{To: handle.New(handle.Uninit)}); err != nil || h == nil || a.State().Shape.CurrentPages != 2 {
		t.Fatalf("Reserve binding on a new page: %v, %v, %d pages", h, err, a.State().Shape.CurrentPages)
	}
	expect("Reserve binding on a new page", 2*MiB-4096, 1)
	if _, err := a.Reserve(st, 2*GiB, g, Bind{}); !errors.Is(err, ErrBufferTooBig) {
		t.Fatalf("2 GiB: %v, want ErrBufferTooBig", err)
	}
	expect("a too-large Reserve", 0, 0)
	if _, err := a.Reserve(st, 100*MiB, g, Bind{}); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("100 MiB on a 64 MiB budget: %v, want ErrOutOfMemory", err)
	}
	expect("a refused growth", 0, 0)
	if h, err := a.Reserve(st, 3*MiB+1, g, Bind{To: handle.New(handle.Uninit)}); err != nil || h == nil || a.Growths() != 1 {
		t.Fatalf("Reserve binding a growth: %v, %v, %d growths", h, err, a.Growths())
	}
	expect("a growth", 3*MiB+32, 1)
	// A relocation moves what was served already onto the current pool:
	// no new demand.
	if n := relocate(t, a, relocation.MayAllocate, st, g); n == 0 {
		t.Fatal("setup: the relocation moved nothing")
	}
	expect("a relocation", 0, 0)
	a.Check()
}

// design §5.3: until the arena served as many bytes as the growth needs in
// other sizes, the page is the smallest that holds the growth.
func TestThinHistoryGrowsToTheSmallestPage(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	// A first 100 MiB allocation on an empty arena: a 100 MiB page, the
	// page that tiles every later 100 MiB one.
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	arenaReserve(t, a, st, 100*MiB, nil)
	if a.PageSize() != 100*MiB || a.Growths() != 1 {
		t.Fatalf("first 100 MiB: page size %d after %d growths, want 100 MiB after 1", a.PageSize(), a.Growths())
	}
	arenaReserve(t, a, st, 100*MiB, nil)
	if a.PageSize() != 100*MiB || a.Growths() != 1 || a.State().Shape.CurrentPages != 2 {
		t.Fatalf("second 100 MiB: page size %d after %d growths, want a second 100 MiB page", a.PageSize(), a.Growths())
	}
	// 1 MiB served, then a 3 MiB growth: 6 MiB would tile both sizes,
	// but 1 MiB is too little history, so the page is 4 MiB.
	b := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	arenaReserve(t, b, st, 1*MiB, nil)
	arenaReserve(t, b, st, 3*MiB, nil)
	if b.PageSize() != 4*MiB {
		t.Fatalf("3 MiB after 1 MiB: page size %d, want 4 MiB", b.PageSize())
	}
	b.Check()
}

// held is the footprint of an arena that still holds every byte s records
// and the growth's allocation of need bytes: the most Arena.grow passes.
func held(s *servedSizes, need uint64) uint64 { return storage.SatAdd(s.total, need) }

// cost is what tiled minimises: the tails' share of the footprint plus
// half a page.
func cost(s *servedSizes, page, need, footprint uint64) float64 {
	return s.tailWaste(page, need)*float64(footprint) + float64(page)/2
}

// The history counts bytes of sizes other than the growth's own: the
// growth takes the smallest page until they reach its need, and tiles from
// the byte they do.
func TestThinHistoryIgnoresTheGrowthsOwnSize(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	const need = 3 * MiB
	_, smallest := sizing.Fit(need, 0)
	if smallest != 4*MiB {
		t.Fatalf("setup: smallest page %d, want 4 MiB", smallest)
	}
	// Ten reservations of need itself and need − 32 bytes of another size:
	// the smallest page however much the arena holds.
	s := history(t, need, 10, need-32, 1)
	for _, footprint := range []uint64{held(s, need), 1 << 50} {
		if got := sizing.tiled(need, smallest, footprint, s); got != smallest {
			t.Fatalf("%d bytes of other sizes for a %d-byte need, footprint %d: page %d, want the smallest, %d", need-32, need, footprint, got, smallest)
		}
	}
	// 32 bytes more of a third size reach the need: now the growth tiles,
	// and 6 MiB (two 3s, two of need − 32 with 64 bytes over) costs less
	// than 4 MiB, whose 1 MiB tails under the 3s cost a quarter of the
	// footprint.
	s.record(32)
	if s.bytesOf(32) != 32 || s.bytesOf(need-32) != need-32 {
		t.Fatal("setup: 32 shares a slot")
	}
	if got := sizing.tiled(need, smallest, held(s, need), s); got != 6*MiB {
		t.Fatalf("%d bytes of other sizes for a %d-byte need: page %d, want 6 MiB", need, need, got)
	}
}

// design §5.3's transformer step: one 100 MiB and two 25 MiB activations
// per step. The slack rule gave 158 MiB pages for a 157 MiB allocation and
// left tails no later allocation of the step fits; tiling takes 200 MiB:
// two 100s or eight 25s, no tail. The arena holds all 1357 MiB with the
// growth, far more than the 101 MiB from which 200 MiB's fewer tails pay
// for its larger half page.
func TestGrowthTilesTheServedSizes(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	for range 8 {
		arenaReserve(t, a, st, 100*MiB, nil)
		arenaReserve(t, a, st, 25*MiB, nil)
		arenaReserve(t, a, st, 25*MiB, nil)
	}
	if a.PageSize() != 100*MiB || a.Growths() != 1 {
		t.Fatalf("setup: page size %d after %d growths, want 100 MiB after 1", a.PageSize(), a.Growths())
	}
	arenaReserve(t, a, st, 157*MiB, nil)
	if a.PageSize() != 200*MiB || a.Growths() != 2 {
		t.Fatalf("157 MiB after 100s and 25s: page size %d after %d growths, want 200 MiB (not the smallest, 158 MiB)", a.PageSize(), a.Growths())
	}
	// The same growth on an arena with no history takes the smallest page.
	fresh := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	arenaReserve(t, fresh, st, 157*MiB, nil)
	if fresh.PageSize() != 158*MiB {
		t.Fatalf("157 MiB on an empty arena: page size %d, want 158 MiB", fresh.PageSize())
	}
	a.Check()
}

// The footprint weighs the tails against the half page: after the
// transformer step's sizes (8 × 100 MiB, 16 × 25 MiB, far from a thin
// history) a 157 MiB growth on an arena holding 18 GiB tiles to 200 MiB,
// whose tails cost 2.5 % of the footprint where 158 MiB's cost 23 %; on one
// holding 48 MiB the 21 MiB of half page that 200 MiB adds cost more than
// its tails save, and it keeps the smallest page, 158 MiB. The crossing
// lies near 101 MiB.
func TestFootprintDecidesWhetherAGrowthTiles(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	const need = 157 * MiB
	_, smallest := sizing.Fit(need, 0)
	if smallest != 158*MiB {
		t.Fatalf("setup: smallest page %d, want 158 MiB", smallest)
	}
	s := history(t, 100*MiB, 8, 25*MiB, 16)
	if s.total < 2*need {
		t.Fatalf("setup: %d bytes served, a thin history for %d", s.total, need)
	}
	for _, c := range []struct{ footprint, want uint64 }{
		{18 * GiB, 200 * MiB},
		{held(s, need), 200 * MiB},
		{102 * MiB, 200 * MiB},
		{100 * MiB, 158 * MiB},
		{48 * MiB, 158 * MiB},
	} {
		if got := sizing.tiled(need, smallest, c.footprint, s); got != c.want {
			t.Fatalf("157 MiB after 100s and 25s, footprint %d MiB: page %d MiB, want %d MiB", c.footprint/MiB, got/MiB, c.want/MiB)
		}
	}
}

// Arena.grow weighs the tails against what all the arena's pools hold,
// the growth's allocation included. After 3 × 25 MiB (on 26 MiB pages,
// outdated by the first 100 MiB growth), 2 × 100 MiB and 25 MiB, a 157 MiB
// growth tiles to 200 MiB from a footprint of 210 MiB up: with all 457 MiB
// held, and with only the outdated 25s, 75 MiB, held beside its own
// 157 MiB. With nothing held but its own it keeps 158 MiB.
func TestGrowthCostsTailsAgainstWhatAllPoolsHold(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	for _, c := range []struct {
		what string
		keep func(page uint64) bool
		want uint64
	}{
		{"all held", func(uint64) bool { return true }, 200 * MiB},
		{"the outdated 25s held", func(page uint64) bool { return page == 26*MiB }, 200 * MiB},
		{"nothing held", func(uint64) bool { return false }, 158 * MiB},
	} {
		a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
		var drop []*handle.Handle
		for _, size := range []uint64{25 * MiB, 25 * MiB, 25 * MiB, 100 * MiB, 100 * MiB, 25 * MiB} {
			h := arenaReserve(t, a, st, size, nil)
			if !c.keep(a.PageSize()) {
				drop = append(drop, h)
			}
		}
		if a.PageSize() != 100*MiB || a.Growths() != 2 || a.OutdatedPages() != 3 {
			t.Fatalf("%s: setup: page size %d after %d growths, %d outdated pages; want 100 MiB after 2, the three 26 MiB pages", c.what, a.PageSize(), a.Growths(), a.OutdatedPages())
		}
		for _, h := range drop {
			h.Release()
		}
		arenaReserve(t, a, st, 157*MiB, nil)
		if a.PageSize() != c.want {
			t.Fatalf("%s: 157 MiB after 25s and 100s: page size %d MiB, want %d MiB", c.what, a.PageSize()/MiB, c.want/MiB)
		}
		a.Check()
	}
}

// The growth's own allocation counts once in the waste: after 1 MiB
// allocations, which tile every page, a 3 MiB growth on 4 MiB pages
// leaves a 1 MiB tail, an eighth of the 6 MiB served with it, on 6 MiB
// pages none. So 6 MiB wins once the footprint passes 8 MiB, where the
// eighth matches its extra 1 MiB of half page; an arena holding just those
// 6 MiB keeps 4 MiB.
func TestTailWasteCountsTheGrowthsOwnAllocation(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	s := history(t, 1*MiB, 3)
	if w := s.tailWaste(4*MiB, 3*MiB); w != 0.125 {
		t.Fatalf("waste in 4 MiB pages %v, want 1/8", w)
	}
	if got := sizing.tiled(3*MiB, 4*MiB, 16*MiB, s); got != 6*MiB {
		t.Fatalf("3 MiB after 3 × 1 MiB, footprint 16 MiB: page %d, want 6 MiB", got)
	}
	st := hoststorage.NewSim(32, nil)
	a := NewArena(sizing, Limits{}, nil)
	for range 3 {
		arenaReserve(t, a, st, 1*MiB, nil)
	}
	arenaReserve(t, a, st, 3*MiB, nil)
	if a.PageSize() != 4*MiB || a.Growths() != 1 {
		t.Fatalf("3 MiB after 3 × 1 MiB on an arena holding 6 MiB: page size %d after %d growths, want 4 MiB after 1", a.PageSize(), a.Growths())
	}
}

// Sizes larger than a page leave no tail on it: they never go on it. After
// 100 × 1 MiB and 10 × 5 MiB a 3 MiB growth takes 4 MiB (a 1 MiB tail for
// the 3 MiB alone) rather than 6 MiB (where each 5 MiB leaves 1 MiB, a
// cost of over 8 MiB on the 153 MiB held).
func TestTailWasteLeavesOutSizesAboveThePage(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	s := history(t, 1*MiB, 100, 5*MiB, 10)
	if got := sizing.tiled(3*MiB, 4*MiB, held(s, 3*MiB), s); got != 4*MiB {
		t.Fatalf("page %d, want 4 MiB", got)
	}
}

// The candidates stop at twice the need, rounded up to TileStep: after
// 5 MiB allocations a 3 MiB growth takes 6 MiB, though 10 MiB would cost
// less (no tail for the 5s, one of 1 MiB for the 3).
func TestTiledPageIsAtMostTwiceTheNeed(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	s := history(t, 5*MiB, 10)
	if c6, c10 := cost(s, 6*MiB, 3*MiB, held(s, 3*MiB)), cost(s, 10*MiB, 3*MiB, held(s, 3*MiB)); c10 >= c6 {
		t.Fatalf("setup: cost %v of 10 MiB pages, %v of 6 MiB; want 10 MiB cheaper", c10, c6)
	}
	if got := sizing.tiled(3*MiB, 4*MiB, held(s, 3*MiB), s); got != 6*MiB {
		t.Fatalf("page %d, want 6 MiB", got)
	}
	// 3 MiB + 32 bytes: twice it rounds up to 8 MiB, which is a candidate;
	// after 1 MiB and 8 MiB sizes it costs least (the 8s, left out of
	// smaller pages, swell the share of the 3's tail there).
	s = history(t, 1*MiB, 10, 8*MiB, 10)
	if got := sizing.tiled(3*MiB+32, 4*MiB, held(s, 3*MiB+32), s); got != 8*MiB {
		t.Fatalf("page %d for 3 MiB + 32 bytes, want 8 MiB", got)
	}
}

// Pages of equal cost, and of costs within a relative 1e-9, go to the
// smaller page. A 3 MiB growth after 1 MiB sizes costs in 4 MiB pages
// 0.75 MiB·footprint/served (the 3's tail) + 2 MiB, in 6 MiB pages 3 MiB.
func TestTiesGoToTheSmallerPage(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	const need = 3 * MiB
	for _, c := range []struct {
		what            string
		ones, footprint uint64
		want            uint64
		equal           bool
	}{
		// 6 MiB served with the growth: the costs meet at 8 MiB held.
		{"an exact tie", 3, 8 * MiB, 4 * MiB, true},
		{"just past the tie", 3, 8*MiB + 64, 6 * MiB, false},
		// 750 MiB served: they meet at 1000 MiB, and each byte more makes
		// 6 MiB a thousandth of a byte cheaper.
		{"6 MiB cheaper by 3e-10", 747, 1000*MiB + 1, 4 * MiB, false},
		{"6 MiB cheaper by 5e-9", 747, 1000*MiB + 16, 6 * MiB, false},
	} {
		s := history(t, 1*MiB, c.ones)
		c4, c6 := cost(s, 4*MiB, need, c.footprint), cost(s, 6*MiB, need, c.footprint)
		if c.equal != (c4 == c6) || (!c.equal && c6 >= c4) {
			t.Fatalf("%s: setup: cost %v of 4 MiB pages, %v of 6 MiB", c.what, c4, c6)
		}
		if got := sizing.tiled(need, 4*MiB, c.footprint, s); got != c.want {
			t.Fatalf("%s: page %d, want %d (costs %v and %v)", c.what, got, c.want, c4, c6)
		}
	}
}

// With an odd alignment and a Max below twice the need, every candidate is
// rounded up to the alignment and cut at Max; the Max page, a multiple of
// the alignment but not of TileStep, is picked when it costs least. The
// arena pads each size to the alignment before it records or grows.
func TestOddAlignmentAndALowMaxBoundEveryCandidate(t *testing.T) {
	const align = 50
	sizing := NewPageSizing(15*MiB, align)
	if sizing.Max != 15*MiB/align*align || sizing.Max%TileStep == 0 {
		t.Fatalf("setup: %+v", sizing)
	}
	quarter := sizing.Max / 4 // 3932150: four tile Max
	if quarter%align != 0 {
		t.Fatalf("setup: %d is not a multiple of %d", quarter, align)
	}
	st := hoststorage.NewSim(align, nil)
	a := NewArena(sizing, Limits{}, nil)
	for range 100 {
		arenaReserve(t, a, st, quarter-49, nil) // padded to quarter
	}
	if want := storage.RoundUp(4*MiB, align); a.PageSize() != want {
		t.Fatalf("setup: page size %d, want %d", a.PageSize(), want)
	}
	if a.served.bytesOf(quarter) != 100*quarter {
		t.Fatalf("%d bytes recorded for %d, want the padded sizes", a.served.bytesOf(quarter), quarter)
	}
	// Half Max + 1 pads to half Max + 50: candidates 8, 10, 12, 14 MiB
	// rounded to 50, then 16 MiB cut to Max, which four quarters fill.
	arenaReserve(t, a, st, sizing.Max/2+1, nil)
	if a.PageSize() != sizing.Max {
		t.Fatalf("half Max + 1 after quarters: page size %d, want Max, %d", a.PageSize(), sizing.Max)
	}
	// Without the history, the smallest: 8 MiB rounded up to 50.
	fresh := NewArena(sizing, Limits{}, nil)
	arenaReserve(t, fresh, st, sizing.Max/2+1, nil)
	if want := storage.RoundUp(8*MiB, align); fresh.PageSize() != want {
		t.Fatalf("half Max + 1 on an empty arena: page size %d, want %d", fresh.PageSize(), want)
	}
	// The growth's own need is padded too: 42 MiB − 30 bytes pads to
	// 42 MiB + 8, twice which is 84 MiB rounded up to 50, a page with no
	// tail for it; after 40 allocations of 21 MiB − 26 (padded to half
	// that need), whose tails the smaller candidates pay, that is the page
	// it takes.
	wide := NewArena(NewPageSizing(GiB, align), Limits{}, nil)
	for range 40 {
		arenaReserve(t, wide, st, 21*MiB-26, nil)
	}
	if want := storage.RoundUp(22*MiB, align); wide.PageSize() != want {
		t.Fatalf("setup: page size %d after 21 MiB − 26 allocations, want %d", wide.PageSize(), want)
	}
	arenaReserve(t, wide, st, 42*MiB-30, nil)
	if want := storage.RoundUp(84*MiB, align); wide.PageSize() != want || want != 2*(42*MiB+8) {
		t.Fatalf("42 MiB − 30 after 21 MiB − 26 allocations: page size %d, want %d", wide.PageSize(), want)
	}
	// Every step folded onto Max: a need of Max − 50.
	s := history(t, quarter, 10)
	need := sizing.Max - 50
	_, smallest := sizing.Fit(need, 0)
	if got := sizing.tiled(need, smallest, held(s, need), s); got != sizing.Max || smallest != sizing.Max {
		t.Fatalf("need %d under Max %d: page %d (smallest %d), want Max", need, sizing.Max, got, smallest)
	}
	// And onto Min: 3 MiB under an 8 MiB floor, however much the arena
	// holds.
	floor := PageSizing{Min: 8 * MiB, Max: GiB, Align: 32}
	if got := floor.tiled(3*MiB, 8*MiB, 1<<50, history(t, 1*MiB, 10, 5*MiB, 10)); got != 8*MiB {
		t.Fatalf("3 MiB under an 8 MiB floor: page %d, want 8 MiB", got)
	}
}

// refWaste is tailWaste as design §5.3 states it, in exact arithmetic: the
// tail bytes Σ bytes·(page mod size)/page over the served sizes no larger
// than the page, the growth's need counted once, over Σ bytes.
func refWaste(s *servedSizes, page, need uint64) *big.Rat {
	num, sum := new(big.Int), new(big.Int)
	add := func(size, bytes uint64) {
		if size > page {
			return
		}
		b := new(big.Int).SetUint64(bytes)
		num.Add(num, new(big.Int).Mul(b, new(big.Int).SetUint64(page%size)))
		sum.Add(sum, b)
	}
	add(need, need)
	for _, e := range s.slots {
		if e.bytes > 0 {
			add(e.need, e.bytes)
		}
	}
	return new(big.Rat).SetFrac(num, sum.Mul(sum, new(big.Int).SetUint64(page)))
}

// refCost is the cost tiled minimises, exactly: refWaste·footprint +
// page/2.
func refCost(s *servedSizes, page, need, footprint uint64) *big.Rat {
	c := new(big.Rat).Mul(refWaste(s, page, need), new(big.Rat).SetInt(new(big.Int).SetUint64(footprint)))
	return c.Add(c, new(big.Rat).SetFrac(new(big.Int).SetUint64(page), big.NewInt(2)))
}

// scaled returns x·(1+rel).
func scaled(x *big.Rat, rel *big.Rat) *big.Rat {
	return new(big.Rat).Mul(x, new(big.Rat).Add(big.NewRat(1, 1), rel))
}

// Over random sizings, histories and footprints, every page a growth takes
// is a multiple of the alignment within [Min, Max], holds the need, is the
// smallest page while the history is thin (whatever the footprint), lies
// between Fit's smallest and twice the need, costs (exactly computed) no
// more than any candidate but for float noise, and no smaller candidate
// costs as little.
func TestTiledPagesAreAlignedWithinBoundsAndCostLeast(t *testing.T) {
	r := rand.New(rand.NewPCG(0x7111e, 5))
	aligns := []uint64{1, 32, 50, 256, 4096, 3 << 20}
	devices := []uint64{1 * MiB, 15 * MiB, 64 * MiB, 100*MiB + 7, 256 * MiB}
	// A size up to about max, log-uniform, in bytes.
	size := func(hi uint64) uint64 {
		return max(1, uint64(math.Exp(r.Float64()*math.Log(float64(hi)))))
	}
	noise := big.NewRat(1, 100_000_000) // relative 1e-8
	thin, tiled, tiledBigger, footprintMattered := 0, 0, 0, 0
	for c := range 3000 {
		align := aligns[r.IntN(len(aligns))]
		sizing := NewPageSizing(devices[r.IntN(len(devices))], align)
		var s servedSizes
		// A few heavy sizes, many rare ones; one history in three short.
		var heavy []uint64
		for range 1 + r.IntN(6) {
			heavy = append(heavy, size(sizing.Max))
		}
		n := r.IntN(300)
		if r.IntN(3) == 0 {
			n = r.IntN(4)
		}
		for range n {
			if r.IntN(4) > 0 {
				s.record(heavy[r.IntN(len(heavy))])
			} else {
				s.record(size(sizing.Max))
			}
		}
		req := size(sizing.Max)
		switch r.IntN(3) {
		case 0:
			req = heavy[0] // the need's own bytes are in the history
		case 1:
			// Above TileStep, where there are pages to choose among.
			req = min(sizing.Max, TileStep+size(sizing.Max))
		}
		kind, smallest := sizing.Fit(req, 0)
		if kind != Grow {
			continue
		}
		_, need := padded(req, align)
		// The growth's allocation and from 1/1024 of the bytes served to
		// all of them, log-uniform: a footprint Arena.grow may pass.
		footprint := storage.SatAdd(need, uint64(float64(s.total)*math.Exp2(r.Float64()*10-10)))
		p := sizing.tiled(need, smallest, footprint, &s)
		if p%align != 0 || p < sizing.Min || p > sizing.Max || p < need {
			t.Fatalf("case %d: %+v, need %d: page %d is not a multiple of the alignment in [Min, Max] holding the need", c, sizing, need, p)
		}
		last := sizing.clamp(storage.RoundUp(2*need, TileStep))
		if p < smallest || p > last {
			t.Fatalf("case %d: %+v, need %d: page %d outside [%d, %d]", c, sizing, need, p, smallest, last)
		}
		if storage.SatSub(s.total, s.bytesOf(need)) < need {
			thin++
			if big := sizing.tiled(need, smallest, 1<<50, &s); p != smallest || big != smallest {
				t.Fatalf("case %d: thin history (%d bytes, %d of the need's size), need %d: page %d for footprint %d, %d for 2^50; want the smallest %d", c, s.total, s.bytesOf(need), need, p, footprint, big, smallest)
			}
			continue
		}
		tiled++
		if p > smallest {
			tiledBigger++
		}
		pc := refCost(&s, p, need, footprint)
		var leastWaste uint64 // the page least tail waste alone would pick
		var lw *big.Rat
		for step := storage.RoundUp(need, TileStep); step <= storage.RoundUp(2*need, TileStep); step += TileStep {
			q := sizing.clamp(step)
			qc := refCost(&s, q, need, footprint)
			// p costs no more than q, up to a relative 1e-8 of float noise.
			if scaled(qc, noise).Cmp(pc) < 0 {
				t.Fatalf("case %d: %+v, need %d, footprint %d: page %d costs %v, page %d only %v", c, sizing, need, footprint, p, pc.FloatString(3), q, qc.FloatString(3))
			}
			// No smaller page costs as little.
			if q < p && qc.Cmp(pc) <= 0 {
				t.Fatalf("case %d: %+v, need %d, footprint %d: page %d costs %v, the smaller %d as little (%v)", c, sizing, need, footprint, p, pc.FloatString(3), q, qc.FloatString(3))
			}
			if w := refWaste(&s, q, need); lw == nil || w.Cmp(lw) < 0 {
				leastWaste, lw = q, w
			}
		}
		if p != leastWaste {
			footprintMattered++
		}
	}
	// The cases must reach both branches of the rule, and pages where the
	// half page outweighs the tails.
	t.Logf("%d thin histories, %d tiled growths, %d of them above the smallest page, %d off the least-waste page", thin, tiled, tiledBigger, footprintMattered)
	if thin < 50 || tiled < 50 || tiledBigger < 50 || footprintMattered < 50 {
		t.Fatalf("%d thin histories, %d tiled growths, %d of them above the smallest page, %d off the least-waste page; want at least 50 of each", thin, tiled, tiledBigger, footprintMattered)
	}
}

// A growth is bounded work and holds its need whatever page sizes a device
// allows: with a max page near 2^64, needs past 2^63 (where twice the need
// overflows) and within 2 MiB of 2^64 (where rounding up to 2 MiB would
// wrap) grow to a page that holds them, aligned and within Max; a walk that
// wrapped or stepped 2 MiB at a time up to such a need would not return.
func TestHugeNeedsGrowToAPageThatHoldsThem(t *testing.T) {
	s := NewPageSizing(math.MaxUint64-31, 32)
	var served servedSizes
	for range 3 {
		served.record(1 << 62)
	}
	for _, size := range []uint64{3 * GiB, 1<<63 + GiB, s.Max - 2*MiB + 32, s.Max} {
		kind, smallest := s.Fit(size, 2*MiB)
		if kind != Grow || smallest < size || smallest%32 != 0 {
			t.Fatalf("Fit(%d) = %v, %d; want Grow to an aligned page that holds it", size, kind, smallest)
		}
		p := s.tiled(size, smallest, size, &served)
		if p < size || p > s.Max || p%32 != 0 {
			t.Fatalf("tiled(%d) = %d; want an aligned page in [need, Max = %d]", size, p, s.Max)
		}
	}
}
