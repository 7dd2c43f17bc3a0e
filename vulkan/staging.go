// Staging buffers: host-visible allocations that carry Write's and Read's
// bytes where device memory is not host-visible (or with Options.Staging,
// and always inside a capture), kept for reuse.
//
// A staging buffer per transfer costs a vkAllocateMemory, a vkMapMemory and
// a vkFreeMemory, and on lavapipe (and any driver whose memory is fresh
// host pages) a page fault for every 4 KiB the first copy touches: more
// than the copy itself. So a buffer whose step completed goes back to a
// pool, by size class (powers of two from stagingMinClass), and the next
// transfer of that class takes it.
//
// Bounds: the pool keeps at most stagingPoolBuffers buffers and
// stagingPoolBytes bytes (at most a sixteenth of the staging heap's
// budget), since pooled buffers count against their heap's budget and the
// allocation count limit like pages; a buffer that does not fit, or a
// transfer larger than the byte bound, is freed when its step completes.
//
// Giving pooled buffers back. The pool is a cache nothing uses while its
// buffers are idle, so an explicit cleanup (Device.Cleanup,
// Stream.Cleanup, which end with Backend.Release) empties it: after freeing
// everything and cleaning up the backend holds no VkDeviceMemory, whether
// Write and Read went through mappings (lavapipe) or staging buffers (a
// discrete GPU). An allocation refused for want of memory (a page's or a
// staging buffer's) frees, before its one retry, the pooled buffers whose
// freeing can make room for it (stagingToTrim): all of them when the
// refusal is the allocation count's or the host's memory, else those in a
// heap the allocation draws on. Where staging buffers and pages share a
// heap (lavapipe, integrated GPUs) that is every pooled buffer; on a
// discrete GPU staging buffers are in the host's heap and pages in the
// device's, so a page refused by the device heap's budget leaves the pool
// alone: emptying it would make no room. Close frees the pool for good.

package vulkan

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

const (
	stagingMinClass    = 64 << 10
	stagingPoolBuffers = 8
	stagingPoolBytes   = 64 << 20
)

// stagingPool is the backend's pool of idle staging buffers.
type stagingPool struct {
	mu       sync.Mutex
	free     map[uint64][]*allocation // by class (the allocation's size)
	bytes    uint64                   // pooled bytes
	count    int                      // pooled buffers
	out      int                      // handed out by staging, not yet back (putStaging)
	maxBytes uint64
	closed   bool
	// off allocates a buffer per transfer, as the backend did before the
	// pool (the benchmark's comparison); set before any transfer.
	off bool
	// made counts the staging buffers allocated from the driver, reused
	// the transfers a pooled buffer served (tests and benchmarks).
	made, reused uint64
}

func newStagingPool(heapCapacity uint64) *stagingPool {
	return &stagingPool{free: make(map[uint64][]*allocation), maxBytes: min(stagingPoolBytes, heapCapacity/16)}
}

// stagingClass returns the pooled size for a transfer of n bytes, or 0 for
// one the pool does not keep.
func (p *stagingPool) class(n uint64) uint64 {
	c := uint64(stagingMinClass)
	if n > c {
		c = 1 << bits.Len64(n-1)
	}
	if p.off || c > p.maxBytes {
		return 0
	}
	return c
}

// take returns a pooled buffer of class c, or nil.
func (p *stagingPool) take(c uint64) *allocation {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.free[c]
	if len(l) == 0 {
		return nil
	}
	a := l[len(l)-1]
	l[len(l)-1] = nil
	p.free[c] = l[:len(l)-1]
	p.bytes -= c
	p.count--
	p.reused++
	p.out++
	return a
}

// keep takes back a buffer staging handed out and pools it, reporting
// whether it did (false: the caller frees it).
func (p *stagingPool) keep(a *allocation) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.out--
	if p.closed || !a.pooled || p.count >= stagingPoolBuffers || p.bytes+a.size > p.maxBytes {
		return false
	}
	p.free[a.size] = append(p.free[a.size], a)
	p.bytes += a.size
	p.count++
	return true
}

// drain empties the pool and returns what it held; with close, later
// buffers are not kept.
func (p *stagingPool) drain(close bool) []*allocation {
	p.mu.Lock()
	defer p.mu.Unlock()
	if close {
		p.closed = true
	}
	return p.drainLocked(nil)
}

// drainWhere removes and returns the pooled buffers for which take says
// so (every one when take is nil).
func (p *stagingPool) drainWhere(take func(*allocation) bool) []*allocation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drainLocked(take)
}

func (p *stagingPool) drainLocked(take func(*allocation) bool) []*allocation {
	var out []*allocation
	for c, l := range p.free {
		keep := l[:0]
		for _, a := range l {
			if take == nil || take(a) {
				out = append(out, a)
				p.bytes -= c
				p.count--
			} else {
				keep = append(keep, a)
			}
		}
		clear(l[len(keep):])
		if len(keep) == 0 {
			delete(p.free, c)
		} else {
			p.free[c] = keep
		}
	}
	return out
}

// held reports whether the pool holds a buffer, or one is out with a step
// (which, once it completed and its queue is polled, gives it back).
func (p *stagingPool) held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count > 0 || p.out > 0
}

// staging returns a host-visible staging buffer of at least n bytes, pooled
// or new. It is not registered: only the queue's step that holds it uses
// it, and putStaging gives it back once that step completed (or will never
// run).
func (b *Backend) staging(n uint64) (*allocation, error) {
	p := b.stage
	c := p.class(n)
	if c != 0 {
		if a := p.take(c); a != nil {
			return a, nil
		}
	}
	size := n
	if c != 0 {
		size = c
	}
	a, err := b.allocate(size, stagingMemory)
	if err != nil && errors.Is(err, storage.ErrOutOfMemory) && !storage.IsDevicePoisoned(err) && b.trimStagingFor(err, stagingMemory) {
		a, err = b.allocate(size, stagingMemory)
	}
	if err != nil {
		return nil, fmt.Errorf("vulkan: staging buffer of %d bytes: %w", size, err)
	}
	if a.mapped == nil {
		b.free(a)
		return nil, fmt.Errorf("vulkan: staging buffer of %d bytes is not host-visible: %w", size, ErrUnsupported)
	}
	a.pooled = c != 0
	p.mu.Lock()
	p.made++
	p.out++
	p.mu.Unlock()
	return a, nil
}

// putStaging gives back a staging buffer no device work uses any more: to
// the pool, or to the driver when the pool is full or closed.
func (b *Backend) putStaging(a *allocation) {
	if !b.stage.keep(a) {
		b.free(a)
	}
}

// trimStaging frees every pooled staging buffer (an explicit cleanup's
// Release); it reports whether there was any.
func (b *Backend) trimStaging() bool {
	l := b.stage.drain(false)
	for _, a := range l {
		b.free(a)
	}
	return len(l) > 0
}

// trimStagingFor frees the pooled staging buffers whose freeing may let an
// allocation of w, refused with err, succeed on its retry (stagingToTrim);
// it reports whether it freed any.
func (b *Backend) trimStagingFor(err error, w memoryWants) bool {
	l := b.stagingToTrim(err, w)
	for _, a := range l {
		b.free(a)
	}
	return len(l) > 0
}

// stagingToTrim removes from the pool and returns the buffers whose freeing
// may cure refusal err of an allocation of w: every one when err is the
// allocation count's (ErrAllocationLimit, VK_ERROR_TOO_MANY_OBJECTS) or
// the host's memory (VK_ERROR_OUT_OF_HOST_MEMORY: staging buffers are host
// memory), else those in a heap one of w's memory types is in, whose
// budget or memory the refusal may be about. A pooled buffer in another
// heap (a discrete GPU's host heap, for a page of its device heap) stays:
// freeing it would make no room.
func (b *Backend) stagingToTrim(err error, w memoryWants) []*allocation {
	if errors.Is(err, ErrAllocationLimit) || hasResult(err, vk.ErrorTooManyObjects, vk.ErrorOutOfHostMemory) {
		return b.stage.drainWhere(nil)
	}
	types := b.dev.info.MemoryTypes
	heaps := make(map[uint32]bool)
	for _, t := range w.candidates(types, ^uint32(0)) {
		heaps[types[t].Heap] = true
	}
	return b.stage.drainWhere(func(a *allocation) bool { return heaps[types[a.typ].Heap] })
}

// hasResult reports whether err or an error it wraps (errors.Join's
// included) is an *Error with one of codes.
func hasResult(err error, codes ...int32) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *Error:
		return slices.Contains(codes, e.Code)
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			if hasResult(x, codes...) {
				return true
			}
		}
		return false
	case interface{ Unwrap() error }:
		return hasResult(e.Unwrap(), codes...)
	}
	return false
}

// closeStaging frees the pool for good (Close, after every queue closed).
func (b *Backend) closeStaging() {
	for _, a := range b.stage.drain(true) {
		b.free(a)
	}
}

// stagingCounts returns how many staging buffers were allocated and how
// many transfers a pooled one served, and what the pool holds now.
func (b *Backend) stagingCounts() (made, reused uint64, pooled int, pooledBytes uint64) {
	p := b.stage
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.made, p.reused, p.count, p.bytes
}
