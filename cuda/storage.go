package cuda

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gpumem/gpumem/storage"
)

// Storage is a storage.Storage on device memory (cuMemAlloc_v2), made by
// Backend.NewStorage for one stream's memory. Resolve returns the device
// address of a window (Resource.Ptr) and no bytes. Dealloc queues the
// allocation; Flush frees the queue with cuMemFree_v2 unless a queue of the
// backend records, in which case the queue is kept for a later Flush (a
// free during a capture may invalidate it). BytesAllocated counts queued
// allocations until they are freed. Driver calls run on the device
// executor. Safe for concurrent use.
type Storage struct {
	b      *Backend
	budget *storage.Budget

	allocated atomic.Uint64 // live + queued bytes

	mu     sync.Mutex // guards the fields below
	live   map[storage.ID]devAlloc
	queued []devAlloc
}

// devAlloc is one device allocation; ptr is 0 for a zero-size one, which
// takes nothing from the driver.
type devAlloc struct {
	id   storage.ID
	ptr  uintptr
	size uint64
}

var _ storage.Storage = (*Storage)(nil)

// Alignment implements storage.Storage: 256.
func (s *Storage) Alignment() uint64 { return Alignment }

// Alloc implements storage.Storage: size bytes from the budget, then from
// the driver. A refusal of either wraps storage.ErrOutOfMemory (the
// driver's as a *DriverError with code 2); nothing changed. On a poisoned
// backend it returns the poison.
func (s *Storage) Alloc(size uint64) (storage.Region, error) {
	if err := s.b.Poisoned(); err != nil {
		return storage.Region{}, fmt.Errorf("cuda: allocate %d bytes on a poisoned device: %w", size, err)
	}
	a := devAlloc{id: storage.NewID(), size: size}
	if size > 0 {
		if err := s.budget.Take(size); err != nil {
			return storage.Region{}, err
		}
		ptr, err := s.b.ctx.Alloc(size)
		if err != nil {
			s.budget.Give(size)
			s.b.notePoison(err)
			return storage.Region{}, err
		}
		a.ptr = ptr
	}
	s.mu.Lock()
	s.live[a.id] = a
	s.mu.Unlock()
	s.allocated.Add(size)
	return storage.Region{ID: a.id, Size: size}, nil
}

// Dealloc implements storage.Storage: the allocation is queued until Flush;
// an unknown ID is ignored.
func (s *Storage) Dealloc(id storage.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.live[id]
	if !ok {
		return
	}
	delete(s.live, id)
	s.queued = append(s.queued, a)
}

// Flush implements storage.Storage: frees every queued allocation, unless a
// queue of the backend records (then the queue stays for a later Flush).
// A free the driver refuses is dropped from the accounting all the same:
// the allocation is no longer in use, and a refusal means the context is
// poisoned, which frees it with the context.
func (s *Storage) Flush() {
	s.b.capMu.Lock()
	defer s.b.capMu.Unlock()
	if s.b.capturing > 0 {
		return
	}
	s.mu.Lock()
	queued := s.queued
	s.queued = nil
	s.mu.Unlock()
	if len(queued) == 0 {
		return
	}
	err := s.free(queued)
	s.b.notePoison(err)
}

// free hands allocations back to the driver in one device-executor call
// and to the budget; it returns the first driver error.
func (s *Storage) free(as []devAlloc) error {
	d := s.b.ctx.drv
	var first error
	err := s.b.ctx.do(func() error {
		for _, a := range as {
			if a.ptr == 0 {
				continue
			}
			if err := d.check("cuMemFree_v2", d.cuMemFree(a.ptr)); err != nil && first == nil {
				first = fmt.Errorf("cuda: free %#x (%d bytes): %w", a.ptr, a.size, err)
			}
		}
		return nil
	})
	for _, a := range as {
		if a.size > 0 {
			s.budget.Give(a.size)
		}
		s.allocated.Add(^(a.size - 1))
	}
	if err != nil {
		return err
	}
	return first
}

// Resolve implements storage.Storage: the device address of the window,
// or storage.ErrUnknownRegion.
func (s *Storage) Resolve(r storage.Region) (storage.Resource, error) {
	s.mu.Lock()
	a, ok := s.live[r.ID]
	s.mu.Unlock()
	if !ok {
		return storage.Resource{}, fmt.Errorf("%w: allocation %d is not live in this cuda storage", storage.ErrUnknownRegion, r.ID)
	}
	if r.Offset > a.size || r.Size > a.size-r.Offset {
		return storage.Resource{}, fmt.Errorf("%w: window [%d, %d) lies outside allocation %d of %d bytes",
			storage.ErrUnknownRegion, r.Offset, storage.SatAdd(r.Offset, r.Size), r.ID, a.size)
	}
	res := storage.Resource{Region: r}
	if a.ptr != 0 {
		res.Ptr = a.ptr + uintptr(r.Offset)
	}
	return res, nil
}

// BytesAllocated implements storage.Storage: live and queued bytes.
func (s *Storage) BytesAllocated() uint64 { return s.allocated.Load() }

// release frees everything the storage holds, live or queued (backend
// Close, after every queue closed).
func (s *Storage) release() error {
	s.mu.Lock()
	all := s.queued
	s.queued = nil
	for id, a := range s.live {
		all = append(all, a)
		delete(s.live, id)
	}
	s.mu.Unlock()
	if len(all) == 0 {
		return nil
	}
	return s.free(all)
}
