package torch

// LargestFree returns the largest free cached block of any pool: with the
// free device memory (capacity − Reserved), what an out-of-memory report
// needs to say whether the request failed for want of memory or of one
// block large enough.
func (a *Allocator) LargestFree() uint64 {
	var largest uint64
	for _, p := range a.poolOrder {
		if n := len(p.blocks); n > 0 {
			largest = max(largest, p.blocks[n-1].size) // sorted by size
		}
	}
	return largest
}

// Held returns the cached bytes the allocator keeps for other streams or
// pools where its out-of-memory path cannot take them back: blocks freed
// with other streams' uses pending (RequestFree), whole free segments of a
// graph-private pool whose graph still lives, and, while a graph captures
// (the release is skipped then), every whole free segment. An
// out-of-memory report needs it to tell memory that is free but held
// elsewhere from memory that is free but in pieces too small.
func (a *Allocator) Held() uint64 {
	var held uint64
	for _, b := range a.live {
		if b.pending {
			held += b.size
		}
	}
	capturing := len(a.capturing) > 0
	for _, p := range a.poolOrder {
		kept := capturing || (p.key.private != 0 && !a.freeable[p.key.private])
		if !kept {
			continue
		}
		for _, b := range p.blocks {
			if b.prev == nil && b.next == nil && !b.seg.expandable {
				held += b.size
			}
		}
	}
	return held
}
