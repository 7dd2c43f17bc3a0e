// The reaper: frees device memory off the caller's path.
//
// vkFreeMemory is not cheap (on lavapipe it unmaps host memory: about 5 ms
// for a 16 MiB page in a virtual machine), and Storage.Flush runs inside
// the device's relocation and cleanup, under its lock. The allocations a
// Flush finds done with go to one goroutine per backend, which frees them
// and only then gives their bytes back to the budgets; BytesAllocated
// counts them until then (storage S2). An allocation refused for want of
// memory waits for the reaper first (Backend.drainFrees), so deferring
// never turns into a spurious out-of-memory answer.

package vulkan

import "sync"

type reaper struct {
	mu    sync.Mutex
	wake  *sync.Cond // work arrived, or stop
	idle  *sync.Cond // busy fell
	work  []func()
	busy  int // handed off, not yet done
	stop  bool
	done  chan struct{}
	start sync.Once
}

func newReaper() *reaper {
	r := &reaper{done: make(chan struct{})}
	r.wake = sync.NewCond(&r.mu)
	r.idle = sync.NewCond(&r.mu)
	return r
}

// add hands f to the reaper goroutine (started on the first call).
func (r *reaper) add(f func()) {
	r.start.Do(func() { go r.run() })
	r.mu.Lock()
	if r.stop {
		r.mu.Unlock()
		f() // after close: nobody else will
		return
	}
	r.work = append(r.work, f)
	r.busy++
	r.wake.Signal()
	r.mu.Unlock()
}

func (r *reaper) run() {
	defer close(r.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for len(r.work) == 0 && !r.stop {
			r.wake.Wait()
		}
		if len(r.work) == 0 {
			return
		}
		w := r.work
		r.work = nil
		r.mu.Unlock()
		for _, f := range w {
			f()
		}
		r.mu.Lock()
		r.busy -= len(w)
		r.idle.Broadcast()
	}
}

// wait blocks until everything handed off so far is done.
func (r *reaper) wait() {
	r.mu.Lock()
	for r.busy > 0 {
		r.idle.Wait()
	}
	r.mu.Unlock()
}

// close finishes the work and stops the goroutine. Idempotent.
func (r *reaper) close() {
	r.mu.Lock()
	r.stop = true
	r.wake.Signal()
	r.mu.Unlock()
	started := true
	r.start.Do(func() { started = false })
	if started {
		<-r.done
	}
}
