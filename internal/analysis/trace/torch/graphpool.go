package torch

import "fmt"

// Graph-private pools: what PyTorch does with memory while a CUDA graph is
// captured (torch.cuda.graph, CUDAGraph::capture_begin, the caching
// allocator's beginAllocateToPool, endAllocateToPool and releasePool).
//
// A graph replays its kernels at the addresses they had when recorded, so
// memory the recording allocated must never serve anything else while the
// graph lives. PyTorch gives each capture a private pool: while a stream
// captures, its allocations go to that pool's own segments (same sizes and
// split rules as the default pools), and a block freed during the capture
// returns to the private pool, where a later allocation of the same capture
// reuses it in stream order. A private pool's segments are plain ones even
// with expandable segments set (alloc_block skips them for a private pool). No allocation outside the capture ever takes a
// block of a private pool (get_pool routes by the stream's capture, and
// get_free_block looks only in that pool, on that stream), and the cache
// release (empty_cache, the out-of-memory path) leaves a pool alone until
// its graph is released (releasePool: use_count reaches 0, the pool becomes
// freeable); from then on its free segments go back like any other cached
// segment. Blocks still allocated from it (a graph's outputs) return to it
// when freed. While any capture is underway the out-of-memory path does not
// release the cache at all (it would synchronize the device), so a capture
// that needs a new segment past the capacity fails.
//
// Read from c10/cuda/CUDACachingAllocator.cpp (get_pool, free_block,
// release_cached_blocks, beginAllocateToPool, releasePool) and
// torch/cuda/graphs.py of PyTorch 2.4 to 2.9.
//
// torch.cuda.graph's __enter__ synchronizes, collects garbage and empties
// the cache before capture_begin, so the warmup's cached segments do not
// outlive it; Replay models that with EmptyCache at a capture's begin.
//
// Not modelled: pools shared between graphs (the pool= argument,
// graph_pool_handle), captures across several streams (fork and join), and
// graph_capture_record_stream_reuse.

// BeginAllocateToPool sends stream's allocations to private pool id (> 0)
// until EndAllocateToPool. A stream already capturing, an id not above 0 or
// one released already is refused with ErrInvalidRequest, and nothing
// changes.
func (a *Allocator) BeginAllocateToPool(stream, id int) error {
	if id <= 0 || stream < 0 {
		return fmt.Errorf("%w: private pool %d on stream %d (pool must be > 0, stream ≥ 0)", ErrInvalidRequest, id, stream)
	}
	if cur, ok := a.capturing[stream]; ok {
		return fmt.Errorf("%w: stream %d already allocates to private pool %d", ErrInvalidRequest, stream, cur)
	}
	if a.freeable[id] {
		return fmt.Errorf("%w: private pool %d was released", ErrInvalidRequest, id)
	}
	a.capturing[stream] = id
	return nil
}

// EndAllocateToPool returns stream's allocations to the default pools. It
// reports whether the stream was allocating to a private pool.
func (a *Allocator) EndAllocateToPool(stream int) bool {
	_, ok := a.capturing[stream]
	delete(a.capturing, stream)
	return ok
}

// ReleasePool is releasePool: the graph using private pool id is gone, so
// the cache release may return the pool's free segments from now on. A
// stream still capturing into it stops (as capture_end would have).
func (a *Allocator) ReleasePool(id int) {
	for s, p := range a.capturing {
		if p == id {
			delete(a.capturing, s)
		}
	}
	a.freeable[id] = true
}
