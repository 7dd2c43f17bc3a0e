package hostqueue

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpumem/gpumem/stream"
)

// Inline is a Queue that runs each op inside the Enqueue that submits it, on
// the caller's goroutine: when Enqueue returns, the op has finished. With Sim
// storage it replays huge traces fast and deterministically, with no
// goroutine to schedule. It imitates Host in everything else (sequence
// numbers, fences, failures, capture), so code written against one works on
// the other.
//
// Because the op runs under the queue's run lock, an op must not enqueue on,
// replay on, wait a fence on, or close its own Inline queue: it would wait
// for itself.
//
// NewInlineHeld makes one that holds its steps instead, until Flush or Close
// runs them on the caller's goroutine, or a wait that needs a step runs the
// steps up to that one: a device enqueues under its lock and flushes after
// releasing it, so an op may call back into the device.
type Inline struct {
	t tracker

	// run serialises issuing and running, so ops run one at a time in
	// sequence order. It is held while an op runs; t.mu is not, so
	// Completed, Fence, Wait and TakeFailures never wait on a running op.
	// Lock order: run before t.mu. (Not used when held.)
	run sync.Mutex

	// held: steps wait in pending until a Flush, Close or a wait runs them.
	held bool
	// Guarded by t.mu (held only): issued steps not yet run, in sequence
	// order; whether a goroutine is running them, and which one.
	pending []step
	running bool
	runner  stream.Goroutine
	// group is shared by the held queues of one device: it knows which
	// goroutines are running ops of any of them (RunnerGroup).
	group *RunnerGroup
}

// RunnerGroup knows which goroutines are running the ops of a group of held
// Inline queues (one device's). An op of one queue that enqueues on another
// flushes it; if another goroutine is running that queue, waiting for it
// could deadlock (that runner may be inside an op enqueueing back), so a
// runner's flush leaves the steps held, for the next flush or wait.
type RunnerGroup struct {
	mu      sync.Mutex
	running map[stream.Goroutine]int // runners, with how many queues each runs (nested)
}

// NewRunnerGroup returns an empty group.
func NewRunnerGroup() *RunnerGroup { return &RunnerGroup{running: make(map[stream.Goroutine]int)} }

func (r *RunnerGroup) enter(g stream.Goroutine) {
	r.mu.Lock()
	r.running[g]++
	r.mu.Unlock()
}

func (r *RunnerGroup) leave(g stream.Goroutine) {
	r.mu.Lock()
	if r.running[g]--; r.running[g] <= 0 {
		delete(r.running, g)
	}
	r.mu.Unlock()
}

// runs reports whether g runs ops of a queue of the group now.
func (r *RunnerGroup) runs(g stream.Goroutine) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[g] > 0
}

// NewInline returns an Inline queue. It starts no goroutine; Close only
// refuses later work.
func NewInline() *Inline {
	q := &Inline{}
	q.t.self = q
	return q
}

// NewInlineHeld returns an Inline queue that holds its steps until Flush, a
// Wait that needs them, or Close, which run them on the calling goroutine.
// The queues of one device share group (nil: a group of its own).
func NewInlineHeld(group *RunnerGroup) *Inline {
	q := NewInline()
	q.held = true
	if group == nil {
		group = NewRunnerGroup()
	}
	q.group = group
	return q
}

// runHeld runs the held steps on the calling goroutine, in sequence order, up
// to and including step need (0: every step issued when it is called), and
// leaves the later ones held for their own flush or wait. A run stops at the
// step it needs because a later step may wait, through another queue, on the
// very step the calling goroutine is running further up its stack (design
// §9.3): running it would make the goroutine wait for itself. Stopping there
// strands no step for good: each is run by the flush of whoever issued it,
// by the wait that needs it, or, for a step an op enqueued (whose flush
// leaves it held, below), by the queue's next flush, wait or close. Until
// then a reader of Completed alone sees it pending, so memory it would
// release stays held a while longer.
//
// While another goroutine runs the queue, runHeld waits until step need has
// run, or until that runner stops short of it and the steps are free to run
// here; ctx ends that wait. A flush (need 0) by a goroutine that is itself
// running ops of the group (an op enqueueing) leaves the steps held, for the
// next flush or wait: waiting could deadlock (the other runner may be inside
// an op enqueueing back), and so could running them (one may wait for the
// very op that enqueued it).
//
// Fence waits between these queues form no cycle (Q3), and a run follows
// them only towards steps issued earlier, so a wait step never needs a step
// its own goroutine holds up. Only an op that itself waits for its own queue,
// or for one whose steps wait on it, can: that is refused with
// ErrWaitsOnItself instead of a wait that could never end.
func (q *Inline) runHeld(ctx context.Context, need uint64) error {
	q.t.mu.Lock()
	issued := q.t.issued.Load()
	if need > issued {
		q.t.mu.Unlock()
		return fmt.Errorf("stream: wait for step %d: the queue issued only %d (it would never run): %w", need, issued, stream.ErrInvalid)
	}
	target := need
	if target == 0 {
		target = issued
	}
	if q.t.completed.Load() >= target || (!q.running && len(q.pending) == 0) {
		q.t.mu.Unlock()
		return nil
	}
	q.t.mu.Unlock()
	me := stream.CurrentGoroutine()
	if need == 0 && q.group.runs(me) {
		return nil
	}
	q.t.mu.Lock()
	for q.running {
		if q.t.completed.Load() >= target {
			q.t.mu.Unlock()
			return nil
		}
		if q.runner == me {
			completed := q.t.completed.Load()
			q.t.mu.Unlock()
			if need == 0 {
				return nil // the steps run after the running op
			}
			return fmt.Errorf("stream: wait for step %d (completed %d): %w", need, completed, stream.ErrWaitsOnItself)
		}
		ch := q.t.progressLocked() // closed when a step completes or the runner stops
		q.t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("stream: wait for step %d (completed %d): %w", target, q.t.completed.Load(), ctx.Err())
		}
		q.t.mu.Lock()
	}
	if q.t.completed.Load() >= target {
		q.t.mu.Unlock()
		return nil // the runner that just stopped ran it
	}
	// Every step up to target is pending now, in order: steps are appended
	// under t.mu as they are issued, and only a runner takes them.
	n := 0
	for n < len(q.pending) && q.pending[n].seq <= target {
		n++
	}
	batch := q.pending[:n:n]
	q.pending = q.pending[n:]
	if len(q.pending) == 0 {
		q.pending = nil // let the array go
	}
	q.running = true
	q.runner = me
	q.t.mu.Unlock()
	q.group.enter(me)
	for i, st := range batch {
		name := st.op.Name
		if st.op.Run == nil {
			name = waitStepName
		}
		q.t.complete(st.seq, name, runStep(st))
		batch[i] = step{}
	}
	q.group.leave(me)
	q.t.mu.Lock()
	q.running = false
	q.runner = 0
	q.t.wakeLocked() // a waiter for a later step may run it now
	q.t.mu.Unlock()
	return nil
}

// RunsOpsOn reports whether g is running this queue's ops now.
func (q *Inline) RunsOpsOn(g stream.Goroutine) bool {
	q.t.mu.Lock()
	defer q.t.mu.Unlock()
	return q.running && q.runner == g
}

// Enqueue runs op now, after any op another goroutine is running on this
// queue, and returns its sequence number; a failure is reported by
// TakeFailures. While the queue records, op is recorded instead and seq is 0.
func (q *Inline) Enqueue(op stream.Op) (seq uint64, err error) {
	if q.held {
		q.t.mu.Lock()
		defer q.t.mu.Unlock()
		recorded, err := q.t.acceptLocked("enqueue", []stream.Op{op})
		if err != nil || recorded {
			return 0, err
		}
		seq = q.t.issueLocked(1)
		q.pending = append(q.pending, step{seq: seq, op: op})
		return seq, nil
	}
	q.run.Lock()
	defer q.run.Unlock()
	q.t.mu.Lock()
	recorded, err := q.t.acceptLocked("enqueue", []stream.Op{op})
	if err != nil || recorded {
		q.t.mu.Unlock()
		return 0, err
	}
	seq = q.t.issueLocked(1)
	q.t.mu.Unlock()
	q.t.complete(seq, op.Name, runOp(op))
	return seq, nil
}

// Replay runs the ops of e (an [*OpList]) now, in recorded order, with
// consecutive sequence numbers. While the queue records, the ops are
// appended to the recording.
func (q *Inline) Replay(e stream.Exec) error {
	ops, err := opsOf(e)
	if err != nil {
		return err
	}
	if q.held {
		q.t.mu.Lock()
		defer q.t.mu.Unlock()
		recorded, err := q.t.acceptLocked("replay", ops)
		if err != nil || recorded || len(ops) == 0 {
			return err
		}
		first := q.t.issueLocked(len(ops))
		for i, op := range ops {
			q.pending = append(q.pending, step{seq: first + uint64(i), op: op})
		}
		return nil
	}
	q.run.Lock()
	defer q.run.Unlock()
	q.t.mu.Lock()
	recorded, err := q.t.acceptLocked("replay", ops)
	if err != nil || recorded || len(ops) == 0 {
		q.t.mu.Unlock()
		return err
	}
	first := q.t.issueLocked(len(ops))
	q.t.mu.Unlock()
	for i, op := range ops {
		q.t.complete(first+uint64(i), op.Name, runOp(op))
	}
	return nil
}

// WaitFence blocks the caller until f has passed, since the ops enqueued
// after it run on the caller's goroutine too. A fence of this queue, or one
// already passed, adds nothing. On a recording queue a fence not yet passed
// returns ErrCaptureCrossStream and invalidates the capture.
func (q *Inline) WaitFence(f stream.Fence) error {
	if f.Q == stream.Queue(q) {
		return q.t.flush() // in order already; only ErrClosed to report
	}
	passed, err := q.t.checkFence("wait fence", f)
	if err != nil {
		return err
	}
	if q.held {
		q.t.mu.Lock()
		defer q.t.mu.Unlock()
		st, ok, err := q.t.waitStepLocked(f, passed)
		if ok {
			q.pending = append(q.pending, st)
		}
		return err
	}
	q.run.Lock()
	defer q.run.Unlock()
	q.t.mu.Lock()
	s, ok, err := q.t.waitStepLocked(f, passed)
	q.t.mu.Unlock()
	if ok {
		q.t.complete(s.seq, waitStepName, runStep(s))
	}
	return err
}

// Close refuses later work; every op already enqueued has run (Close waits
// for one running on another goroutine). An open capture is discarded.
// Later calls return nil.
func (q *Inline) Close() error {
	if q.held {
		_ = q.runHeld(context.Background(), 0) // a flush's only error is ErrInvalid, for a step never issued
	}
	q.run.Lock()
	defer q.run.Unlock()
	q.t.mu.Lock()
	defer q.t.mu.Unlock()
	q.t.closed = true
	q.t.rec = nil
	return nil
}

// Flush runs the steps held when it is called (NewInlineHeld), on the
// calling goroutine, after any another goroutine is running; an Inline queue
// made by NewInline holds nothing. Called from inside an op of the queue's
// RunnerGroup it leaves them held, for the next flush or wait. After Close
// it returns ErrClosed.
func (q *Inline) Flush() error {
	if q.held {
		_ = q.runHeld(context.Background(), 0) // a flush's only error is ErrInvalid, for a step never issued
	}
	return q.t.flush()
}

// Fence returns a fence covering every op enqueued so far.
func (q *Inline) Fence() (stream.Fence, error) { return q.t.fence() }

// Completed returns the sequence number of the last finished step, without
// blocking.
func (q *Inline) Completed() uint64 { return q.t.completed.Load() }

// Issued implements Issuer: the last sequence number handed out.
func (q *Inline) Issued() uint64 { return q.t.issued.Load() }

// Wait blocks until f has passed or ctx is done; for a fence of this queue
// that is at most until ops running on other goroutines finish. A fence of a
// held queue (this one or another) runs that queue's held steps up to f on
// the calling goroutine, and no later ones. On a recording queue, or with a
// fence of a recording queue of this package, it returns at once with
// ErrCaptureUnsupported and ErrCaptureInvalidated and invalidates that
// capture.
func (q *Inline) Wait(ctx context.Context, f stream.Fence) error { return q.t.wait(ctx, f) }

// TakeFailures returns the failures since the last call, in sequence order,
// and forgets them.
func (q *Inline) TakeFailures() []stream.OpFailure { return q.t.takeFailures() }

// BeginCapture starts recording for owner o (not 0). On a recording queue it
// returns ErrCaptureState.
func (q *Inline) BeginCapture(o stream.Owner) error { return q.t.beginCapture(o) }

// EndCapture stops recording and returns the recorded [*OpList]. The capture
// is closed in every case; there is no Exec when o is not its owner
// (ErrWrongOwner), when it was invalidated (ErrCaptureInvalidated) or when
// doomed is not nil (the error wraps doomed); the errors are joined.
func (q *Inline) EndCapture(o stream.Owner, doomed error) (stream.Exec, error) {
	return q.t.endCapture(o, doomed)
}

// Recording reports whether a capture is open.
func (q *Inline) Recording() bool { return q.t.recording() }

// ObserveStorage is the hook the stream's storage calls on every Alloc and
// Dealloc. While recording it invalidates the capture: the driver cannot
// capture an allocation, so the graph would not represent the run.
func (q *Inline) ObserveStorage(op string) { q.t.observeStorage(op) }

// WaitCompleted implements Completer; a held queue first runs its steps up
// to seq on the calling goroutine (ErrWaitsOnItself when that goroutine is
// running an earlier step of this queue, which could never let seq run).
func (q *Inline) WaitCompleted(ctx context.Context, seq uint64) error {
	if q.held {
		if err := q.runHeld(ctx, seq); err != nil {
			return err
		}
	}
	return q.t.waitSeq(ctx, seq)
}
