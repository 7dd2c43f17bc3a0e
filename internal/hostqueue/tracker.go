// The tracker is the state both host queues share: sequence numbers, the
// completion counter and its broadcast, failures, and the software graph's
// recording (design §10.5). Host and Inline differ only in who runs a step:
// Host hands it to a worker goroutine, Inline runs it inside the call that
// enqueued it.
//
// Steps. Everything that takes a place in a queue's order is a step with a
// sequence number: an op, a replayed op, or a fence wait (WaitFence). So
// Completed counts steps, and a Fence covers waits as well as ops.
//
// Completion broadcast. Waiters must honour a context, which sync.Cond cannot
// do, so completion is announced by closing a channel: a waiter that finds
// its step incomplete takes the current progress channel (creating it) and
// selects on it and its context; the executor, after advancing completed,
// closes the channel and clears it (a held Inline queue's runner closes it
// too when it stops, so a waiter for a later step can run that step). Checking and taking the channel both
// happen under mu, and advancing and closing too, so no completion is missed.
// Each completion wakes every waiter, which then re-checks; with a handful of
// waiters per queue (the device's syncs) that costs less than per-waiter
// bookkeeping, and nothing is allocated while nobody waits.
//
// Fence waits cannot form a cycle between these queues (Q3 in doc.go): a
// fence is accepted only if its queue has already issued its sequence number,
// so a wait step only ever waits on steps issued before it in real time.

package hostqueue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/gpumem/gpumem/stream"
)

// step is one place in a queue's order.
type step struct {
	seq  uint64
	op   stream.Op    // op.Run == nil marks a fence wait
	wait stream.Fence // the fence a wait step waits for
}

// waitStepName names fence-wait steps in OpFailures.
const waitStepName = "WaitFence"

// recording is an open capture of a host queue.
type recording struct {
	owner   stream.Owner
	ops     []stream.Op
	invalid error // nil until invalidated; then wraps ErrCaptureInvalidated and names the cause
}

type tracker struct {
	self stream.Queue // the Host or Inline owning this tracker, for its fences

	// completed is the sequence number of the last finished step. It is
	// written only under mu (so waiters miss no broadcast) and read anywhere,
	// which keeps Completed non-blocking.
	completed atomic.Uint64
	// issued is the last sequence number handed out; written only under mu,
	// read anywhere (another queue validates fences against it without
	// taking this mu, so two queues' locks are never held together).
	issued atomic.Uint64

	mu        sync.Mutex         // guards every field below
	progress  chan struct{}      // closed and cleared when completed advances; nil while nobody waits
	failures  []stream.OpFailure // in sequence order
	rec       *recording         // nil when not recording
	failBegin error              // test cue: the next BeginCapture returns it
	closed    bool
}

// trackerOf returns the tracker of a queue of this package, or nil for any
// other implementation of Queue.
func trackerOf(q stream.Queue) *tracker {
	switch q := q.(type) {
	case *Host:
		if q != nil {
			return &q.t
		}
	case *Inline:
		if q != nil {
			return &q.t
		}
	}
	return nil
}

// issueLocked hands out the next n sequence numbers and returns the first.
// t.mu must be held.
func (t *tracker) issueLocked(n int) uint64 {
	first := t.issued.Load() + 1
	t.issued.Add(uint64(n))
	return first
}

// acceptLocked decides what happens to ops about to be enqueued: refused
// (err), appended to the recording (recorded), or to be issued. t.mu must be
// held.
func (t *tracker) acceptLocked(call string, ops []stream.Op) (recorded bool, err error) {
	for _, op := range ops {
		if op.Run == nil {
			return false, fmt.Errorf("stream: %s: op %q has no Run: %w", call, op.Name, stream.ErrInvalid)
		}
	}
	if t.closed {
		return false, fmt.Errorf("stream: %s: %w", call, stream.ErrClosed)
	}
	if t.rec == nil {
		return false, nil
	}
	if t.rec.invalid != nil {
		return true, fmt.Errorf("stream: %s on an invalidated recording: %w", call, t.rec.invalid)
	}
	t.rec.ops = append(t.rec.ops, ops...)
	return true, nil
}

// invalidateLocked invalidates the open recording, keeping the first cause,
// and returns the error that now wraps ErrCaptureInvalidated. t.mu must be
// held and a recording open.
func (t *tracker) invalidateLocked(cause string) error {
	if t.rec == nil {
		panic("stream: invalidating a queue that does not record")
	}
	if t.rec.invalid == nil {
		t.rec.invalid = fmt.Errorf("%w (CUDA 901): %s", stream.ErrCaptureInvalidated, cause)
	}
	return t.rec.invalid
}

// complete marks step seq finished with Run's error and wakes waiters.
func (t *tracker) complete(seq uint64, name string, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if prev := t.completed.Load(); seq != prev+1 {
		panic(fmt.Sprintf("stream: step %d completed after step %d: steps must finish in sequence order", seq, prev))
	}
	if err != nil {
		t.failures = append(t.failures, stream.OpFailure{Seq: seq, Name: name, Err: err})
	}
	t.completed.Store(seq)
	t.wakeLocked()
}

// progressLocked returns the channel the next wakeLocked closes, creating
// it. t.mu must be held.
func (t *tracker) progressLocked() chan struct{} {
	if t.progress == nil {
		t.progress = make(chan struct{})
	}
	return t.progress
}

// wakeLocked wakes every waiter to check again: a step completed, or a held
// queue's runner stopped. t.mu must be held.
func (t *tracker) wakeLocked() {
	if t.progress != nil {
		close(t.progress)
		t.progress = nil
	}
}

// runStep executes one step on the executor and returns its failure.
func runStep(s step) error {
	if s.op.Run == nil {
		return waitPassed(s.wait)
	}
	return runOp(s.op)
}

// runOp runs op, turning a panic into an error wrapping ErrOpPanicked so one
// faulty op cannot take the executor, and every op after it, down.
func runOp(op stream.Op) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if e, ok := r.(error); ok {
			err = fmt.Errorf("%w: op %q: %w", stream.ErrOpPanicked, op.Name, e)
		} else {
			err = fmt.Errorf("%w: op %q: %v", stream.ErrOpPanicked, op.Name, r)
		}
	}()
	return op.Run()
}

// waitPassed blocks until f is passed: the body of a fence-wait step. A
// queue of this package is waited on through its tracker, which is not a
// host sync and so does not disturb a capture that began on it after the
// fence was taken.
func waitPassed(f stream.Fence) error {
	if in, ok := f.Q.(*Inline); ok && in.held {
		// Its steps run only when someone runs them: here, up to f.Seq.
		if err := in.runHeld(context.Background(), f.Seq); err != nil {
			return err
		}
	}
	if target := trackerOf(f.Q); target != nil {
		return target.waitSeq(context.Background(), f.Seq)
	}
	return f.Q.Wait(context.Background(), f)
}

// waitSeq blocks until step seq has completed or ctx is done. seq must have
// been issued, or the wait could only end with ctx.
func (t *tracker) waitSeq(ctx context.Context, seq uint64) error {
	for {
		if t.completed.Load() >= seq {
			return nil
		}
		t.mu.Lock()
		if t.completed.Load() >= seq {
			t.mu.Unlock()
			return nil
		}
		ch := t.progressLocked()
		t.mu.Unlock()
		if ctx.Done() == nil {
			<-ch // not cancellable: a plain receive
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("stream: wait for step %d (completed %d): %w", seq, t.completed.Load(), ctx.Err())
		}
	}
}

// checkFence validates f as seen from t and reports whether it has passed.
// It holds no lock: it reads another queue's atomics only.
func (t *tracker) checkFence(call string, f stream.Fence) (passed bool, err error) {
	if f.Seq == 0 {
		return true, nil
	}
	if isNilQueue(f.Q) {
		return false, fmt.Errorf("stream: %s: fence %d has no queue: %w", call, f.Seq, stream.ErrInvalid)
	}
	if target := trackerOf(f.Q); target != nil {
		if issued := target.issued.Load(); f.Seq > issued {
			return false, fmt.Errorf("stream: %s: fence %d is beyond the %d steps its queue issued (it would never pass): %w",
				call, f.Seq, issued, stream.ErrInvalid)
		}
	}
	return f.Q.Completed() >= f.Seq, nil
}

// isNilQueue reports whether q is nil or holds a nil pointer (a typed nil
// such as (*Host)(nil)), which has no queue behind it to ask.
func isNilQueue(q stream.Queue) bool {
	if q == nil {
		return true
	}
	v := reflect.ValueOf(q)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// wait is Queue.Wait for both host queues.
func (t *tracker) wait(ctx context.Context, f stream.Fence) error {
	t.mu.Lock()
	if t.rec != nil {
		err := t.invalidateLocked("host wait on the recording queue")
		t.mu.Unlock()
		return fmt.Errorf("stream: wait: %w: %w", stream.ErrCaptureUnsupported, err)
	}
	t.mu.Unlock()
	passed, err := t.checkFence("wait", f)
	if err != nil || f.Seq == 0 {
		return err
	}
	// A host sync with a recording queue is refused whether or not the
	// fence has passed, as the driver refuses it: the answer must not
	// depend on timing.
	target := trackerOf(f.Q)
	if target != nil && target != t {
		target.mu.Lock()
		if target.rec != nil {
			err := target.invalidateLocked("host wait on a fence of the recording queue")
			target.mu.Unlock()
			return fmt.Errorf("stream: wait: %w: %w", stream.ErrCaptureUnsupported, err)
		}
		target.mu.Unlock()
	}
	switch {
	case passed:
		return nil
	case target == nil:
		return f.Q.Wait(ctx, f)
	default:
		if in, ok := f.Q.(*Inline); ok && in.held {
			// A held queue's steps run only when someone runs them: the
			// caller, up to f.Seq, whichever queue it waits from.
			if err := in.runHeld(ctx, f.Seq); err != nil {
				return err
			}
		}
		return target.waitSeq(ctx, f.Seq)
	}
}

// waitStepLocked decides what WaitFence does with a fence already checked by
// checkFence: nothing (ok == false, nil), refuse (err), or issue a wait step.
// t.mu must be held.
func (t *tracker) waitStepLocked(f stream.Fence, passed bool) (s step, ok bool, err error) {
	if t.closed {
		return step{}, false, fmt.Errorf("stream: wait fence: %w", stream.ErrClosed)
	}
	if t.rec != nil {
		if t.rec.invalid != nil {
			return step{}, false, fmt.Errorf("stream: wait fence on an invalidated recording: %w", t.rec.invalid)
		}
		if passed {
			return step{}, false, nil // nothing for the graph to depend on
		}
		err := t.invalidateLocked(fmt.Sprintf("wait on incomplete step %d of another queue", f.Seq))
		return step{}, false, fmt.Errorf("stream: wait fence: %w: %w", stream.ErrCaptureCrossStream, err)
	}
	if passed {
		return step{}, false, nil
	}
	return step{seq: t.issueLocked(1), wait: f}, true, nil
}

// fence is Queue.Fence for both host queues.
func (t *tracker) fence() (stream.Fence, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return stream.Fence{}, fmt.Errorf("stream: fence: %w", stream.ErrClosed)
	}
	return stream.Fence{Q: t.self, Seq: t.issued.Load()}, nil
}

// flush is Queue.Flush for both host queues: they submit at Enqueue.
func (t *tracker) flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("stream: flush: %w", stream.ErrClosed)
	}
	return nil
}

func (t *tracker) takeFailures() []stream.OpFailure {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.failures
	t.failures = nil
	return f
}

func (t *tracker) recording() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.rec != nil
}

func (t *tracker) beginCapture(o stream.Owner) error {
	if o == 0 {
		return fmt.Errorf("stream: begin capture: owner 0: %w", stream.ErrInvalid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("stream: begin capture: %w", stream.ErrClosed)
	}
	if t.rec != nil {
		return fmt.Errorf("stream: begin capture for owner %d: the queue already records for owner %d: %w",
			o, t.rec.owner, stream.ErrCaptureState)
	}
	if err := t.failBegin; err != nil {
		t.failBegin = nil
		return fmt.Errorf("stream: begin capture for owner %d: %w", o, err)
	}
	t.rec = &recording{owner: o}
	return nil
}

func (t *tracker) endCapture(o stream.Owner, doomed error) (stream.Exec, error) {
	t.mu.Lock()
	rec := t.rec
	t.rec = nil
	t.mu.Unlock()
	if rec == nil {
		err := fmt.Errorf("stream: end capture by owner %d: the queue does not record: %w", o, stream.ErrCaptureState)
		return nil, errors.Join(err, doomed)
	}
	var errs []error
	if o != rec.owner {
		errs = append(errs, fmt.Errorf("stream: end capture: caller %d, capture owned by %d (torn down, no graph): %w",
			o, rec.owner, stream.ErrWrongOwner))
	}
	if rec.invalid != nil {
		errs = append(errs, fmt.Errorf("stream: end capture: %w", rec.invalid))
	}
	if doomed != nil {
		errs = append(errs, fmt.Errorf("stream: end capture: recording doomed: %w", doomed))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &OpList{ops: rec.ops}, nil
}

// opsOf returns the ops of an Exec the host queues can replay.
func opsOf(e stream.Exec) ([]stream.Op, error) {
	l, ok := e.(*OpList)
	if !ok || l == nil {
		return nil, fmt.Errorf("stream: replay: %T is not an executable recorded by a host queue: %w", e, stream.ErrInvalid)
	}
	return l.ops, nil
}

func (t *tracker) observeStorage(op string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rec != nil {
		t.invalidateLocked(fmt.Sprintf("storage %s while recording", op))
	}
}

func (t *tracker) failNextBeginCapture(err error) {
	t.mu.Lock()
	t.failBegin = err
	t.mu.Unlock()
}
