package torch

import (
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

var expandable = Config{Settings: Settings{ExpandableSegments: true}}

// The devlog's trace (pytorch/devlogs, 2026-06-01-cuda-caching-allocator.md,
// "Physical page granularity"): eight 16 MiB allocations map one 20 MiB
// page at a time, the remainder of each page serving the next, reserving
// 20, 40, 60, 80, 80, 100, 120, 140 MiB: 7 pages for 128 MiB. Freed, the
// blocks merge into one, from which four 32 MiB allocations need no page.
func TestExpandableSegmentsMapSevenPagesForEightSixteenMiBAllocations(t *testing.T) {
	a := NewWithConfig(expandable)
	var blocks []Block
	for i, want := range []uint64{20, 40, 60, 80, 80, 100, 120, 140} {
		blocks = append(blocks, mustMalloc(t, a, 16*MiB, 0))
		if a.Reserved() != want*MiB {
			t.Fatalf("after alloc %d: %d MiB mapped, want %d", i+1, a.Reserved()/MiB, want)
		}
	}
	if st := a.Stats(); st.SegmentMaps != 7 || st.SegmentAllocs != 0 {
		t.Fatalf("stats %+v: want 7 page mappings and no cudaMalloc", st)
	}
	for _, b := range blocks {
		a.Free(b)
	}
	checkInvariants(t, a)
	if p := a.pool(0, false); len(p.blocks) != 1 || p.blocks[0].size != 140*MiB {
		t.Fatalf("freed blocks did not merge into one 140 MiB block: %d free blocks", len(p.blocks))
	}
	for range 4 {
		mustMalloc(t, a, 32*MiB, 0)
	}
	if a.Reserved() != 140*MiB || a.Stats().SegmentMaps != 7 {
		t.Fatalf("4 x 32 MiB mapped more: reserved %d MiB, %d maps", a.Reserved()/MiB, a.Stats().SegmentMaps)
	}
}

// The devlog's "Small then large (bad order)": 8 x 16 MiB, free all,
// 4 x 32 MiB. Without expandable segments the eight 16 MiB segments cannot
// merge and four 32 MiB segments are added: 256 MiB. With them the same
// order stays at the 140 MiB the 16 MiB allocations mapped (the devlog's
// "no new pages mapped"; 128 MiB is the good order, large then small,
// without them). The "128 MiB with them" is the allocated bytes;
// pages of 20 MiB make it 140 MiB.
func TestSmallThenLargeOrderReserves256MiBWithoutExpandableSegmentsAnd140With(t *testing.T) {
	order := func(cfg Config, first, second uint64, n1, n2 int) uint64 {
		a := NewWithConfig(cfg)
		var bs []Block
		for range n1 {
			bs = append(bs, mustMalloc(t, a, first, 0))
		}
		for _, b := range bs {
			a.Free(b)
		}
		for range n2 {
			mustMalloc(t, a, second, 0)
		}
		return a.Reserved()
	}
	if got := order(Config{}, 16*MiB, 32*MiB, 8, 4); got != 256*MiB {
		t.Fatalf("small then large without expandable segments: %d MiB, want 256", got/MiB)
	}
	if got := order(Config{}, 32*MiB, 16*MiB, 4, 8); got != 128*MiB {
		t.Fatalf("large then small without expandable segments: %d MiB, want 128", got/MiB)
	}
	if got := order(expandable, 16*MiB, 32*MiB, 8, 4); got != 140*MiB {
		t.Fatalf("small then large with expandable segments: %d MiB, want 140", got/MiB)
	}
}

// Note [Expandable Segments]: "If we end up out of memory, we can unmap all
// the memory in our segment corresponding to empty physical pages, and
// return it to CUDA for use at another address in the segment or in a
// segment for a different stream." Stream 0's free page is unmapped
// (segment_unmap) and the retry maps stream 1's five pages.
func TestExpandableSegmentsUnmapFreePagesOnOutOfMemoryBeforeTheRetry(t *testing.T) {
	events := []trace.Event{
		{Op: trace.OpAlloc, ID: 1, Size: 16 * MiB, Stream: 0},
		{Op: trace.OpFree, ID: 1},
		{Op: trace.OpAlloc, ID: 2, Size: 90 * MiB, Stream: 1},
	}
	cfg := expandable
	cfg.Capacity = 100 * MiB
	r, err := Replay(slices.Values(events), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []SegmentEvent{
		{Event: 0, Size: 20 * MiB, Mapping: true},
		{Event: 2, Size: 20 * MiB, Release: true, Mapping: true},
		{Event: 2, Size: 100 * MiB, Mapping: true},
	}
	if r.FailedAllocs != 0 || r.Stats.AllocRetries != 1 || r.Stats.SegmentUnmaps != 1 || r.FinalReserved != 100*MiB || !slices.Equal(r.Segments, want) {
		t.Fatalf("result %+v, segments %+v", r, r.Segments)
	}
}

// Note [Expandable Segments]: "we look for the lowest address at which we
// can fit a new allocation by adding new pages. Normally this will be at
// the end of the block. But if have previously unmapped blocks earlier in
// the segment during an OOM, it will first try to fill in those gaps."
func TestExpandableSegmentsMapNewPagesAtTheLowestFreeAddress(t *testing.T) {
	a := NewWithConfig(expandable)
	x := mustMalloc(t, a, 20*MiB, 0)
	y := mustMalloc(t, a, 20*MiB, 0)
	mustMalloc(t, a, 20*MiB, 0)
	a.Free(x)
	a.Free(y)
	a.EmptyCache() // unmaps pages 0 and 1: a hole before the live page 2
	checkInvariants(t, a)
	if a.Reserved() != 20*MiB || a.Stats().SegmentUnmaps != 1 {
		t.Fatalf("reserved %d MiB, stats %+v", a.Reserved()/MiB, a.Stats())
	}
	if b := mustMalloc(t, a, 30*MiB, 0); b.Addr != x.Addr {
		t.Fatalf("new pages mapped at %#x, want the hole at %#x", b.Addr, x.Addr)
	}
	if b := mustMalloc(t, a, 20*MiB, 0); b.Addr != x.Addr+60*MiB {
		t.Fatalf("growth past the live page at %#x, want %#x", b.Addr, x.Addr+60*MiB)
	}
}

// get_free_block's expandable branch: the free block at the growing end
// counts as the size it can grow to, so a request takes a larger free block
// that cannot grow rather than grow the end one.
func TestExpandableSegmentsBestFitPrefersABlockThatCannotGrow(t *testing.T) {
	a := NewWithConfig(expandable)
	big := mustMalloc(t, a, 30*MiB, 0) // pages 0–1, 10 MiB free at the end
	mustMalloc(t, a, 2*MiB, 0)         // 8 MiB free at the end of page 1
	a.Free(big)                        // 30 MiB free at the start, cannot grow
	b := mustMalloc(t, a, 6*MiB, 0)    // 8 MiB end block fits first, but can grow: take the 30 MiB
	if b.Addr != big.Addr || a.Reserved() != 40*MiB {
		t.Fatalf("block at %#x (want %#x), reserved %d MiB", b.Addr, big.Addr, a.Reserved()/MiB)
	}
}

// A fully unmapped range is released with the cache, and a later
// allocation reserves a new one; nothing stays reserved.
func TestEmptyCacheReleasesFullyUnmappedExpandableRange(t *testing.T) {
	a := NewWithConfig(expandable)
	b := mustMalloc(t, a, 100, 0)
	a.Free(b)
	a.EmptyCache()
	checkInvariants(t, a)
	if a.Reserved() != 0 || len(a.pool(0, true).unmapped) != 0 || a.PeakReserved() != 2*MiB {
		t.Fatalf("reserved %d, unmapped %d, peak %d", a.Reserved(), len(a.pool(0, true).unmapped), a.PeakReserved())
	}
}

// find_expandable_block starts from the free block just before the
// unmapped space, so only the pages the request still lacks are mapped:
// 4 MiB free at the end of page 0 plus one page holds 24 MiB (40 MiB
// mapped), where mapping for the whole request would take two pages.
func TestExpandableSegmentsGrowFromTheFreeBlockAtTheEnd(t *testing.T) {
	a := NewWithConfig(expandable)
	first := mustMalloc(t, a, 16*MiB, 0)
	b := mustMalloc(t, a, 24*MiB, 0)
	if a.Reserved() != 40*MiB || b.Addr != first.Addr+16*MiB {
		t.Fatalf("reserved %d MiB, block at +%d MiB", a.Reserved()/MiB, (b.Addr-first.Addr)/MiB)
	}
}

// should_split with expandable segments: every pool splits down to 512 B,
// so a 19.5 MiB block leaves 0.5 MiB free in its page, where a plain large
// segment keeps remainders of 1 MiB or less inside the block.
func TestExpandableSegmentsSplitLargeBlocksDownTo512Bytes(t *testing.T) {
	a := NewWithConfig(expandable)
	if b := mustMalloc(t, a, 19*MiB+512*KiB, 0); b.Size != 19*MiB+512*KiB {
		t.Fatalf("block %d: the 512 KiB remainder was not split off", b.Size)
	}
	if b := mustMalloc(t, New(0), 19*MiB+512*KiB, 0); b.Size != 20*MiB {
		t.Fatalf("plain segment: block %d, want the whole 20 MiB", b.Size)
	}
}
