package vulkan

import (
	"context"
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
// Dealloc queues the allocation until no device work can use it: every
// step that recorded a command on it completed, and no commandGraph that
// recorded one is left (vkFreeMemory does not wait for the device, unlike
// cuMemFree). Flush hands the queued allocations that are idle to the
// backend's releaser goroutine (reaper.go), which frees them off the
// caller's path and also frees the others once their work completes,
// without another call; Backend.Release frees the idle ones before it
// returns (an explicit cleanup calls it). An Alloc refused for want of
// memory first waits for the queued frees and retries once.
// BytesAllocated counts queued allocations until they are freed. Safe for
// concurrent use.
type deviceStorage struct {
	b      *Backend
	budget *storage.Budget

	allocated atomic.Uint64 // live + queued bytes

	mu     sync.Mutex
	live   map[storage.ID]*allocation
	queued []*allocation // deallocated, not yet handed to the releaser
}

var _ storage.Storage = (*deviceStorage)(nil)

// Alignment implements storage.Storage: Backend.Properties().Alignment.
func (s *deviceStorage) Alignment() uint64 { return s.b.props.Alignment }

// Alloc implements storage.Storage: size bytes from the device's budget,
// then from the heap's, then from the driver, each refusal retried once
// after the queued frees were drained (drainQueued, drainFrees). Every
// refusal wraps storage.ErrOutOfMemory (VK_ERROR_OUT_OF_DEVICE_MEMORY as an
// *Error, the allocation limit as ErrAllocationLimit); nothing changed. On
// a poisoned backend it returns the poison.
func (s *deviceStorage) Alloc(size uint64) (storage.Region, error) {
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
	// A refusal is retried once when frees may have cured it: ones the
	// releaser still had (the drain waits for them), or ones it finished
	// after the refusal and before the drain looked (frees moved). The
	// device's budget too: the pages a make-room cleanup just gave back
	// hold their bytes of it until they are freed.
	frees := s.b.frees.Load()
	err := s.budget.Take(size)
	if err != nil && errors.Is(err, storage.ErrOutOfMemory) && (s.b.drainQueued() || s.b.frees.Load() != frees) {
		err = s.budget.Take(size)
	}
	if err != nil {
		return storage.Region{}, err
	}
	frees = s.b.frees.Load()
	a, err := s.b.allocate(size, pageMemory)
	if err != nil && errors.Is(err, storage.ErrOutOfMemory) && !storage.IsDevicePoisoned(err) && (s.b.drainFrees(err) || s.b.frees.Load() != frees) {
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

// Dealloc implements storage.Storage: the allocation is queued until no
// device work uses it (see deviceStorage); an unknown ID is ignored.
func (s *deviceStorage) Dealloc(id storage.ID) {
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
	a.useMu.Lock()
	a.freed = true
	a.useMu.Unlock()
	s.mu.Lock()
	s.queued = append(s.queued, a)
	s.mu.Unlock()
}

// Flush implements storage.Storage: hands every queued allocation no
// device work uses any more to the backend's releaser, which frees it off
// the caller's path (reaper.go), and has the releaser watch the rest: each
// goes back once the work that uses it completes.
func (s *deviceStorage) Flush() {
	if more, _, _ := s.handOff(); more {
		s.b.reap.kick()
	}
}

// handOff hands the idle queued allocations to the releaser; it reports
// whether some stay queued, and a step one of those waits for when one
// waits only for submitted steps (the releaser's watch waits on it). Each
// is handed over under mu, so Release, which looks at the queue and then
// waits for the releaser, sees it in one place or the other.
func (s *deviceStorage) handOff() (more bool, m queueMark, waiting bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	done, m, waiting := s.sweepLocked(false)
	for _, a := range done {
		s.b.reap.add(func() { s.drop(a) })
	}
	return len(s.queued) > 0, m, waiting
}

// sweepLocked removes and returns the queued allocations that are idle,
// or with all, every queued one, and returns a step one of the kept ones
// waits for, if one waits only for submitted steps. Each allocation's
// state is read once (allocation.use), so one whose work completes during
// the sweep is taken or waited for, never neither. s.mu is held.
func (s *deviceStorage) sweepLocked(all bool) (done []*allocation, m queueMark, waiting bool) {
	keep := s.queued[:0]
	for _, a := range s.queued {
		am, w, idle := a.use()
		switch {
		case all || idle:
			done = append(done, a)
		default:
			keep = append(keep, a)
			if w && !waiting {
				m, waiting = am, true
			}
		}
	}
	clear(s.queued[len(keep):])
	s.queued = keep
	return done, m, waiting
}

// take removes and returns the queued allocations that are idle, or with
// all, every queued one, and a step a kept one waits for (sweepLocked).
func (s *deviceStorage) take(all bool) ([]*allocation, queueMark, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepLocked(all)
}

// releaseIdle frees, on the caller's goroutine, the queued allocations no
// device work uses; it reports whether it freed any, and a step a kept one
// waits for, if one waits only for submitted steps.
func (s *deviceStorage) releaseIdle() (freed bool, m queueMark, waiting bool) {
	done, m, waiting := s.take(false)
	for _, a := range done {
		s.drop(a)
	}
	return len(done) > 0, m, waiting
}

// waitQueued waits for the work of every queued allocation that waits
// only for submitted steps, then frees those; it reports whether it freed
// any. An allocation a recording or a commandGraph still holds stays
// queued, and so does the rest when a wait fails.
func (s *deviceStorage) waitQueued() bool {
	freed := false
	for {
		some, m, ok := s.releaseIdle()
		freed = freed || some
		if !ok {
			return freed
		}
		if err := m.q.WaitSeq(context.Background(), m.seq); err != nil {
			s.b.notePoison(err)
			some, _, _ := s.releaseIdle()
			return some || freed
		}
	}
}

// hasIdle reports whether a queued allocation is idle.
func (s *deviceStorage) hasIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.queued {
		if a.idle() {
			return true
		}
	}
	return false
}

// drop frees a and gives its bytes back.
func (s *deviceStorage) drop(a *allocation) {
	s.b.free(a)
	s.budget.Give(a.size)
	s.allocated.Add(^(a.size - 1))
}

// Resolve implements storage.Storage: the buffer device address of the
// window (Ptr; 0 for a zero-size allocation), or storage.ErrUnknownRegion.
func (s *deviceStorage) Resolve(r storage.Region) (storage.Resource, error) {
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
func (s *deviceStorage) BytesAllocated() uint64 { return s.allocated.Load() }

// release frees everything the storage holds, live or queued (backend
// Close, after every queue is idle and every graph released).
func (s *deviceStorage) release() {
	all, _, _ := s.take(true)
	for _, a := range all {
		s.drop(a)
	}
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
