package hostqueue_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/stream"
)

func mustBegin(t *testing.T, q stream.Recorder, o stream.Owner) {
	t.Helper()
	if err := q.BeginCapture(o); err != nil {
		t.Fatalf("BeginCapture(%d): %v", o, err)
	}
	if !q.Recording() {
		t.Fatal("Recording() = false after BeginCapture")
	}
}

// recordInto enqueues ops appending each name to log on a recording queue,
// which must record them (seq 0) rather than run them.
func recordInto(t *testing.T, q stream.Queue, log *[]string, names ...string) {
	t.Helper()
	for _, name := range names {
		if seq := mustEnqueue(t, q, name, appendOp(log, name)); seq != 0 {
			t.Fatalf("recorded op %q got seq %d, want 0", name, seq)
		}
	}
}

// assertTornDown checks that a refused EndCapture left no executable and no
// recording, and that the queue runs ops again.
func assertTornDown(t *testing.T, q stream.Recorder, e stream.Exec, log *[]string) {
	t.Helper()
	if e != nil {
		t.Fatalf("EndCapture returned executable %v with its error", e)
	}
	if q.Recording() {
		t.Fatal("queue still records after EndCapture")
	}
	before := len(*log)
	if seq := mustEnqueue(t, q, "after-capture", appendOp(log, "after-capture")); seq == 0 {
		t.Fatal("an op after the capture was recorded, not run")
	}
	drain(t, q)
	if len(*log) != before+1 || (*log)[before] != "after-capture" {
		t.Fatalf("log after the capture = %v, want only the new op appended", *log)
	}
}

// design §12.6 #50: recorded ops do not run while recording; three replays run
// them three times in order.
func TestRecordedOpsDoNotRunAndEachReplayRunsThemInOrder(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		var log []string
		mustEnqueue(t, q, "before", appendOp(&log, "before"))
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "a", "b", "c")
		if got := q.Completed(); got > 1 {
			t.Fatalf("Completed = %d while recording: recorded ops advanced it", got)
		}
		e, err := q.EndCapture(1, nil)
		if err != nil {
			t.Fatalf("EndCapture: %v", err)
		}
		if e.Len() != 3 {
			t.Fatalf("executable holds %d ops, want 3", e.Len())
		}
		drain(t, q)
		if !slices.Equal(log, []string{"before"}) {
			t.Fatalf("after EndCapture ran %v: recorded ops must not run", log)
		}
		for range 3 {
			if err := q.Replay(e); err != nil {
				t.Fatalf("Replay: %v", err)
			}
		}
		drain(t, q)
		want := []string{"before", "a", "b", "c", "a", "b", "c", "a", "b", "c"}
		if !slices.Equal(log, want) {
			t.Fatalf("ran %v, want %v", log, want)
		}
		if got := q.Completed(); got != 10 {
			t.Fatalf("Completed = %d, want 10: each replayed op takes a sequence number", got)
		}
	})
}

// design §12.6 #50: a wait on a recording queue invalidates the capture.
func TestWaitOnRecordingQueueInvalidatesCapture(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		var log []string
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "a")
		f, _ := q.Fence()
		err := q.Wait(context.Background(), f)
		if !errors.Is(err, stream.ErrCaptureInvalidated) || !errors.Is(err, stream.ErrCaptureUnsupported) {
			t.Fatalf("Wait while recording = %v, want ErrCaptureInvalidated and ErrCaptureUnsupported", err)
		}
		assertInvalidated(t, q, 1, &log)
	})
}

// design §12.6 #50: a storage dealloc reported for the recording stream
// invalidates the capture.
func TestStorageDeallocWhileRecordingInvalidatesCapture(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		var log []string
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "a")
		q.ObserveStorage("Dealloc")
		assertInvalidated(t, q, 1, &log)
	})
}

// assertInvalidated checks the rest of scenario 50's invalidation: later ops
// and replays fail, EndCapture gives no executable, and nothing recorded ran.
func assertInvalidated(t *testing.T, q stream.Recorder, owner stream.Owner, log *[]string) {
	t.Helper()
	if seq, err := q.Enqueue(stream.Op{Name: "later", Run: appendOp(log, "later")}); !errors.Is(err, stream.ErrCaptureInvalidated) || seq != 0 {
		t.Fatalf("Enqueue after invalidation = %d, %v; want 0, ErrCaptureInvalidated", seq, err)
	}
	replayed := &hostqueue.OpList{}
	if err := q.Replay(replayed); !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("Replay after invalidation = %v, want ErrCaptureInvalidated", err)
	}
	e, err := q.EndCapture(owner, nil)
	if !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("EndCapture = %v, want ErrCaptureInvalidated", err)
	}
	assertTornDown(t, q, e, log)
	if slices.Contains(*log, "a") || slices.Contains(*log, "later") {
		t.Fatalf("ran %v: nothing of an invalidated recording may run", *log)
	}
}

func TestStorageAllocOutsideCaptureChangesNothing(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		q.ObserveStorage("Alloc")
		mustBegin(t, q, 1)
		var log []string
		recordInto(t, q, &log, "a")
		if e, err := q.EndCapture(1, nil); err != nil || e.Len() != 1 {
			t.Fatalf("EndCapture = %v, %v; want one op: an alloc before the capture must not invalidate it", e, err)
		}
	})
}

func TestHostWaitOnFenceOfAnotherRecordingQueueInvalidatesIt(t *testing.T) {
	rec, other := hostqueue.NewHost(), hostqueue.NewHost()
	defer closeQueue(t, rec)
	defer closeQueue(t, other)
	mustEnqueue(t, rec, "op", func() error { return nil })
	f, _ := rec.Fence()
	mustBegin(t, rec, 1)
	err := other.Wait(context.Background(), f)
	if !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("Wait on a fence of a recording queue = %v, want ErrCaptureInvalidated", err)
	}
	if _, err := rec.EndCapture(1, nil); !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("EndCapture = %v, want ErrCaptureInvalidated", err)
	}
}

// design §12.6 #50: a cued BeginCapture refusal leaves the queue usable and a
// retry succeeds.
func TestCuedBeginCaptureRefusalLeavesQueueUsableAndRetrySucceeds(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		cue := errors.New("driver refused begin")
		q.FailNextBeginCapture(cue)
		if err := q.BeginCapture(1); !errors.Is(err, cue) {
			t.Fatalf("cued BeginCapture = %v, want the cued error", err)
		}
		if q.Recording() {
			t.Fatal("a refused BeginCapture left the queue recording")
		}
		var log []string
		if seq := mustEnqueue(t, q, "runs", appendOp(&log, "runs")); seq != 1 {
			t.Fatalf("op after refused begin got seq %d, want 1 (run, not recorded)", seq)
		}
		drain(t, q)
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "recorded")
		e, err := q.EndCapture(1, nil)
		if err != nil || e.Len() != 1 {
			t.Fatalf("EndCapture after retry = %v, %v; want one op", e, err)
		}
		if !slices.Equal(log, []string{"runs"}) {
			t.Fatalf("ran %v", log)
		}
	})
}

func TestClearedBeginCaptureCueRefusesNothing(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		q.FailNextBeginCapture(errors.New("never seen"))
		q.FailNextBeginCapture(nil)
		mustBegin(t, q, 1)
	})
}

func TestEndCaptureByAnotherOwnerTearsCaptureDown(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		var log []string
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "a")
		e, err := q.EndCapture(2, nil)
		if !errors.Is(err, stream.ErrWrongOwner) {
			t.Fatalf("EndCapture(2) = %v, want ErrWrongOwner", err)
		}
		assertTornDown(t, q, e, &log)
		if _, err := q.EndCapture(1, nil); !errors.Is(err, stream.ErrCaptureState) {
			t.Fatalf("owner's EndCapture after tear-down = %v, want ErrCaptureState", err)
		}
	})
}

func TestDoomedEndCaptureReturnsTheDoomAndNoExecutable(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		var log []string
		doom := errors.New("page update forbidden")
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "a")
		e, err := q.EndCapture(1, doom)
		if !errors.Is(err, doom) {
			t.Fatalf("EndCapture(doomed) = %v, want it to wrap the doom", err)
		}
		assertTornDown(t, q, e, &log)
	})
}

func TestCaptureCallsOutOfOrderOnAQueue(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		if _, err := q.EndCapture(1, nil); !errors.Is(err, stream.ErrCaptureState) {
			t.Fatalf("EndCapture without capture = %v, want ErrCaptureState", err)
		}
		if err := q.BeginCapture(0); !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("BeginCapture(0) = %v, want ErrInvalid", err)
		}
		var log []string
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "a")
		if err := q.BeginCapture(2); !errors.Is(err, stream.ErrCaptureState) {
			t.Fatalf("BeginCapture on a recording queue = %v, want ErrCaptureState", err)
		}
		e, err := q.EndCapture(1, nil)
		if err != nil || e.Len() != 1 {
			t.Fatalf("EndCapture after a refused second begin = %v, %v; want the original recording intact", e, err)
		}
	})
}

func TestCrossStreamWaitOnIncompleteWorkInvalidatesRecording(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		other := hostqueue.NewHost()
		defer closeQueue(t, other)
		gate := make(chan struct{})
		defer close(gate)
		mustEnqueue(t, other, "gated", func() error { <-gate; return nil })
		incomplete, _ := other.Fence()
		for _, k := range kinds {
			q := k.new()
			var log []string
			mustBegin(t, q, 1)
			err := q.WaitFence(incomplete)
			if !errors.Is(err, stream.ErrCaptureCrossStream) || !errors.Is(err, stream.ErrCaptureInvalidated) {
				t.Fatalf("%s: WaitFence on incomplete work while recording = %v, want ErrCaptureCrossStream and ErrCaptureInvalidated", k.name, err)
			}
			assertInvalidated(t, q, 1, &log)
			closeQueue(t, q)
		}
	})
}

func TestCrossStreamWaitOnPassedWorkKeepsRecordingValid(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q, other := newQueue(), newQueue()
		defer closeQueue(t, q)
		defer closeQueue(t, other)
		mustEnqueue(t, other, "op", func() error { return nil })
		drain(t, other)
		passed, _ := other.Fence()
		var log []string
		mustBegin(t, q, 1)
		if err := q.WaitFence(passed); err != nil {
			t.Fatalf("WaitFence on passed work while recording: %v", err)
		}
		recordInto(t, q, &log, "a")
		if e, err := q.EndCapture(1, nil); err != nil || e.Len() != 1 {
			t.Fatalf("EndCapture = %v, %v; want one op", e, err)
		}
	})
}

func TestReplayWhileRecordingAppendsToTheRecording(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		var log []string
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "a", "b")
		inner, err := q.EndCapture(1, nil)
		if err != nil {
			t.Fatalf("EndCapture: %v", err)
		}
		mustBegin(t, q, 2)
		recordInto(t, q, &log, "x")
		if err := q.Replay(inner); err != nil {
			t.Fatalf("Replay while recording: %v", err)
		}
		outer, err := q.EndCapture(2, nil)
		if err != nil {
			t.Fatalf("EndCapture: %v", err)
		}
		if len(log) != 0 {
			t.Fatalf("ran %v while recording", log)
		}
		if err := q.Replay(outer); err != nil {
			t.Fatalf("Replay: %v", err)
		}
		drain(t, q)
		if want := []string{"x", "a", "b"}; !slices.Equal(log, want) {
			t.Fatalf("ran %v, want %v", log, want)
		}
	})
}

type foreignExec struct{}

func (foreignExec) Len() int { return 0 }

func TestReplayRefusesAnExecutableOfAnotherBackend(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		for _, e := range []stream.Exec{foreignExec{}, nil, (*hostqueue.OpList)(nil)} {
			if err := q.Replay(e); !errors.Is(err, stream.ErrInvalid) {
				t.Fatalf("Replay(%T) = %v, want ErrInvalid", e, err)
			}
		}
	})
}

func TestRecordedOpsAreReplayableOnAnotherKindOfHostQueue(t *testing.T) {
	h, in := hostqueue.NewHost(), hostqueue.NewInline()
	defer closeQueue(t, h)
	defer closeQueue(t, in)
	var log []string
	mustBegin(t, h, 1)
	recordInto(t, h, &log, "a", "b")
	e, err := h.EndCapture(1, nil)
	if err != nil {
		t.Fatalf("EndCapture: %v", err)
	}
	if err := in.Replay(e); err != nil {
		t.Fatalf("Replay on Inline: %v", err)
	}
	if !slices.Equal(log, []string{"a", "b"}) {
		t.Fatalf("ran %v", log)
	}
	ops := e.(*hostqueue.OpList).Ops()
	ops[0] = stream.Op{}
	if e.Len() != 2 || e.(*hostqueue.OpList).Ops()[0].Name != "a" {
		t.Fatal("Ops returned the executable's own slice: changing the copy changed the graph")
	}
}

func TestCloseDiscardsAnOpenCapture(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		var log []string
		mustBegin(t, q, 1)
		recordInto(t, q, &log, "a")
		closeQueue(t, q)
		if q.Recording() {
			t.Fatal("Recording() after Close")
		}
		if _, err := q.EndCapture(1, nil); !errors.Is(err, stream.ErrCaptureState) {
			t.Fatalf("EndCapture after Close = %v, want ErrCaptureState", err)
		}
		if len(log) != 0 {
			t.Fatalf("Close ran recorded ops: %v", log)
		}
	})
}
