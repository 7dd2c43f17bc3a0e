// Staging buffers: host-visible allocations that carry Write's and Read's
// bytes where device memory is not host-visible (or with Options.Staging,
// and always inside a capture), kept for reuse.
//
// A staging buffer per transfer costs a vkAllocateMemory, a vkMapMemory and
// a vkFreeMemory, and on lavapipe (and any driver whose memory is fresh
// host pages) a page fault for every 4 KiB the first copy touches: more
// than the copy itself. So a buffer whose step completed goes back to a
// pool, by size class (powers of two from stagingMinClass), and the next
// transfer of that class takes it. It goes back when its queue reclaims
// the step: at the queue's next Enqueue, or, for a queue that went idle,
// at an explicit cleanup (Backend.Release), so the driver holds no buffer
// outside the pool once everything is freed and cleaned up.
//
// Bounds: the pool keeps at most stagingPoolBuffers buffers and
// stagingPoolBytes bytes (at most a sixteenth of the staging heap's
// budget), since pooled buffers count against the heap's budget and the
// allocation count limit like pages; a buffer that does not fit, or a
// transfer larger than the byte bound, is freed when its step is reclaimed.
// An allocation refused for want of memory (a page's or a staging
// buffer's) empties the pool before its one retry, and Close frees it.

package vulkan

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/gpumem/gpumem/storage"
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
	return a
}

// keep pools a, reporting whether it did (false: the caller frees it).
func (p *stagingPool) keep(a *allocation) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
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
	var out []*allocation
	for c, l := range p.free {
		out = append(out, l...)
		delete(p.free, c)
	}
	p.bytes, p.count = 0, 0
	if close {
		p.closed = true
	}
	return out
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
	if err != nil && errors.Is(err, storage.ErrOutOfMemory) && !storage.IsDevicePoisoned(err) && b.trimStaging() {
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

// trimStaging frees every pooled staging buffer; it reports whether there
// was any.
func (b *Backend) trimStaging() bool {
	l := b.stage.drain(false)
	for _, a := range l {
		b.free(a)
	}
	return len(l) > 0
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
