package pool

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/relocation"
	"github.com/gpumem/gpumem/storage"
)

// Tests of the tiled page size rule (tiling.go, Arena.grow): the served-size
// summary, the thin-history rule, the choice among the page sizes from the
// smallest holding the growth's allocation up to twice it, and the bounds
// every choice keeps.

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
	st := storage.NewSim(32, storage.NewBudget(64*MiB))
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
	if h := a.TryReserve(st, 2000, g); h == nil {
		t.Fatal("TryReserve found no room on a page with room")
	}
	expect("TryReserve", 2016, 1)
	if h := a.TryReserve(st, 2*MiB, g); h != nil {
		t.Fatalf("TryReserve of a whole page served at %v", h.Location())
	}
	expect("a refused TryReserve", 0, 0)
	buf := handle.New(handle.Uninit)
	if h, err := a.ReserveFor(st, 3000, g, buf, 0); err != nil || h != nil {
		t.Fatalf("ReserveFor on held room: %v, %v; want the buffer bound at once", h, err)
	}
	expect("ReserveFor on held room", 3008, 1)
	if h, err := a.ReserveFor(st, 2*MiB-4096, g, handle.New(handle.Uninit), 0); err != nil || h == nil || a.State().Shape.CurrentPages != 2 {
		t.Fatalf("ReserveFor on a new page: %v, %v, %d pages", h, err, a.State().Shape.CurrentPages)
	}
	expect("ReserveFor on a new page", 2*MiB-4096, 1)
	if _, err := a.Reserve(st, 2*GiB, g); !errors.Is(err, ErrBufferTooBig) {
		t.Fatalf("2 GiB: %v, want ErrBufferTooBig", err)
	}
	expect("a too-large Reserve", 0, 0)
	if _, err := a.Reserve(st, 100*MiB, g); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("100 MiB on a 64 MiB budget: %v, want ErrOutOfMemory", err)
	}
	expect("a refused growth", 0, 0)
	if h, err := a.ReserveFor(st, 3*MiB+1, g, handle.New(handle.Uninit), 0); err != nil || h == nil || a.Growths() != 1 {
		t.Fatalf("ReserveFor of a growth: %v, %v, %d growths", h, err, a.Growths())
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
	st := storage.NewSim(32, nil)
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
	// Ten reservations of need itself and need − 32 bytes of another size.
	s := history(t, need, 10, need-32, 1)
	if got := sizing.tiled(need, smallest, s); got != smallest {
		t.Fatalf("%d bytes of other sizes for a %d-byte need: page %d, want the smallest, %d", need-32, need, got, smallest)
	}
	// 32 bytes more of a third size reach the need: now the growth tiles,
	// and 6 MiB (two 3s, two of need − 32 with 64 bytes over) wastes less.
	s.record(32)
	if s.bytesOf(32) != 32 || s.bytesOf(need-32) != need-32 {
		t.Fatal("setup: 32 shares a slot")
	}
	if got := sizing.tiled(need, smallest, s); got != 6*MiB {
		t.Fatalf("%d bytes of other sizes for a %d-byte need: page %d, want 6 MiB", need, need, got)
	}
}

// design §5.3's transformer step: one 100 MiB and two 25 MiB activations
// per step. The slack rule gave 158 MiB pages for a 157 MiB allocation and
// left tails no later allocation of the step fits; tiling takes 200 MiB:
// two 100s or eight 25s, no tail.
func TestGrowthTilesTheServedSizes(t *testing.T) {
	st := storage.NewSim(32, nil)
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

// The growth's own allocation counts once in the waste: after 1 MiB
// allocations, which tile every page, a 3 MiB growth takes 6 MiB (two 3s)
// rather than 4 MiB (one 3 and a 1 MiB tail).
func TestTailWasteCountsTheGrowthsOwnAllocation(t *testing.T) {
	st := storage.NewSim(32, nil)
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	for range 3 {
		arenaReserve(t, a, st, 1*MiB, nil)
	}
	arenaReserve(t, a, st, 3*MiB, nil)
	if a.PageSize() != 6*MiB {
		t.Fatalf("3 MiB after 3 × 1 MiB: page size %d, want 6 MiB", a.PageSize())
	}
}

// Sizes larger than a page leave no tail on it: they never go on it. After
// 100 × 1 MiB and 10 × 5 MiB a 3 MiB growth takes 4 MiB (a 1 MiB tail for
// the 3 MiB alone) rather than 6 MiB (where each 5 MiB leaves 1 MiB).
func TestTailWasteLeavesOutSizesAboveThePage(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	s := history(t, 1*MiB, 100, 5*MiB, 10)
	if got := sizing.tiled(3*MiB, 4*MiB, s); got != 4*MiB {
		t.Fatalf("page %d, want 4 MiB", got)
	}
}

// The candidates stop at twice the need, rounded up to TileStep: after
// 5 MiB allocations a 3 MiB growth takes 6 MiB, though 15 MiB would tile
// both sizes exactly.
func TestTiledPageIsAtMostTwiceTheNeed(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	s := history(t, 5*MiB, 10)
	if got := sizing.tiled(3*MiB, 4*MiB, s); got != 6*MiB {
		t.Fatalf("page %d, want 6 MiB", got)
	}
	// 3 MiB + 32 bytes: twice it rounds up to 8 MiB, which is a candidate.
	s = history(t, 1*MiB, 10, 8*MiB, 1)
	if got := sizing.tiled(3*MiB+32, 4*MiB, s); got != 8*MiB {
		t.Fatalf("page %d for 3 MiB + 32 bytes, want 8 MiB", got)
	}
}

func TestTiesGoToTheSmallerPage(t *testing.T) {
	sizing := NewPageSizing(GiB, 32)
	// No waste at all: 4 MiB and 8 MiB both hold 4 MiB and 1 MiB sizes
	// whole (6 MiB leaves a 2 MiB tail after the 4 MiB).
	s := history(t, 1*MiB, 8)
	if got := sizing.tiled(4*MiB, 4*MiB, s); got != 4*MiB {
		t.Fatalf("4 MiB after 1 MiB sizes: page %d, want 4 MiB (8 MiB wastes as little)", got)
	}
	// The same waste above zero: 5 MiB + 32 bytes leaves 1 MiB − 32 bytes
	// in 6 MiB and 2 MiB − 64 in 12 MiB, the same share (8 and 10 MiB
	// leave more); the 1 MiB sizes tile both.
	const need = 5*MiB + 32
	s = history(t, 1*MiB, 10)
	if w6, w12 := s.tailWaste(6*MiB, need), s.tailWaste(12*MiB, need); w6 != w12 || w6 == 0 {
		t.Fatalf("setup: waste %v in 6 MiB, %v in 12 MiB; want equal, above zero", w6, w12)
	}
	if got := sizing.tiled(need, 6*MiB, s); got != 6*MiB {
		t.Fatalf("5 MiB + 32 bytes: page %d, want 6 MiB (12 MiB wastes as much)", got)
	}
}

// With an odd alignment and a Max below twice the need, every candidate is
// rounded up to the alignment and cut at Max; the Max page, a multiple of
// the alignment but not of TileStep, is picked when it tiles best. The
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
	st := storage.NewSim(align, nil)
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
	// The growth's own need is padded too: 40 MiB − 33 bytes pads to
	// 40 MiB + 10, twice which is 80 MiB rounded up to 50, a page with no
	// tail for it; after 6.5 MiB allocations that is the page it takes.
	wide := NewArena(NewPageSizing(GiB, align), Limits{}, nil)
	for range 8 {
		arenaReserve(t, wide, st, 13*MiB/2, nil)
	}
	arenaReserve(t, wide, st, 40*MiB-33, nil)
	if want := storage.RoundUp(80*MiB, align); wide.PageSize() != want || want != 2*(40*MiB+10) {
		t.Fatalf("40 MiB − 33 after 6.5 MiB allocations: page size %d, want %d", wide.PageSize(), want)
	}
	// Every step folded onto Max: a need of Max − 50.
	s := history(t, quarter, 10)
	need := sizing.Max - 50
	_, smallest := sizing.Fit(need, 0)
	if got := sizing.tiled(need, smallest, s); got != sizing.Max || smallest != sizing.Max {
		t.Fatalf("need %d under Max %d: page %d (smallest %d), want Max", need, sizing.Max, got, smallest)
	}
	// And onto Min: 3 MiB under an 8 MiB floor.
	floor := PageSizing{Min: 8 * MiB, Max: GiB, Align: 32}
	if got := floor.tiled(3*MiB, 8*MiB, history(t, 1*MiB, 10, 5*MiB, 10)); got != 8*MiB {
		t.Fatalf("3 MiB under an 8 MiB floor: page %d, want 8 MiB", got)
	}
}

// refWaste is tailWaste as design §5.3 states it, in exact arithmetic: the
// tail bytes Σ bytes·(page mod size) over the served sizes no larger than
// the page, the growth's need counted once, as num / den with den =
// page · Σ bytes.
func refWaste(s *servedSizes, page, need uint64) (num, den *big.Int) {
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
	return num, sum.Mul(sum, new(big.Int).SetUint64(page))
}

// less reports whether a/b < c/d·(1+rel) for non-negative fractions,
// rel ≥ 0 given as relNum/relDen.
func lessWithin(a, b, c, d *big.Int, relNum, relDen int64) bool {
	l := new(big.Int).Mul(a, d)
	l.Mul(l, big.NewInt(relDen))
	r := new(big.Int).Mul(c, b)
	r.Mul(r, big.NewInt(relDen+relNum))
	return l.Cmp(r) < 0
}

// Over random sizings and histories, every page a growth takes is a multiple
// of the alignment within [Min, Max], holds the need, is the smallest page
// while the history is thin, lies between Fit's smallest and twice the need,
// wastes (exactly computed) no more than any candidate but for float noise,
// and no smaller candidate wastes as little.
func TestTiledPagesAreAlignedWithinBoundsAndTileBest(t *testing.T) {
	r := rand.New(rand.NewPCG(0x7111e, 5))
	aligns := []uint64{1, 32, 50, 256, 4096, 3 << 20}
	devices := []uint64{1 * MiB, 15 * MiB, 64 * MiB, 100*MiB + 7, 256 * MiB}
	// A size up to about max, log-uniform, in bytes.
	size := func(hi uint64) uint64 {
		return max(1, uint64(math.Exp(r.Float64()*math.Log(float64(hi)))))
	}
	thin, tiled, tiledBigger := 0, 0, 0
	for c := range 1000 {
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
		if r.IntN(3) == 0 {
			req = heavy[0] // the need's own bytes are in the history
		}
		kind, smallest := sizing.Fit(req, 0)
		if kind != Grow {
			continue
		}
		_, need := padded(req, align)
		p := sizing.tiled(need, smallest, &s)
		if p%align != 0 || p < sizing.Min || p > sizing.Max || p < need {
			t.Fatalf("case %d: %+v, need %d: page %d is not a multiple of the alignment in [Min, Max] holding the need", c, sizing, need, p)
		}
		last := sizing.clamp(storage.RoundUp(2*need, TileStep))
		if p < smallest || p > last {
			t.Fatalf("case %d: %+v, need %d: page %d outside [%d, %d]", c, sizing, need, p, smallest, last)
		}
		if storage.SatSub(s.total, s.bytesOf(need)) < need {
			thin++
			if p != smallest {
				t.Fatalf("case %d: thin history (%d bytes, %d of the need's size), need %d: page %d, want the smallest %d", c, s.total, s.bytesOf(need), need, p, smallest)
			}
			continue
		}
		tiled++
		if p > smallest {
			tiledBigger++
		}
		pn, pd := refWaste(&s, p, need)
		for step := storage.RoundUp(need, TileStep); step <= storage.RoundUp(2*need, TileStep); step += TileStep {
			q := sizing.clamp(step)
			qn, qd := refWaste(&s, q, need)
			// p wastes no more than q, up to a relative 1e-8 of float noise.
			if lessWithin(qn, qd, pn, pd, 0, 1) && !lessWithin(pn, pd, qn, qd, 1, 100_000_000) {
				t.Fatalf("case %d: %+v, need %d: page %d wastes %v, page %d only %v", c, sizing, need, p, ratio(pn, pd), q, ratio(qn, qd))
			}
			// No smaller page wastes as little.
			if q < p && !lessWithin(pn, pd, qn, qd, 0, 1) {
				t.Fatalf("case %d: %+v, need %d: page %d wastes %v, the smaller %d as little (%v)", c, sizing, need, p, ratio(pn, pd), q, ratio(qn, qd))
			}
		}
	}
	// The cases must reach both branches of the rule.
	t.Logf("%d thin histories, %d tiled growths, %d of them above the smallest page", thin, tiled, tiledBigger)
	if thin < 50 || tiled < 50 || tiledBigger < 50 {
		t.Fatalf("%d thin histories, %d tiled growths, %d of them above the smallest page; want at least 50 of each", thin, tiled, tiledBigger)
	}
}

func ratio(n, d *big.Int) float64 {
	f, _ := new(big.Rat).SetFrac(n, d).Float64()
	return f
}
