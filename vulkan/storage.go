package vulkan

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gpumem/gpumem/storage"
)

// Storage is a storage.Storage on device memory: each allocation is one
// VkDeviceMemory of a device-local type (memtype.go) with one VkBuffer
// over it, made by Backend.NewStorage for one stream's memory. Resolve
// returns the window's buffer device address as Resource.Ptr (and no
// bytes); ops find the VkBuffer and offset through the backend.
//
// Dealloc queues the allocation; Flush frees what the device is done
// with: an allocation is freed once every queue of the backend has
// completed the work it had issued when Dealloc ran (vkFreeMemory does not
// wait for the device, unlike cuMemFree). An Alloc refused for want of
// memory first waits for the queued frees and retries once.
// BytesAllocated counts queued allocations until they are freed. Safe for
// concurrent use.
type Storage struct {
	b      *Backend
	budget *storage.Budget

	allocated atomic.Uint64 // live + queued bytes

	mu     sync.Mutex
	live   map[storage.ID]*allocation
	queued []queuedFree
}

// queuedFree is a deallocated allocation and the work it waits for: each
// queue's issued sequence number when Dealloc ran.
type queuedFree struct {
	a     *allocation
	after []queueMark
}

var _ storage.Storage = (*Storage)(nil)

// Alignment implements storage.Storage: Backend.Properties().Alignment.
func (s *Storage) Alignment() uint64 { return s.b.props.Alignment }

// Alloc implements storage.Storage: size bytes from the device's budget,
// then from the heap's, then from the driver. Every refusal wraps
// storage.ErrOutOfMemory (VK_ERROR_OUT_OF_DEVICE_MEMORY as an *Error, the
// allocation limit as ErrAllocationLimit); nothing changed. On a poisoned
// backend it returns the poison.
func (s *Storage) Alloc(size uint64) (storage.Region, error) {
	if err := s.b.usable("allocate"); err != nil {
		return storage.Region{}, err
	}
	if size == 0 {
		id := storage.NewID()
		s.mu.Lock()
		s.live[id] = &allocation{id: id}
		s.mu.Unlock()
		return storage.Region{ID: id}, nil
	}
	if err := s.budget.Take(size); err != nil {
		return storage.Region{}, err
	}
	a, err := s.b.allocate(size, pageMemory)
	if err != nil && errors.Is(err, storage.ErrOutOfMemory) && !storage.IsDevicePoisoned(err) && s.b.drainFrees() {
		a, err = s.b.allocate(size, pageMemory)
	}
	if err != nil {
		s.budget.Give(size)
		return storage.Region{}, fmt.Errorf("vulkan: allocate %d bytes: %w", size, err)
	}
	s.b.register(a)
	s.mu.Lock()
	s.live[a.id] = a
	s.mu.Unlock()
	s.allocated.Add(size)
	return storage.Region{ID: a.id, Size: size}, nil
}

// Dealloc implements storage.Storage: the allocation is queued until the
// work issued so far is done (Flush frees it then); an unknown ID is
// ignored.
func (s *Storage) Dealloc(id storage.ID) {
	s.mu.Lock()
	a, ok := s.live[id]
	if ok {
		delete(s.live, id)
	}
	s.mu.Unlock()
	if !ok {
		return
	}
	s.b.unregister(id)
	if a.mem == 0 {
		return
	}
	marks := s.b.marks()
	s.mu.Lock()
	s.queued = append(s.queued, queuedFree{a: a, after: marks})
	s.mu.Unlock()
}

// Flush implements storage.Storage: hands every queued allocation whose
// work is done to the backend's reaper, which frees it off the caller's
// path (reaper.go); the rest stay queued for a later Flush (or an Alloc
// that needs the memory, or Close).
func (s *Storage) Flush() { s.freeQueued(false) }

// freeQueued frees the queued allocations whose work is done, or, with
// wait, waits for that work first. It reports whether it freed any.
func (s *Storage) freeQueued(wait bool) bool {
	s.mu.Lock()
	var done, keep []queuedFree
	for _, q := range s.queued {
		if wait || marksPassed(q.after) {
			done = append(done, q)
		} else {
			keep = append(keep, q)
		}
	}
	s.queued = keep
	s.mu.Unlock()
	for _, q := range done {
		if wait {
			if err := waitMarks(q.after); err != nil {
				s.b.notePoison(err)
			}
			s.drop(q.a)
			continue
		}
		a := q.a
		s.b.reap.add(func() { s.drop(a) }) // reaper.go
	}
	return len(done) > 0
}

// drop frees a and gives its bytes back.
func (s *Storage) drop(a *allocation) {
	s.b.free(a)
	s.budget.Give(a.size)
	s.allocated.Add(^(a.size - 1))
}

// Resolve implements storage.Storage: the buffer device address of the
// window (Ptr; 0 for a zero-size allocation), or storage.ErrUnknownRegion.
func (s *Storage) Resolve(r storage.Region) (storage.Resource, error) {
	s.mu.Lock()
	a, ok := s.live[r.ID]
	s.mu.Unlock()
	if !ok {
		return storage.Resource{}, fmt.Errorf("%w: allocation %d is not live in this vulkan storage", storage.ErrUnknownRegion, r.ID)
	}
	if r.Offset > a.size || r.Size > a.size-r.Offset {
		return storage.Resource{}, fmt.Errorf("%w: window [%d, %d) lies outside allocation %d of %d bytes",
			storage.ErrUnknownRegion, r.Offset, storage.SatAdd(r.Offset, r.Size), r.ID, a.size)
	}
	res := storage.Resource{Region: r}
	if a.addr != 0 {
		res.Ptr = uintptr(a.addr + r.Offset)
	}
	return res, nil
}

// BytesAllocated implements storage.Storage: live and queued bytes.
func (s *Storage) BytesAllocated() uint64 { return s.allocated.Load() }

// release frees everything the storage holds, live or queued (backend
// Close, after every queue is idle).
func (s *Storage) release() {
	s.freeQueued(true)
	s.mu.Lock()
	live := s.live
	s.live = make(map[storage.ID]*allocation)
	s.mu.Unlock()
	for _, a := range live {
		s.b.unregister(a.id)
		if a.mem != 0 {
			s.b.free(a)
			s.budget.Give(a.size)
			s.allocated.Add(^(a.size - 1))
		}
	}
}
