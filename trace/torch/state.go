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
