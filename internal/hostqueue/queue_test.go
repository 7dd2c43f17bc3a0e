package hostqueue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/stream"
)

// testQueue is what both host queues offer.
type testQueue interface {
	stream.Recorder
	hostqueue.StorageWatcher
	FailNextBeginCapture(err error)
}

// kinds runs a test against both host queues.
var kinds = []struct {
	name string
	new  func() testQueue
}{
	{"Host", func() testQueue { return hostqueue.NewHost() }},
	{"Inline", func() testQueue { return hostqueue.NewInline() }},
}

func forEachKind(t *testing.T, f func(t *testing.T, newQueue func() testQueue)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { f(t, k.new) })
	}
}

func closeQueue(t *testing.T, q stream.Queue) {
	t.Helper()
	if err := q.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func mustEnqueue(t *testing.T, q stream.Queue, name string, run func() error) uint64 {
	t.Helper()
	seq, err := q.Enqueue(stream.Op{Name: name, Run: run})
	if err != nil {
		t.Fatalf("Enqueue(%q): %v", name, err)
	}
	return seq
}

// drain waits until every op enqueued on q so far has run.
func drain(t *testing.T, q stream.Queue) {
	t.Helper()
	f, err := q.Fence()
	if err != nil {
		t.Fatalf("Fence: %v", err)
	}
	if err := q.Wait(context.Background(), f); err != nil {
		t.Fatalf("Wait(%d): %v", f.Seq, err)
	}
}

// appendOp returns a Run appending name to *log. Only the queue's executor
// runs it, and the test reads log after drain, so no lock is needed: the race
// detector checks that claim.
func appendOp(log *[]string, name string) func() error {
	return func() error { *log = append(*log, name); return nil }
}

// design §12.6 #48: ops on one queue run in order, and a fence completes only
// after every op enqueued before it.
func TestOpsRunInOrderAndFencePassesAfterEveryEarlierOp(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		var log []string
		for i := range 50 {
			seq := mustEnqueue(t, q, "op", appendOp(&log, fmt.Sprint(i)))
			if seq != uint64(i+1) {
				t.Fatalf("op %d got seq %d, want %d", i, seq, i+1)
			}
		}
		f, err := q.Fence()
		if err != nil || f.Seq != 50 || f.Q != stream.Queue(q) {
			t.Fatalf("Fence = %+v, %v; want seq 50 on this queue", f, err)
		}
		if err := q.Wait(context.Background(), f); err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if q.Completed() < f.Seq {
			t.Fatalf("Completed = %d after Wait(%d)", q.Completed(), f.Seq)
		}
		want := make([]string, 50)
		for i := range want {
			want[i] = fmt.Sprint(i)
		}
		if !slices.Equal(log, want) {
			t.Fatalf("ran %v, want %v", log, want)
		}
	})
}

func TestHostFenceDoesNotPassWhileAnEarlierOpRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := hostqueue.NewHost()
		defer closeQueue(t, q)
		gate := make(chan struct{})
		var log []string
		mustEnqueue(t, q, "gated", func() error { <-gate; log = append(log, "gated"); return nil })
		mustEnqueue(t, q, "second", appendOp(&log, "second"))
		f, _ := q.Fence()
		waited := make(chan error, 1)
		go func() { waited <- q.Wait(context.Background(), f) }()
		synctest.Wait() // worker blocked on gate, waiter on the broadcast
		select {
		case err := <-waited:
			t.Fatalf("Wait returned %v while the first op was still running", err)
		default:
		}
		if got := q.Completed(); got != 0 {
			t.Fatalf("Completed = %d while the first op runs", got)
		}
		close(gate)
		if err := <-waited; err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if !slices.Equal(log, []string{"gated", "second"}) {
			t.Fatalf("ran %v", log)
		}
	})
}

// design §12.6 #48: WaitFence orders a second queue after the first.
func TestWaitFenceOrdersSecondHostQueueAfterFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := hostqueue.NewHost(), hostqueue.NewHost()
		defer closeQueue(t, a)
		defer closeQueue(t, b)
		gate := make(chan struct{})
		var aDone atomic.Bool
		mustEnqueue(t, a, "gated", func() error { <-gate; aDone.Store(true); return nil })
		fa, _ := a.Fence()
		if err := b.WaitFence(fa); err != nil {
			t.Fatalf("WaitFence: %v", err)
		}
		sawADone := make(chan bool, 1)
		mustEnqueue(t, b, "after", func() error { sawADone <- aDone.Load(); return nil })

		synctest.Wait() // every goroutine is blocked: a on its gate, b on a's fence
		select {
		case <-sawADone:
			t.Fatal("b's op ran while a's op was still blocked")
		default:
		}
		close(gate)
		drain(t, b)
		if !<-sawADone {
			t.Fatal("b's op ran before a's op finished")
		}
	})
}

func TestWaitFenceOnInlineQueueBlocksUntilHostFencePasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, in := hostqueue.NewHost(), hostqueue.NewInline()
		defer closeQueue(t, h)
		defer closeQueue(t, in)
		gate := make(chan struct{})
		mustEnqueue(t, h, "gated", func() error { <-gate; return nil })
		fh, _ := h.Fence()
		returned := make(chan error, 1)
		go func() { returned <- in.WaitFence(fh) }()
		synctest.Wait()
		select {
		case err := <-returned:
			t.Fatalf("Inline WaitFence returned %v before the host fence passed", err)
		default:
		}
		close(gate)
		if err := <-returned; err != nil {
			t.Fatalf("WaitFence: %v", err)
		}
		if h.Completed() < fh.Seq {
			t.Fatalf("host completed %d after the inline wait on %d", h.Completed(), fh.Seq)
		}
	})
}

func TestWaitFenceOnOwnOrPassedFenceAddsNoStep(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q, other := newQueue(), newQueue()
		defer closeQueue(t, q)
		defer closeQueue(t, other)
		mustEnqueue(t, q, "op", func() error { return nil })
		mustEnqueue(t, other, "op", func() error { return nil })
		drain(t, other)
		own, _ := q.Fence()
		passed, _ := other.Fence()
		for _, f := range []stream.Fence{own, passed, {}} {
			if err := q.WaitFence(f); err != nil {
				t.Fatalf("WaitFence(%+v): %v", f, err)
			}
		}
		if f, _ := q.Fence(); f.Seq != 1 {
			t.Fatalf("fence after no-op waits = %d, want 1", f.Seq)
		}
	})
}

func TestFenceBeyondWhatItsQueueIssuedIsRefused(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q, other := newQueue(), newQueue()
		defer closeQueue(t, q)
		defer closeQueue(t, other)
		mustEnqueue(t, other, "op", func() error { return nil })
		ahead := stream.Fence{Q: other, Seq: 2}
		if err := q.WaitFence(ahead); !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("WaitFence(ahead) = %v, want ErrInvalid", err)
		}
		if err := q.Wait(context.Background(), ahead); !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("Wait(ahead) = %v, want ErrInvalid", err)
		}
		if err := q.Wait(context.Background(), stream.Fence{Seq: 1}); !errors.Is(err, stream.ErrInvalid) {
			t.Fatalf("Wait(fence without queue) = %v, want ErrInvalid", err)
		}
	})
}

func TestEnqueueRefusesAnOpWithoutRun(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		if seq, err := q.Enqueue(stream.Op{Name: "empty"}); !errors.Is(err, stream.ErrInvalid) || seq != 0 {
			t.Fatalf("Enqueue(no Run) = %d, %v; want 0, ErrInvalid", seq, err)
		}
		if f, _ := q.Fence(); f.Seq != 0 {
			t.Fatalf("a refused op took seq %d", f.Seq)
		}
	})
}

func TestPanickingOpBecomesFailureAndLaterOpsStillRun(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		var log []string
		cause := errors.New("kernel fault")
		mustEnqueue(t, q, "panics-string", func() error { panic("boom") })
		mustEnqueue(t, q, "panics-error", func() error { panic(cause) })
		mustEnqueue(t, q, "after", appendOp(&log, "after"))
		drain(t, q)
		if !slices.Equal(log, []string{"after"}) {
			t.Fatalf("ran %v, want the op after the panics to run", log)
		}
		got := q.TakeFailures()
		if len(got) != 2 {
			t.Fatalf("failures = %+v, want 2", got)
		}
		if got[0].Seq != 1 || got[0].Name != "panics-string" || !errors.Is(got[0].Err, stream.ErrOpPanicked) {
			t.Errorf("first failure = %+v, want seq 1 wrapping ErrOpPanicked", got[0])
		}
		if got[1].Seq != 2 || !errors.Is(got[1].Err, stream.ErrOpPanicked) || !errors.Is(got[1].Err, cause) {
			t.Errorf("second failure = %+v, want seq 2 wrapping ErrOpPanicked and the panic's error", got[1])
		}
	})
}

func TestTakeFailuresDrainsFailuresInSequenceOrder(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		errA, errB := errors.New("a"), errors.New("b")
		mustEnqueue(t, q, "fails-a", func() error { return errA })
		mustEnqueue(t, q, "ok", func() error { return nil })
		mustEnqueue(t, q, "fails-b", func() error { return errB })
		drain(t, q)
		want := []stream.OpFailure{{Seq: 1, Name: "fails-a", Err: errA}, {Seq: 3, Name: "fails-b", Err: errB}}
		if got := q.TakeFailures(); !slices.Equal(got, want) {
			t.Fatalf("TakeFailures = %+v, want %+v", got, want)
		}
		if got := q.TakeFailures(); len(got) != 0 {
			t.Fatalf("second TakeFailures = %+v, want none", got)
		}
	})
}

func TestWaitReturnsContextErrorWhenCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := hostqueue.NewHost()
		defer closeQueue(t, q)
		gate := make(chan struct{})
		mustEnqueue(t, q, "gated", func() error { <-gate; return nil })
		f, _ := q.Fence()
		ctx, cancel := context.WithCancel(context.Background())
		waited := make(chan error, 1)
		go func() { waited <- q.Wait(ctx, f) }()
		synctest.Wait()
		cancel()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
		}
		close(gate)
		if err := q.Wait(context.Background(), f); err != nil {
			t.Fatalf("Wait after the op finished: %v", err)
		}
	})
}

func TestWaitOnPassedFenceSucceedsEvenWithDoneContext(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		defer closeQueue(t, q)
		mustEnqueue(t, q, "op", func() error { return nil })
		drain(t, q)
		f, _ := q.Fence()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := q.Wait(ctx, f); err != nil {
			t.Fatalf("Wait on a passed fence = %v, want nil", err)
		}
	})
}

func TestHostCloseRunsEnqueuedOpsThenRefusesWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := hostqueue.NewHost()
		gate := make(chan struct{})
		var log []string
		mustEnqueue(t, q, "gated", func() error { <-gate; log = append(log, "gated"); return nil })
		mustEnqueue(t, q, "queued", appendOp(&log, "queued"))
		closed := make(chan error, 1)
		go func() { closed <- q.Close() }()
		synctest.Wait() // Close is waiting for the worker, which waits on gate
		select {
		case <-closed:
			t.Fatal("Close returned before the enqueued ops ran")
		default:
		}
		if _, err := q.Enqueue(stream.Op{Name: "late", Run: func() error { return nil }}); !errors.Is(err, stream.ErrClosed) {
			t.Fatalf("Enqueue during Close = %v, want ErrClosed", err)
		}
		close(gate)
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
		if !slices.Equal(log, []string{"gated", "queued"}) {
			t.Fatalf("ran %v, want both ops enqueued before Close", log)
		}
		if err := q.Close(); err != nil {
			t.Fatalf("second Close = %v, want nil", err)
		}
		// synctest.Test returning proves the worker goroutine exited.
	})
}

func TestClosedQueueRefusesSubmissionsButStillAnswersWaits(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		q := newQueue()
		mustEnqueue(t, q, "op", func() error { return errors.New("failed") })
		before, _ := q.Fence()
		closeQueue(t, q)
		closeQueue(t, q)
		noop := stream.Op{Name: "noop", Run: func() error { return nil }}
		if _, err := q.Enqueue(noop); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Enqueue = %v, want ErrClosed", err)
		}
		if err := q.Replay(&hostqueue.OpList{}); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Replay = %v, want ErrClosed", err)
		}
		if _, err := q.Fence(); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Fence = %v, want ErrClosed", err)
		}
		if err := q.Flush(); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("Flush = %v, want ErrClosed", err)
		}
		if err := q.WaitFence(before); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("WaitFence = %v, want ErrClosed", err)
		}
		if err := q.BeginCapture(1); !errors.Is(err, stream.ErrClosed) {
			t.Errorf("BeginCapture = %v, want ErrClosed", err)
		}
		if err := q.Wait(context.Background(), before); err != nil {
			t.Errorf("Wait on work from before Close = %v, want nil", err)
		}
		if got := q.TakeFailures(); len(got) != 1 {
			t.Errorf("TakeFailures after Close = %+v, want the op's failure", got)
		}
	})
}

func TestInlineRunsEachOpInsideEnqueue(t *testing.T) {
	q := hostqueue.NewInline()
	defer closeQueue(t, q)
	ran := 0
	for i := range 3 {
		seq := mustEnqueue(t, q, "op", func() error { ran++; return nil })
		if ran != i+1 || q.Completed() != seq {
			t.Fatalf("after Enqueue %d: ran %d, completed %d; want the op finished before Enqueue returns", seq, ran, q.Completed())
		}
	}
	if err := q.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

// Many goroutines enqueue at once: ops still run one at a time (the race
// detector would flag the unguarded counter otherwise) in the order of their
// sequence numbers, and each goroutine's ops in its own order.
func TestConcurrentEnqueuersRunOneAtATimeInSequenceOrder(t *testing.T) {
	forEachKind(t, func(t *testing.T, newQueue func() testQueue) {
		const goroutines, perG = 8, 300
		q := newQueue()
		defer closeQueue(t, q)
		ran := 0 // touched only by ops
		runIndex := make([][]int, goroutines)
		seqs := make([][]uint64, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			runIndex[g] = make([]int, perG)
			seqs[g] = make([]uint64, perG)
			wg.Go(func() {
				for i := range perG {
					seq, err := q.Enqueue(stream.Op{Name: "count", Run: func() error {
						runIndex[g][i] = ran
						ran++
						return nil
					}})
					if err != nil {
						t.Errorf("Enqueue: %v", err)
						return
					}
					seqs[g][i] = seq
					if i%50 == 0 { // observers run alongside the enqueuers
						_ = q.Completed()
						if f, err := q.Fence(); err == nil && f.Seq < seq {
							t.Errorf("fence %d taken after op %d does not cover it", f.Seq, seq)
						}
					}
				}
			})
		}
		wg.Wait()
		drain(t, q)
		if ran != goroutines*perG {
			t.Fatalf("ran %d ops, want %d", ran, goroutines*perG)
		}
		for g := range goroutines {
			for i := range perG {
				if want := int(seqs[g][i]) - 1; runIndex[g][i] != want {
					t.Fatalf("goroutine %d op %d (seq %d) ran %d-th, want %d-th", g, i, seqs[g][i], runIndex[g][i], want)
				}
			}
		}
	})
}
