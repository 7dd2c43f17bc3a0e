package backendkit

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/stream"
)

// fakeQueue is a Waiter whose recording and waits the tests watch.
type fakeQueue struct {
	stream.Queue // nil: the methods Wait must not call panic
	owner        int
	rec          *Recording
	waited       []uint64
}

func (q *fakeQueue) RefuseWhileRecording(cause string) error { return q.rec.RefuseWait("fake", cause) }

func (q *fakeQueue) WaitSeq(_ context.Context, seq uint64) error {
	q.waited = append(q.waited, seq)
	return nil
}

// otherQueue is a queue of another kind, waited for by its own Wait.
type otherQueue struct {
	stream.Queue
	waited []stream.Fence
}

func (q *otherQueue) Wait(_ context.Context, f stream.Fence) error {
	q.waited = append(q.waited, f)
	return nil
}

func TestNilQueueSeesTypedNils(t *testing.T) {
	var typed *fakeQueue
	if !NilQueue(nil) || !NilQueue(typed) {
		t.Fatal("a nil or typed-nil queue is not nil")
	}
	if NilQueue(&fakeQueue{}) {
		t.Fatal("a queue is nil")
	}
}

// Wait sends a fence to the queue that issued it, refusing (and
// invalidating) while the waiting queue or the fence's queue records.
func TestWaitRoutesAFenceToItsQueue(t *testing.T) {
	ctx := context.Background()
	q, t2, o := &fakeQueue{}, &fakeQueue{}, &otherQueue{}
	if err := Wait("fake", q, ctx, stream.Fence{}); err != nil || len(q.waited) != 0 {
		t.Fatalf("Wait(no fence) = %v, waited %v", err, q.waited)
	}
	if err := Wait("fake", q, ctx, stream.Fence{Seq: 1}); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Wait(fence without a queue) = %v, want ErrInvalid", err)
	}
	var typed *fakeQueue
	if err := Wait("fake", q, ctx, stream.Fence{Q: typed, Seq: 1}); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Wait(fence of a typed-nil queue) = %v, want ErrInvalid", err)
	}
	if err := Wait("fake", q, ctx, stream.Fence{Q: t2, Seq: 5}); err != nil || len(t2.waited) != 1 || t2.waited[0] != 5 || len(q.waited) != 0 {
		t.Fatalf("Wait(fence of another queue) = %v; that queue waited %v, this one %v", err, t2.waited, q.waited)
	}
	if err := Wait("fake", q, ctx, stream.Fence{Q: o, Seq: 2}); err != nil || len(o.waited) != 1 {
		t.Fatalf("Wait(fence of another kind of queue) = %v; it waited %v", err, o.waited)
	}

	t2.rec = &Recording{Owner: 1}
	if err := Wait("fake", q, ctx, stream.Fence{Q: t2, Seq: 5}); !errors.Is(err, stream.ErrCaptureUnsupported) || t2.rec.Invalid() == nil {
		t.Fatalf("Wait(fence of a recording queue) = %v, recording invalid %v; want ErrCaptureUnsupported and an invalidation", err, t2.rec.Invalid())
	}
	q.rec = &Recording{Owner: 1}
	if err := Wait("fake", q, ctx, stream.Fence{}); !errors.Is(err, stream.ErrCaptureUnsupported) || !strings.Contains(q.rec.Invalid().Error(), "host wait on the recording queue") {
		t.Fatalf("Wait on a recording queue = %v, want ErrCaptureUnsupported, the recording invalidated", err)
	}
	if len(t2.waited) != 1 {
		t.Fatalf("a refused wait waited: %v", t2.waited)
	}
}

func TestQueueOfRefusesAnotherBackendsQueue(t *testing.T) {
	mine := &fakeQueue{owner: 1}
	theirs := &fakeQueue{owner: 2}
	is1 := func(q *fakeQueue) bool { return q.owner == 1 }
	if q, err := QueueOf("fake", mine, "copy", is1); err != nil || q != mine {
		t.Fatalf("QueueOf(mine) = %v, %v", q, err)
	}
	var typed *fakeQueue
	for _, q := range []stream.Queue{theirs, &otherQueue{}, nil, typed} {
		if _, err := QueueOf("fake", q, "copy", is1); !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("QueueOf(%T) = %v, want ErrInvalid", q, err)
		}
	}
}

func TestBeyondRefusesOnlyFencesPastWhatWasIssued(t *testing.T) {
	if err := Beyond("fake", "wait", 3, 3, 0); err != nil {
		t.Fatalf("Beyond(issued) = %v", err)
	}
	if err := Beyond("fake", "wait", 4, 3, 0); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Beyond(past issued) = %v, want ErrInvalid", err)
	}
	if err := Closed("fake", 2, "flush"); !errors.Is(err, stream.ErrClosed) || !strings.Contains(err.Error(), "stream 2: flush") {
		t.Fatalf("Closed = %v", err)
	}
}

// A panicking op is an error wrapping stream.ErrOpPanicked, and the panic
// value's own error when it is one.
func TestRunOpTurnsPanicsIntoErrors(t *testing.T) {
	boom := errors.New("boom")
	err := RunOp(stream.Op{Name: "p", Run: func() error { panic(boom) }})
	if !errors.Is(err, stream.ErrOpPanicked) || !errors.Is(err, boom) {
		t.Fatalf("RunOp(panic(error)) = %v", err)
	}
	err = RunOp(stream.Op{Name: "p", Run: func() error { panic("text") }})
	if !errors.Is(err, stream.ErrOpPanicked) || !strings.Contains(err.Error(), "text") {
		t.Fatalf("RunOp(panic(string)) = %v", err)
	}
	if err := RunOp(stream.Op{Name: "p", Run: func() error { return boom }}); err != boom {
		t.Fatalf("RunOp(returns boom) = %v", err)
	}
}

// foreignWaiter is a ForeignWaiter that counts its flushes.
type foreignWaiter struct {
	rec     *Recording
	flushes int
}

func (q *foreignWaiter) Flush() error { q.flushes++; return nil }

func (q *foreignWaiter) RefuseCrossStreamWhileRecording(cause string) error {
	return q.rec.RefuseCrossStream("fake", cause)
}

// completedQueue is a queue of another kind whose steps up to done have
// completed, and which records the waits it is asked for.
type completedQueue struct {
	otherQueue
	done uint64
}

func (q *completedQueue) Completed() uint64 { return q.done }

// WaitForeign flushes for a completed foreign step, waits on the host for
// an incomplete one, and refuses that wait, invalidating the recording,
// while the waiting queue records.
func TestWaitForeignRefusesAnIncompleteForeignStepWhileRecording(t *testing.T) {
	q, o := &foreignWaiter{}, &completedQueue{done: 3}
	if err := WaitForeign(q, stream.Fence{Q: o, Seq: 3}); err != nil || q.flushes != 1 || len(o.waited) != 0 {
		t.Fatalf("WaitForeign(completed step) = %v, %d flushes, %d waits; want a flush and no wait", err, q.flushes, len(o.waited))
	}
	if err := WaitForeign(q, stream.Fence{Q: o, Seq: 4}); err != nil || len(o.waited) != 1 {
		t.Fatalf("WaitForeign(incomplete step) = %v, %d waits; want one host wait", err, len(o.waited))
	}
	q.rec = &Recording{Owner: 1}
	err := WaitForeign(q, stream.Fence{Q: o, Seq: 5})
	if !errors.Is(err, stream.ErrCaptureCrossStream) || q.rec.Invalid() == nil || !strings.Contains(q.rec.Invalid().Error(), "incomplete step 5") {
		t.Fatalf("WaitForeign(incomplete step) while recording = %v, recording invalid %v; want ErrCaptureCrossStream and an invalidation naming step 5", err, q.rec.Invalid())
	}
	if len(o.waited) != 1 {
		t.Fatalf("a refused foreign wait waited: %v", o.waited)
	}
}
