// expandable_segments:True — Note [Expandable Segments] of
// c10/cuda/CUDACachingAllocator.cpp: instead of one cudaMalloc per
// segment, each (pool, stream) reserves one large virtual range
// (ExpandableSegment: 1 1/8 of the device's memory) and maps physical
// pages into it on demand, so blocks freed next to each other merge across
// what would have been segment boundaries. This file models
// find_expandable_block, map_block, try_allocate_expandable_block,
// unmap_block, release_expandable_segment and get_free_block's expandable
// branch.
//
// Data structure. A range is a segment with expandable set, tiled by
// blocks as any segment (T1); a block is mapped (free or allocated) or
// unmapped (page-aligned, a whole number of pages, in the pool's unmapped
// list by address). Pages are 2 MiB in the small pool (kSmallBuffer) and
// 20 MiB in the large pool (kLargeBuffer). Reserved counts mapped pages
// only (T4).
//
// Growth (alloc_block with expandable segments):
//  1. find_expandable_block: the unmapped blocks of the pool in address
//     order; for each, start from the free mapped block just before it if
//     there is one; the first start from which free and unmapped blocks add
//     up to the request wins — the lowest address that can hold it, so
//     gaps left by an earlier unmap are filled first. None: reserve a new
//     range.
//  2. try_allocate_expandable_block: map the pages the request still lacks,
//     one unmapped block at a time (map_block: the request rounded up to
//     whole pages, all or nothing against the capacity; the new pages merge
//     with the free neighbours). Each mapping is one segment_map; pages
//     mapped before a later mapping fails stay mapped, as in PyTorch.
//
// Out of memory (release_cached_blocks): every free mapped block of every
// expandable range unmaps the pages that lie wholly inside it (unmap_block,
// one segment_unmap each), and a range left with no page mapped is
// released. Then the request is retried, so pages freed anywhere can be
// mapped again where the request needs them.
//
// Best fit (get_free_block): a free block followed by unmapped space can
// grow, so for best fit it counts as its size plus that space; from the
// smallest block that fits, the search moves on to larger ones while the
// next has a smaller such size. The max_split_size checks then apply as
// usual, but should_split ignores max_split_size: with expandable segments
// every block splits down to 512 B.
//
// Cost: find is linear in the pool's unmapped blocks (one, unless out of
// memory has punched holes); mapping and unmapping are O(log n) in the
// pool's free blocks plus the slice insertion.

package torch

import (
	"math"
	"sort"
)

// defaultExpandableRange is the virtual range of a new expandable segment
// when no capacity is set (PyTorch sizes it from the device: 1 1/8 of
// totalGlobalMem); 64 TiB is more than any device, and the range is never
// smaller than the request.
const defaultExpandableRange = 64 << 40

// expandablePage is the page (segment_size) of an expandable range in the
// small or large pool.
func expandablePage(small bool) uint64 {
	if small {
		return SmallBuffer
	}
	return LargeBuffer
}

func (p *freePool) insertUnmapped(b *block) {
	i := sort.Search(len(p.unmapped), func(i int) bool { return p.unmapped[i].addr >= b.addr })
	p.unmapped = append(p.unmapped, nil)
	copy(p.unmapped[i+1:], p.unmapped[i:])
	p.unmapped[i] = b
}

func (p *freePool) removeUnmapped(b *block) {
	i := sort.Search(len(p.unmapped), func(i int) bool { return p.unmapped[i].addr >= b.addr })
	if i >= len(p.unmapped) || p.unmapped[i] != b {
		panic("torch: unmapped block missing from its pool (T3)")
	}
	p.unmapped = append(p.unmapped[:i], p.unmapped[i+1:]...)
}

// expandableFit is get_free_block's expandable branch, from index i of the
// first block that fits.
func (p *freePool) expandableFit(i int) int {
	growable := func(b *block) uint64 {
		if b.next != nil && b.next.unmapped {
			return b.size + b.next.size
		}
		return b.size
	}
	for p.blocks[i].seg.expandable && i+1 < len(p.blocks) && growable(p.blocks[i+1]) < growable(p.blocks[i]) {
		i++
	}
	return i
}

// allocExpandable is try_allocate_expandable_block: a free block of at
// least size bytes, its missing pages mapped, out of every free list; nil
// when the capacity refuses a mapping.
func (a *Allocator) allocExpandable(p *freePool, size uint64) *block {
	c := a.findExpandable(p, size)
	if c == nil {
		return nil
	}
	if c.unmapped {
		if c = a.mapBlock(p, c, min(c.size, size)); c == nil {
			return nil
		}
	}
	for c.size < size {
		next := c.next
		if next == nil || !next.unmapped {
			panic("torch: expandable candidate is not followed by unmapped space (find_expandable_block)")
		}
		if c = a.mapBlock(p, next, min(size-c.size, next.size)); c == nil {
			return nil
		}
	}
	p.remove(c)
	return c
}

// findExpandable is find_expandable_block: the lowest-address free or
// unmapped block from which free and unmapped blocks add up to size bytes,
// reserving a new range when none does; nil only when the synthetic
// address space is exhausted.
func (a *Allocator) findExpandable(p *freePool, size uint64) *block {
	room := func(b *block) bool {
		var bytes uint64
		for ; bytes < size && b != nil && !b.allocated; b = b.next {
			bytes += b.size
		}
		return bytes >= size
	}
	for _, c := range p.unmapped {
		if c.prev != nil && !c.prev.allocated {
			c = c.prev
		}
		if room(c) {
			return c
		}
	}
	page := expandablePage(p.key.small)
	span := uint64(defaultExpandableRange)
	if capacity := a.cfg.Capacity; capacity != 0 {
		capacity = min(capacity, MaxRequest)
		span = capacity + capacity/8
	}
	if span < size {
		span = size
	}
	span = (span + page - 1) / page * page
	addr, _, ok := a.segmentAddress(RecordedSegment{}, span)
	if !ok {
		return nil
	}
	seg := &segment{addr: addr, size: span, pool: p, expandable: true, page: page}
	a.track(seg, false)
	b := &block{addr: seg.addr, size: span, unmapped: true, seg: seg}
	p.insertUnmapped(b)
	return b
}

// mapBlock is map_block: map the pages of unmapped block b that cover its
// first size bytes, merge them with free neighbours and put the result in
// the free list, which it returns; nil (and nothing changed) when the
// capacity refuses the pages.
func (a *Allocator) mapBlock(p *freePool, b *block, size uint64) *block {
	page := b.seg.page
	mapped := (size + page - 1) / page * page
	if c := a.cfg.Capacity; c != 0 && (mapped > c || a.reserved > c-mapped) {
		return nil
	}
	if a.reserved > math.MaxUint64-mapped {
		return nil
	}
	p.removeUnmapped(b)
	b.unmapped = false
	if mapped < b.size {
		rest := &block{addr: b.addr + mapped, size: b.size - mapped, unmapped: true, prev: b, next: b.next, seg: b.seg}
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		b.size = mapped
		p.insertUnmapped(rest)
	}
	if prev := b.prev; prev != nil && !prev.allocated && !prev.unmapped {
		p.remove(prev)
		b.addr, b.size, b.prev = prev.addr, b.size+prev.size, prev.prev
		if b.prev != nil {
			b.prev.next = b
		}
	}
	if next := b.next; next != nil && !next.allocated && !next.unmapped {
		p.remove(next)
		b.size += next.size
		b.next = next.next
		if b.next != nil {
			b.next.prev = b
		}
	}
	p.insert(b)
	a.reserved += mapped
	a.peakRes = max(a.peakRes, a.reserved)
	a.stats.SegmentMaps++
	if a.onSegment != nil {
		a.onSegment(mapped, false, true)
	}
	return b
}

// unmapBlock is unmap_block for free mapped block b of an expandable range:
// the pages wholly inside it are unmapped and merge with unmapped
// neighbours; what is left of b on either side stays free and mapped. A
// range left with no page mapped is released (release_expandable_segment).
func (a *Allocator) unmapBlock(p *freePool, b *block) {
	seg := b.seg
	page := seg.page
	off := b.addr - seg.addr
	first := (off + page - 1) / page
	last := (off + b.size) / page
	if first >= last {
		return
	}
	p.remove(b)
	start, end := seg.addr+first*page, seg.addr+last*page
	if start > b.addr {
		before := &block{addr: b.addr, size: start - b.addr, prev: b.prev, next: b, seg: seg}
		if b.prev != nil {
			b.prev.next = before
		}
		b.prev = before
		p.insert(before)
	}
	if bEnd := b.addr + b.size; end < bEnd {
		after := &block{addr: end, size: bEnd - end, prev: b, next: b.next, seg: seg}
		if b.next != nil {
			b.next.prev = after
		}
		b.next = after
		p.insert(after)
	}
	b.addr, b.size, b.unmapped = start, end-start, true
	if prev := b.prev; prev != nil && prev.unmapped {
		p.removeUnmapped(prev)
		b.addr, b.size, b.prev = prev.addr, b.size+prev.size, prev.prev
		if b.prev != nil {
			b.prev.next = b
		}
	}
	if next := b.next; next != nil && next.unmapped {
		p.removeUnmapped(next)
		b.size += next.size
		b.next = next.next
		if b.next != nil {
			b.next.prev = b
		}
	}
	a.reserved -= end - start
	a.stats.SegmentUnmaps++
	if a.onSegment != nil {
		a.onSegment(end-start, true, true)
	}
	if b.prev == nil && b.next == nil {
		a.untrack(seg) // the whole range is unmapped: release_expandable_segment
		return
	}
	p.insertUnmapped(b)
}
