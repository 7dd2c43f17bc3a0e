package cuda

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumem/gpumem/storage"
)

// plainStorage is a storage.Storage on device memory (cuMemAlloc_v2), made by
// Backend.NewStorage for one stream's memory. Resolve returns the device
// address of a window (Resource.Ptr) and no bytes. Dealloc queues the
// allocation; Flush frees the queue with cuMemFree_v2 unless a queue of the
// backend records, in which case the queue is kept for a later Flush (a
// free during a capture may invalidate it). BytesAllocated counts queued
// allocations until they are freed. Driver calls run on the device
// executor. Safe for concurrent use.
//
// Where the driver manages virtual memory, NewStorage returns a
// granularStorage around it (granular.go): the reservations it makes live
// in the same Storage, and their unmaps and frees are queued the same way.
type plainStorage struct {
	b      *Backend
	budget *storage.Budget

	allocated atomic.Uint64 // live + queued bytes of plain allocations

	// Granular storages only (granular.go); granule is 0 on a plain one.
	granule  uint64
	mapped   atomic.Uint64 // bytes of granules holding physical memory, unmaps queued included
	reserved atomic.Uint64 // address space of reservations, live or queued

	mu     sync.Mutex // guards the fields below
	live   map[storage.ID]devAlloc
	queued []devAlloc
	// ranges are the live reservations, unmapping those of them with
	// granule unmaps queued, freed the reservations Dealloc queued.
	ranges    map[storage.ID]*vmmRange
	unmapping map[*vmmRange]struct{}
	freed     []*vmmRange
}

// devAlloc is one device allocation; ptr is 0 for a zero-size one, which
// takes nothing from the driver.
type devAlloc struct {
	id   storage.ID
	ptr  uintptr
	size uint64
}

var _ storage.Storage = (*plainStorage)(nil)

// Alignment implements storage.Storage: 256.
func (s *plainStorage) Alignment() uint64 { return Alignment }

// Alloc implements storage.Storage: size bytes from the budget, then from
// the driver. A refusal of either wraps storage.ErrOutOfMemory (the
// driver's as a *DriverError with code 2); nothing changed. On a poisoned
// backend it returns the poison.
func (s *plainStorage) Alloc(size uint64) (storage.Region, error) {
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

// Dealloc implements storage.Storage: the allocation (or reservation, with
// whatever it maps) is queued until Flush; an unknown ID is ignored.
func (s *plainStorage) Dealloc(id storage.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.live[id]; ok {
		delete(s.live, id)
		s.queued = append(s.queued, a)
		return
	}
	if r, ok := s.ranges[id]; ok {
		delete(s.ranges, id)
		delete(s.unmapping, r)
		s.freed = append(s.freed, r)
	}
}

// Flush implements storage.Storage: frees every queued allocation and, on
// a granular storage, carries out every queued unmap and reservation free
// after waiting for the device's work (cuCtxSynchronize: work enqueued
// before the unmap may still use the granule), unless a queue of the
// backend records (then everything stays queued for a later Flush). A free
// or unmap the driver refuses is dropped from the accounting all the same:
// the memory is no longer in use, and a refusal means the context is
// poisoned, which frees it with the context.
func (s *plainStorage) Flush() {
	s.b.capMu.Lock()
	defer s.b.capMu.Unlock()
	if s.b.capturing > 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.takeQueuedLocked()
	if w.empty() {
		return
	}
	s.b.notePoison(s.drop(w))
}

// dropWork is what Flush or release hands back to the driver: plain
// allocations, single granules of live reservations, whole reservations.
type dropWork struct {
	plain    []devAlloc
	granules []granuleRef
	ranges   []*vmmRange
}

func (w *dropWork) empty() bool {
	return len(w.plain) == 0 && len(w.granules) == 0 && len(w.ranges) == 0
}

// takeQueuedLocked takes everything queued: plain frees, granule unmaps
// (their granules read as unmapped from here on) and freed reservations.
func (s *plainStorage) takeQueuedLocked() dropWork {
	w := dropWork{plain: s.queued, ranges: s.freed}
	s.queued, s.freed = nil, nil
	for r := range s.unmapping {
		for i, q := range r.unmapQueued {
			if q {
				w.granules = append(w.granules, granuleRef{addr: r.granuleAddr(uint64(i), s.granule), h: r.handles[i]})
				r.handles[i], r.unmapQueued[i] = 0, false
			}
		}
		r.pending = 0
	}
	clear(s.unmapping)
	return w
}

// drop hands w back to the driver in one device-executor call, and to the
// budget and the counters; it returns the first driver error.
func (s *plainStorage) drop(w dropWork) error {
	d := s.b.ctx.drv
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	t0 := time.Now()
	err := s.b.ctx.do(func() error {
		if len(w.granules) > 0 || len(w.ranges) > 0 {
			// Unmapping takes the memory from under any work still
			// using it; wait for what is enqueued first.
			note(d.check("cuCtxSynchronize", d.CuCtxSynchronize()))
			for _, g := range w.granules {
				note(s.unmapGranule(g))
			}
			for _, r := range w.ranges {
				note(s.freeRange(r))
			}
		}
		for _, a := range w.plain {
			if a.ptr == 0 {
				continue
			}
			if err := d.check("cuMemFree_v2", d.CuMemFree(a.ptr)); err != nil {
				note(fmt.Errorf("cuda: free %#x (%d bytes): %w", a.ptr, a.size, err))
			}
		}
		return nil
	})
	s.b.clock.release.Add(int64(time.Since(t0)))
	for _, a := range w.plain {
		if a.size > 0 {
			s.budget.Give(a.size)
		}
		s.allocated.Add(^(a.size - 1))
	}
	var granules, span uint64
	granules += uint64(len(w.granules))
	for _, r := range w.ranges {
		for _, h := range r.handles {
			if h != 0 {
				granules++
			}
		}
		span += r.span
	}
	if bytes := granules * s.granule; bytes > 0 {
		s.budget.Give(bytes)
		s.mapped.Add(^(bytes - 1))
	}
	if span > 0 {
		s.reserved.Add(^(span - 1))
	}
	if err != nil {
		return err
	}
	return first
}

// Resolve implements storage.Storage: the device address of the window,
// or storage.ErrUnknownRegion. A window of a reservation must touch only
// mapped granules (storage G3): a granule whose unmap is queued reads as
// unmapped.
func (s *plainStorage) Resolve(r storage.Region) (storage.Resource, error) {
	s.mu.Lock()
	a, ok := s.live[r.ID]
	var rg *vmmRange
	if !ok {
		rg = s.ranges[r.ID]
	}
	var err error
	if rg != nil {
		err = rg.check(r, s.granule)
	}
	s.mu.Unlock()
	if rg != nil {
		if err != nil {
			return storage.Resource{}, err
		}
		res := storage.Resource{Region: r}
		if rg.base != 0 {
			res.Ptr = rg.base + uintptr(r.Offset)
		}
		return res, nil
	}
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

// BytesAllocated implements storage.Storage: live and queued bytes of plain
// allocations, plus the whole granules of reservations that hold physical
// memory (their unmaps queued included).
func (s *plainStorage) BytesAllocated() uint64 { return s.allocated.Load() + s.mapped.Load() }

// release frees everything the storage holds, live or queued (backend
// Close, after every queue closed).
func (s *plainStorage) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.takeQueuedLocked()
	for id, a := range s.live {
		w.plain = append(w.plain, a)
		delete(s.live, id)
	}
	for id, r := range s.ranges {
		w.ranges = append(w.ranges, r)
		delete(s.ranges, id)
	}
	if w.empty() {
		return nil
	}
	return s.drop(w)
}
