package backendkit

import (
	"context"
	"fmt"
	"reflect"

	"github.com/gpumem/gpumem/stream"
)

// NilQueue reports whether q is nil or a typed nil (a nil *queue, say, in
// a fence someone built by hand).
func NilQueue(q stream.Queue) bool {
	if q == nil {
		return true
	}
	switch v := reflect.ValueOf(q); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// QueueOf returns q as a queue of the calling backend: a Q (the backend's
// queue type) that is not nil and that mine accepts (made by this backend,
// not another of the same kind). Anything else is refused for call with an
// error wrapping stream.ErrInvalid.
func QueueOf[Q stream.Queue](backend string, q stream.Queue, call string, mine func(Q) bool) (Q, error) {
	t, ok := q.(Q)
	if !ok || NilQueue(t) || !mine(t) {
		var zero Q
		return zero, fmt.Errorf("%s: %s: queue %T is not a queue of this %s backend: %w", backend, call, q, backend, stream.ErrInvalid)
	}
	return t, nil
}

// Closed is the error of call on the closed queue of stream index.
func Closed(backend string, index int, call string) error {
	return fmt.Errorf("%s: stream %d: %s: %w", backend, index, call, stream.ErrClosed)
}

// Beyond refuses, for call, a fence seq past the issued steps of stream
// index: a wait for it would never pass. Nil when seq <= issued.
func Beyond(backend, call string, seq, issued uint64, index int) error {
	if seq <= issued {
		return nil
	}
	return fmt.Errorf("%s: %s: fence %d is beyond the %d steps stream %d issued (it would never pass): %w",
		backend, call, seq, issued, index, stream.ErrInvalid)
}

// RunOp runs op, turning a panic into an error wrapping
// stream.ErrOpPanicked.
func RunOp(op stream.Op) (err error) {
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

// Waiter is what Wait needs of a backend's queue: refusing a host wait
// while it records (invalidating the recording; nil when it does not
// record), and waiting on the host for one of its own steps.
type Waiter interface {
	stream.Queue
	RefuseWhileRecording(cause string) error
	WaitSeq(ctx context.Context, seq uint64) error
}

// Wait is stream.Queue.Wait for q, a queue of type Q: it blocks until f
// has passed, ctx is done or f's queue failed. On a recording q, or with
// a fence of a recording queue, it returns at once with
// stream.ErrCaptureUnsupported and invalidates that recording, as the host
// queues do. A fence of another kind of queue is waited for by its queue.
func Wait[Q Waiter](backend string, q Q, ctx context.Context, f stream.Fence) error {
	if err := q.RefuseWhileRecording("host wait on the recording queue"); err != nil {
		return err
	}
	if f.Seq == 0 {
		return nil
	}
	if NilQueue(f.Q) {
		return fmt.Errorf("%s: wait: fence %d has no queue: %w", backend, f.Seq, stream.ErrInvalid)
	}
	t, ok := f.Q.(Q)
	if !ok {
		return f.Q.Wait(ctx, f)
	}
	if stream.Queue(t) != stream.Queue(q) {
		if err := t.RefuseWhileRecording("host wait on a fence of the recording queue"); err != nil {
			return err
		}
	}
	return t.WaitSeq(ctx, f.Seq)
}

// ForeignWaiter is what WaitForeign needs of a backend's queue: flushing
// its own work, and refusing a cross-stream wait while it records
// (invalidating the recording; nil when it does not record).
type ForeignWaiter interface {
	Flush() error
	RefuseCrossStreamWhileRecording(cause string) error
}

// WaitForeign is WaitFence on q for a fence of a queue that is not q's
// device's (another backend's, another device's): no device-side
// dependency joins the two, so q waits on the host. A recording cannot
// hold that wait (its graph, launched later, would not repeat it), so an
// incomplete foreign fence invalidates the recording and returns an error
// wrapping stream.ErrCaptureCrossStream, as a cross-stream wait does.
func WaitForeign(q ForeignWaiter, f stream.Fence) error {
	if f.Q.Completed() >= f.Seq {
		return q.Flush()
	}
	if err := q.RefuseCrossStreamWhileRecording(fmt.Sprintf("wait on incomplete step %d of a %T", f.Seq, f.Q)); err != nil {
		return err
	}
	return f.Q.Wait(context.Background(), f)
}
