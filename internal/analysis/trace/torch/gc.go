// garbage_collection_threshold:F — garbage_collect_cached_blocks of
// c10/cuda/CUDACachingAllocator.cpp: before allocating a new segment, when
// the reserved bytes exceed F × the allowed memory, release cached whole
// segments that have gone unused the longest, without the device-wide
// synchronize that release_cached_blocks costs. It runs only with a memory
// fraction set (set_fraction), which the model reads as a capacity.
//
// Age. Every get_free_block call on a BlockPool (large or small, all
// streams) increments that pool's counter; a block's age is the counter now
// minus its value when the block last entered the free list. Only the
// large pool is collected.
//
// Collection, when reserved > F·capacity (target: the excess):
//  1. Over every whole (unsplit) free segment of the large pool, the mean
//     age.
//  2. One pass in free-list order releases every whole segment whose age
//     is at least the mean (the pass does not stop at the target, so the
//     collection does not run again at once).
//  3. Repeat with the mean of what is left while the target is not met, a
//     pass released something, and whole segments remain.
//
// Free-list order is PyTorch's (stream, size, address); the model's streams
// are dense numbers in order of first use rather than raw stream handles,
// so with several streams the pass order (not the set released by a pass)
// may differ. Expandable ranges are never collected (their free blocks are
// split by their unmapped neighbours, and release_block refuses them).

package torch

import (
	"slices"
	"sort"
)

// collectGarbage is garbage_collect_cached_blocks.
func (a *Allocator) collectGarbage() {
	threshold := uint64(a.set.GarbageCollectionThreshold * float64(a.cfg.Capacity))
	if a.reserved <= threshold {
		return
	}
	target := a.reserved - threshold
	var large []*freePool
	for _, p := range a.poolOrder {
		if !p.key.small && p.key.private == 0 {
			large = append(large, p)
		}
	}
	sort.SliceStable(large, func(i, j int) bool { return large[i].key.stream < large[j].key.stream })
	whole := func(b *block) bool { return b.prev == nil && b.next == nil && !b.seg.expandable }
	age := func(p *freePool, b *block) uint64 { return *p.lookups - b.gcBase }

	var totalAge uint64
	count := 0
	for _, p := range large {
		for _, b := range p.blocks {
			if whole(b) {
				totalAge += age(p, b)
				count++
			}
		}
	}
	var reclaimed uint64
	for freed := true; reclaimed < target && freed && count > 0; {
		mean := float64(totalAge) / float64(count)
		freed = false
		for _, p := range large {
			for _, b := range slices.Clone(p.blocks) {
				if whole(b) && float64(age(p, b)) >= mean {
					freed = true
					reclaimed += b.size
					totalAge -= age(p, b)
					count--
					a.releaseSegment(p, b)
					a.stats.GarbageCollected++
				}
			}
		}
	}
}
