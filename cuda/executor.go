package cuda

import (
	"fmt"
	"runtime"
	"sync"
)

// executor runs functions one at a time, in submission order, on one
// goroutine locked to one OS thread for its whole life.
//
// The driver keeps the current context, and a thread-local stream capture's
// ownership, per OS thread; a Go goroutine may move between threads at any
// call. So every driver call of a primaryContext runs on an executor whose thread
// has the context current: one executor per driverStream (its work, its events,
// its capture, which therefore begins and ends on the same thread) and one
// for the device (allocation, free, module loading, context-wide sync).
//
// The worker's thread is never unlocked: when the worker returns (Close),
// the Go runtime ends the thread, so no other goroutine inherits its
// context binding.
type executor struct {
	name   string
	tid    int // worker's OS thread id; written before newExecutor returns, then read-only
	jobs   chan job
	exited chan struct{} // closed when the worker returns

	mu     sync.RWMutex // guards closed; held for reading while a job is handed over
	closed bool
}

type job struct {
	fn   func() error
	done chan<- outcome
}

type outcome struct {
	err      error
	panicked bool
	value    any // the panic value when panicked
}

// newExecutor starts a worker, locks it to its thread and runs setup there
// (nil: nothing). When setup fails the worker ends and the error returns.
func newExecutor(name string, setup func() error) (*executor, error) {
	e := &executor{name: name, jobs: make(chan job), exited: make(chan struct{})}
	ready := make(chan error, 1)
	go e.loop(setup, ready)
	if err := <-ready; err != nil {
		<-e.exited
		return nil, err
	}
	return e, nil
}

func (e *executor) loop(setup func() error, ready chan<- error) {
	runtime.LockOSThread() // never unlocked: see the type's documentation
	defer close(e.exited)
	e.tid = threadID()
	if setup != nil {
		if err := setup(); err != nil {
			ready <- err
			return
		}
	}
	ready <- nil
	for j := range e.jobs {
		j.done <- run(j.fn)
	}
}

// run calls fn, turning a panic into an outcome so Do can re-raise it on the
// caller's goroutine instead of killing the worker.
func run(fn func() error) (o outcome) {
	defer func() {
		if r := recover(); r != nil {
			o = outcome{panicked: true, value: r}
		}
	}()
	return outcome{err: fn()}
}

// Name returns the name the executor was started with (for messages).
func (e *executor) Name() string { return e.name }

// onWorker reports whether the caller is the worker goroutine itself.
// While the worker lives only it can run on its locked thread, so an equal
// thread id proves it; once the worker has returned its thread ends and the
// kernel may give the id to a new thread, so an equal id proves nothing.
// The caller's id is therefore read first and exited checked after: exited
// is closed before the worker's thread ends, so a worker not yet exited at
// the check was alive, and alone on that id, when the id was read. (Always
// false off linux, where threadID is -1.)
func (e *executor) onWorker() bool {
	tid := threadID()
	if tid < 0 || tid != e.tid {
		return false
	}
	select {
	case <-e.exited:
		return false // the id was reused by a thread after the worker's
	default:
		return true
	}
}

// Do runs fn on the executor's thread after every function handed over
// before it, waits for it and returns its error. Called from within a
// function the executor is running, Do runs fn at once (on linux; elsewhere
// that would deadlock). A panic in fn is re-raised in the caller. On a
// closed executor Do returns ErrClosed and fn does not run.
func (e *executor) Do(fn func() error) error {
	if e.onWorker() {
		return fn()
	}
	done := make(chan outcome, 1)
	e.mu.RLock()
	if e.closed {
		e.mu.RUnlock()
		return fmt.Errorf("%w: executor %s", ErrClosed, e.name)
	}
	e.jobs <- job{fn: fn, done: done}
	e.mu.RUnlock()
	o := <-done
	if o.panicked {
		panic(o.value)
	}
	return o.err
}

// Close stops the executor after the functions already handed over have run
// and waits for its thread to end. It is idempotent. Calling it from a
// function the executor runs is an error (the worker cannot wait for
// itself).
func (e *executor) Close() error {
	if e.onWorker() {
		return fmt.Errorf("cuda: executor %s cannot close itself from its own worker", e.name)
	}
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.jobs)
	}
	e.mu.Unlock()
	<-e.exited
	return nil
}
