package pool

import (
	"math"

	"github.com/gpumem/gpumem/storage"
)

// Tiled page sizes (design §5.3).
//
// On storage that backs pages whole every byte of a page counts, mapped or
// not, and what a page cannot use is its tail: the room left once the
// allocations that fill it are placed. A page of "the largest allocation
// plus slack" tiles nothing in particular: on a transformer's training step
// its 158 MiB pages hold one 100 MiB and two 25 MiB activations and leave
// 8 MiB, 5 % of every page, that no later allocation of the step fits. A
// tiled arena chooses the page size at each growth from the sizes it has
// served: among the sizes that hold the growth's allocation, up to twice
// it, the one that costs the fewest bytes, where a page size costs its
// tails' share of the bytes the arena holds plus half a page, what the page
// being filled leaves empty on average. On that step the answer is 200 MiB
// (two 100s or eight 25s, no tail); on a workload of 20 MiB a 32 MiB page
// would cost more than its tails save, so small workloads keep small
// pages. Until the arena has served as many bytes as the growth's
// allocation in other sizes there is nothing to tile, and the page holds
// that allocation exactly: on a model's forward pass whose first arena
// allocation is one of its 96 100 MiB activations, that is the page that
// tiles all of them.
//
// On granular storage only mapped granules count, so a tail costs nothing
// mapped: a growth there takes the largest page instead (PL31,
// Arena.growthPageSize), and tiling is for pages backed whole.

const (
	// TileStep is the granule of tiled page sizes: the 2 MiB a driver
	// rounds a large allocation to anyway, so (with an alignment dividing
	// 2 MiB) no page size it picks is one the driver would round up further.
	TileStep = 2 << 20
	// servedSlots is the size of the served-size summary: more than the
	// distinct sizes that make up most bytes of a real workload.
	servedSlots = 64
	// maxCandidates bounds the page sizes a growth compares (one per
	// TileStep for a need under 2 GiB).
	maxCandidates = 1024
)

// servedSizes summarises the effective sizes an arena served, weighted by
// bytes, in fixed space: each size hashes to one slot, and a slot keeps
// the size that brought it more bytes than its rivals (a rival's bytes
// wear the holder's down before replacing it), so the sizes that carry a
// workload's bytes survive any number of rare ones. Recording is O(1) and
// allocates nothing: it runs on every arena reservation.
type servedSizes struct {
	// slots[i], when its bytes are not 0, holds a size that hashes to i
	// (servedSlot).
	slots [servedSlots]servedSize
	// total is every byte recorded, saturating; bytes a slot lost to a
	// rival stay in it, so total less one size's bytes is at least what
	// the other sizes brought.
	total uint64
}

// servedSize is one slot: a size and the bytes it holds against rivals.
type servedSize struct {
	need, bytes uint64
}

// servedSlot is the slot a size hashes to: the top 6 bits of a
// multiplicative (Fibonacci) hash, which spreads sizes that differ only in
// their low bits, as sizes of one workload do, over all 64 slots.
func servedSlot(need uint64) int { return int((need * 0x9E3779B97F4A7C15) >> 58) }

// record counts one reservation of need effective bytes.
func (s *servedSizes) record(need uint64) {
	if need == 0 {
		return
	}
	s.total = storage.SatAdd(s.total, need)
	e := &s.slots[servedSlot(need)]
	switch {
	case e.need == need:
		e.bytes = storage.SatAdd(e.bytes, need)
	case e.bytes <= need:
		*e = servedSize{need: need, bytes: need}
	default:
		e.bytes -= need
	}
}

// thin reports that the summary holds fewer bytes of sizes other than need
// than need itself: too little history to tile a growth for need.
func (s *servedSizes) thin(need uint64) bool {
	return storage.SatSub(s.total, s.bytesOf(need)) < need
}

// bytesOf returns the bytes the summary holds for need.
func (s *servedSizes) bytesOf(need uint64) uint64 {
	if e := s.slots[servedSlot(need)]; e.need == need {
		return e.bytes
	}
	return 0
}

// tailWaste is the share of the bytes served, the growth's own allocation
// of need bytes counted once more, that pages of size page would leave in
// tails if each page held one size only: Σ bytes·(page mod size)/page over
// Σ bytes. Mixed pages fill some tails with smaller sizes, so it ranks page
// sizes rather than predicting a figure.
func (s *servedSizes) tailWaste(page, need uint64) float64 {
	waste := float64(need) * float64(page%need) / float64(page)
	sum := float64(need)
	for _, e := range s.slots {
		if e.bytes == 0 || e.need > page {
			continue
		}
		waste += float64(e.bytes) * float64(page%e.need) / float64(page)
		sum += float64(e.bytes)
	}
	return waste / sum
}

// tiled returns the page size a growth for need effective bytes takes on
// an arena that served served and holds footprint bytes with the growth's
// allocation: among the multiples of TileStep from smallest (Fit's) up to
// twice need, each rounded to the alignment within [Min, Max], the one of
// least cost tailWaste·footprint + page/2 (the smallest of equals);
// smallest itself while the arena served fewer bytes than need in other
// sizes. The caller has checked need ≤ Max.
//
// The walk stops at Max, past which every step clamps to it, and looks at
// most maxCandidates steps, at a coarser stride for a need of 2 GiB or more
// (more than maxCandidates candidates): a growth stays a bounded amount of
// work whatever sizes a device allows.
func (s PageSizing) tiled(need, smallest, footprint uint64, served *servedSizes) uint64 {
	if served.thin(need) {
		return smallest
	}
	first := need/TileStep + min(need%TileStep, 1)                    // ⌈need/TileStep⌉
	last := need/TileStep*2 + (2*(need%TileStep)+TileStep-1)/TileStep // ⌈2·need/TileStep⌉
	stride := (last-first)/maxCandidates + 1
	best, least := smallest, math.Inf(1)
	for k := first; k <= last; k += stride {
		p := s.Max
		if k <= math.MaxUint64/TileStep {
			p = s.clamp(k * TileStep)
		}
		// The relative tolerance keeps float noise from preferring a
		// larger page that costs the same.
		if c := served.tailWaste(p, need)*float64(footprint) + float64(p)/2; c < least*(1-1e-9) {
			best, least = p, c
		}
		if p == s.Max { // every later step clamps to Max too
			break
		}
	}
	return best
}

// ceilTo rounds x up to a multiple of a, or returns MaxUint64 when no
// multiple at least x fits in 64 bits (storage.RoundUp then rounds down):
// the clamp to Max that follows then gives Max, which holds any need Fit
// let through.
func ceilTo(x, a uint64) uint64 {
	if r := storage.RoundUp(x, a); r >= x {
		return r
	}
	return math.MaxUint64
}
