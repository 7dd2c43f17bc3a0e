package hostqueue

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/gpumem/gpumem/stream"
)

// Host is a Queue whose ops run on one worker goroutine, in sequence order:
// the host backend's stand-in for a device stream. Enqueue returns at once;
// the work happens later, as on a GPU.
//
// A Host must be closed: Close stops the worker started by NewHost.
type Host struct {
	t tracker

	// Guarded by t.mu:
	pending []step     // issued, not yet taken by the worker; in sequence order
	wake    *sync.Cond // on t.mu; signalled when pending grows or the queue closes

	done chan struct{} // closed when the worker has exited
	// worker is the worker goroutine's identity, set before it runs any op.
	worker atomic.Uint64
}

// NewHost returns a Host queue and starts its worker.
func NewHost() *Host {
	q := &Host{done: make(chan struct{})}
	q.t.self = q
	q.wake = sync.NewCond(&q.t.mu)
	go q.work()
	return q
}

// work is the worker: it takes everything pending at once and runs it in
// order, outside the lock, so Enqueue never waits on a running op. It exits
// once the queue is closed and nothing is pending.
func (q *Host) work() {
	defer close(q.done)
	q.worker.Store(uint64(stream.CurrentGoroutine()))
	var batch []step
	for {
		q.t.mu.Lock()
		for len(q.pending) == 0 && !q.t.closed {
			q.wake.Wait()
		}
		if len(q.pending) == 0 {
			q.t.mu.Unlock()
			return
		}
		batch, q.pending = q.pending, batch[:0]
		q.t.mu.Unlock()
		for i, s := range batch {
			name := s.op.Name
			if s.op.Run == nil {
				name = waitStepName
			}
			q.t.complete(s.seq, name, runStep(s))
			batch[i] = step{} // drop the closure: it may hold large buffers
		}
	}
}

// submitLocked hands issued steps to the worker. q.t.mu must be held, and
// must have been held since the steps' numbers were issued, so pending stays
// in sequence order.
func (q *Host) submitLocked(steps ...step) {
	q.pending = append(q.pending, steps...)
	q.wake.Signal()
}

// Enqueue submits op to run after every op enqueued before it. While the
// queue records, op is recorded instead and seq is 0.
func (q *Host) Enqueue(op stream.Op) (seq uint64, err error) {
	q.t.mu.Lock()
	defer q.t.mu.Unlock()
	recorded, err := q.t.acceptLocked("enqueue", []stream.Op{op})
	if err != nil || recorded {
		return 0, err
	}
	seq = q.t.issueLocked(1)
	q.submitLocked(step{seq: seq, op: op})
	return seq, nil
}

// Replay enqueues the ops of e (an [*OpList]) in recorded order, with
// consecutive sequence numbers: no other op interleaves. While the queue
// records, the ops are appended to the recording.
func (q *Host) Replay(e stream.Exec) error {
	ops, err := opsOf(e)
	if err != nil {
		return err
	}
	q.t.mu.Lock()
	defer q.t.mu.Unlock()
	recorded, err := q.t.acceptLocked("replay", ops)
	if err != nil || recorded || len(ops) == 0 {
		return err
	}
	first := q.t.issueLocked(len(ops))
	steps := make([]step, len(ops))
	for i, op := range ops {
		steps[i] = step{seq: first + uint64(i), op: op}
	}
	q.submitLocked(steps...)
	return nil
}

// WaitFence makes every op enqueued later start only after f has passed: a
// wait step takes its place in the order, and the worker blocks on it. A
// fence of this queue, or one already passed, adds nothing. On a recording
// queue a fence not yet passed returns ErrCaptureCrossStream and invalidates
// the capture.
func (q *Host) WaitFence(f stream.Fence) error {
	if f.Q == stream.Queue(q) {
		return q.t.flush() // in order already; only ErrClosed to report
	}
	passed, err := q.t.checkFence("wait fence", f)
	if err != nil {
		return err
	}
	q.t.mu.Lock()
	defer q.t.mu.Unlock()
	s, ok, err := q.t.waitStepLocked(f, passed)
	if ok {
		q.submitLocked(s)
	}
	return err
}

// Close runs every op already enqueued, then stops the worker and returns.
// An open capture is discarded. Later calls return nil. Close must not be
// called from an op of this queue: it would wait for itself.
func (q *Host) Close() error {
	q.t.mu.Lock()
	if !q.t.closed {
		q.t.closed = true
		q.t.rec = nil
		q.wake.Signal()
	}
	q.t.mu.Unlock()
	<-q.done
	return nil
}

// Flush returns nil: a Host submits at Enqueue. After Close it returns
// ErrClosed.
func (q *Host) Flush() error { return q.t.flush() }

// Fence returns a fence covering every op enqueued so far.
func (q *Host) Fence() (stream.Fence, error) { return q.t.fence() }

// Completed returns the sequence number of the last finished step, without
// blocking.
func (q *Host) Completed() uint64 { return q.t.completed.Load() }

// Issued implements Issuer: the last sequence number handed out.
func (q *Host) Issued() uint64 { return q.t.issued.Load() }

// Wait blocks until f has passed or ctx is done. On a recording queue, or
// with a fence of a recording queue of this package, it returns at once with
// ErrCaptureUnsupported and ErrCaptureInvalidated and invalidates that
// capture: a host sync inside a capture is what the driver refuses.
func (q *Host) Wait(ctx context.Context, f stream.Fence) error { return q.t.wait(ctx, f) }

// TakeFailures returns the failures since the last call, in sequence order,
// and forgets them.
func (q *Host) TakeFailures() []stream.OpFailure { return q.t.takeFailures() }

// BeginCapture starts recording for owner o (not 0). On a recording queue it
// returns ErrCaptureState.
func (q *Host) BeginCapture(o stream.Owner) error { return q.t.beginCapture(o) }

// EndCapture stops recording and returns the recorded [*OpList]. The capture
// is closed in every case; there is no Exec when o is not its owner
// (ErrWrongOwner), when it was invalidated (ErrCaptureInvalidated) or when
// doomed is not nil (the error wraps doomed); the errors are joined.
func (q *Host) EndCapture(o stream.Owner, doomed error) (stream.Exec, error) {
	return q.t.endCapture(o, doomed)
}

// Recording reports whether a capture is open.
func (q *Host) Recording() bool { return q.t.recording() }

// ObserveStorage is the hook the stream's storage calls on every Alloc and
// Dealloc. While recording it invalidates the capture: the driver cannot
// capture an allocation, so the graph would not represent the run.
func (q *Host) ObserveStorage(op string) { q.t.observeStorage(op) }

// RunsOpsOn reports whether g is the worker goroutine.
func (q *Host) RunsOpsOn(g stream.Goroutine) bool { return g != 0 && uint64(g) == q.worker.Load() }

// WaitCompleted implements Completer.
func (q *Host) WaitCompleted(ctx context.Context, seq uint64) error { return q.t.waitSeq(ctx, seq) }
