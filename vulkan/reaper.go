// The releaser (reaper): frees device memory off the device's path.
//
// vkFreeMemory is not cheap (on lavapipe it unmaps host memory: about 5 ms
// for a 16 MiB page in a virtual machine), and deviceStorage.Flush runs inside
// the device's relocation and cleanup, under its lock. The allocations a
// Flush finds idle (no device work uses them) go to one goroutine per
// backend, which frees them and only then gives their bytes back to the
// budgets; BytesAllocated counts them until then (storage S2). The same
// goroutine watches the queued allocations whose work is still running: it
// waits on the queues' semaphores, off every lock, and frees each once its
// work completed, so a free never waits for a later Flush.
//
// Nothing here waits for the device's lock or a queue's: so an explicit
// cleanup may wait for the releaser (Backend.Release) and an allocation
// refused for want of memory may wait for it (Backend.drainFrees) without
// a deadlock; Release waits with the device's lock released all the same
// (design §9.7), since the frees take time.

package vulkan

import "sync"

type reaper struct {
	b     *Backend
	mu    sync.Mutex
	wake  *sync.Cond // work or a watch arrived, or stop
	idle  *sync.Cond // busy fell
	work  []func()
	busy  int  // handed off, not yet done
	watch bool // some storage holds queued allocations whose work runs
	stop  bool
	done  chan struct{}
	start sync.Once
}

func newReaper(b *Backend) *reaper {
	r := &reaper{b: b, done: make(chan struct{})}
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

// kick has the goroutine look at every storage's queued allocations: some
// may be waiting for work that runs.
func (r *reaper) kick() {
	r.start.Do(func() { go r.run() })
	r.mu.Lock()
	r.watch = true
	r.wake.Signal()
	r.mu.Unlock()
}

func (r *reaper) run() {
	defer close(r.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for len(r.work) == 0 && !r.watch && !r.stop {
			r.wake.Wait()
		}
		if len(r.work) > 0 {
			w := r.work
			r.work = nil
			r.mu.Unlock()
			for _, f := range w {
				f()
			}
			r.mu.Lock()
			r.busy -= len(w)
			r.idle.Broadcast()
			continue
		}
		if r.stop {
			return // Close frees what is still queued
		}
		r.watch = false
		r.mu.Unlock()
		more := r.b.watchFrees()
		r.mu.Lock()
		r.watch = r.watch || more
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

// pending reports whether frees are handed off and not yet done.
func (r *reaper) pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.busy > 0
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
