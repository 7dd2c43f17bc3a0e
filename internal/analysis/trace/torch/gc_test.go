package torch

import (
	"slices"
	"testing"
)

// gcScenario leaves three cached whole segments of 24, 26 and 26 MiB: the
// 24 MiB one freed long ago, the others just now (reused and freed again
// and again, each reuse a lookup of the large pool), then asks for 30 MiB,
// which no cached block fits.
func gcScenario(t *testing.T, cfg Config) *Allocator {
	t.Helper()
	a := NewWithConfig(cfg)
	old := mustMalloc(t, a, 24*MiB, 0)
	young := mustMalloc(t, a, 26*MiB, 0)
	a.Free(old)
	busy := mustMalloc(t, a, 26*MiB, 0)
	for range 10 {
		a.Free(busy)
		busy = mustMalloc(t, a, 26*MiB, 0)
	}
	a.Free(busy)
	a.Free(young)
	if a.Reserved() != 76*MiB {
		t.Fatalf("scenario reserved %d MiB", a.Reserved()/MiB)
	}
	mustMalloc(t, a, 30*MiB, 0)
	return a
}

func cachedSizes(a *Allocator) []uint64 {
	var s []uint64
	for _, b := range a.pool(0, false).blocks {
		s = append(s, b.size/MiB)
	}
	return s
}

// garbage_collect_cached_blocks: reserved 76 MiB is over 0.6 x 100 MiB, so
// before the new segment the segments older than the mean age go — only
// the 24 MiB one, enough for the 16 MiB excess — with no flush (no alloc
// retry): 52 + 30 = 82 MiB. Without garbage collection the 30 MiB segment
// does not fit (106 > 100) and the out-of-memory path flushes all three.
func TestGarbageCollectionReleasesTheOldestCachedSegmentsWithoutAFlush(t *testing.T) {
	a := gcScenario(t, Config{Capacity: 100 * MiB, Settings: Settings{GarbageCollectionThreshold: 0.6}})
	st := a.Stats()
	if st.GarbageCollected != 1 || st.AllocRetries != 0 || a.Reserved() != 82*MiB || !slices.Equal(cachedSizes(a), []uint64{26, 26}) {
		t.Fatalf("reserved %d MiB, cached %v, stats %+v", a.Reserved()/MiB, cachedSizes(a), st)
	}
	off := gcScenario(t, Config{Capacity: 100 * MiB})
	if st := off.Stats(); st.GarbageCollected != 0 || st.AllocRetries != 1 || off.Reserved() != 30*MiB {
		t.Fatalf("without the threshold: reserved %d MiB, stats %+v", off.Reserved()/MiB, st)
	}
}

// Garbage collection needs a memory fraction (a capacity): without one it
// never runs, as in PyTorch.
func TestGarbageCollectionNeedsACapacity(t *testing.T) {
	a := gcScenario(t, Config{Settings: Settings{GarbageCollectionThreshold: 0.6}})
	if a.Stats().GarbageCollected != 0 || a.Reserved() != 106*MiB {
		t.Fatalf("reserved %d MiB, stats %+v", a.Reserved()/MiB, a.Stats())
	}
}

// Below the threshold nothing is collected; a high threshold leaves the
// flush to the out-of-memory path.
func TestGarbageCollectionWaitsForTheThreshold(t *testing.T) {
	a := gcScenario(t, Config{Capacity: 110 * MiB, Settings: Settings{GarbageCollectionThreshold: 0.7}})
	if a.Stats().GarbageCollected != 0 || a.Reserved() != 106*MiB {
		t.Fatalf("reserved %d MiB, stats %+v", a.Reserved()/MiB, a.Stats())
	}
}
