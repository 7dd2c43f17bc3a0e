package hostqueue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/stream"
)

// heldTimeout bounds calls that must return: a hang fails the test instead
// of stalling the suite. It is generous because it measures nothing.
const heldTimeout = 30 * time.Second

// within runs f on its own goroutine and fails the test if it has not
// returned after heldTimeout (the goroutine is left behind: it is stuck).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(heldTimeout):
		t.Fatalf("%s did not return within %v: a held queue waits on itself", what, heldTimeout)
	}
}

func nop(name string) stream.Op { return stream.Op{Name: name, Run: func() error { return nil }} }

// logged returns an op appending name to log, under mu: held ops run on
// whichever goroutine flushes or waits.
func logged(mu *sync.Mutex, log *[]string, name string) stream.Op {
	return stream.Op{Name: name, Run: func() error {
		mu.Lock()
		*log = append(*log, name)
		mu.Unlock()
		return nil
	}}
}

func mustFence(t *testing.T, q stream.Queue) stream.Fence {
	t.Helper()
	f, err := q.Fence()
	if err != nil {
		t.Fatalf("Fence: %v", err)
	}
	return f
}

func mustWaitFence(t *testing.T, q stream.Queue, f stream.Fence) {
	t.Helper()
	if err := q.WaitFence(f); err != nil {
		t.Fatalf("WaitFence(%d): %v", f.Seq, err)
	}
}

func mustOp(t *testing.T, q stream.Queue, op stream.Op) {
	t.Helper()
	if _, err := q.Enqueue(op); err != nil {
		t.Fatalf("Enqueue(%q): %v", op.Name, err)
	}
}

func noFailures(t *testing.T, qs ...stream.Queue) {
	t.Helper()
	for i, q := range qs {
		if f := q.TakeFailures(); len(f) > 0 {
			t.Errorf("queue %d failures: %v", i, f)
		}
	}
}

// Defect R1 (reliability-2026-12-b): B's wait on A needs only A's first step,
// but the run of A went on to A's second step, a wait on B's second step,
// which the same goroutine holds up while it runs B's first: it waited on
// itself. The run stops at the step it needs and leaves A's wait for A's own
// flush.
func TestHeldInlineWaitRunsOnlyTheStepsItNeeds(t *testing.T) {
	g := hostqueue.NewRunnerGroup()
	a, b := hostqueue.NewInlineHeld(g), hostqueue.NewInlineHeld(g)
	var mu sync.Mutex
	var log []string
	mustOp(t, a, logged(&mu, &log, "a1")) // A 1
	mustWaitFence(t, b, mustFence(t, a))  // B 1: wait A >= 1
	mustOp(t, b, logged(&mu, &log, "b2")) // B 2
	mustWaitFence(t, a, mustFence(t, b))  // A 2: wait B >= 2 (issued after B's wait: no cycle)
	mustOp(t, a, logged(&mu, &log, "a3")) // A 3

	within(t, "B.Flush", func() {
		if err := b.Flush(); err != nil {
			t.Errorf("B.Flush: %v", err)
		}
	})
	if got := b.Completed(); got != 2 {
		t.Errorf("after B.Flush, B completed %d steps, want 2", got)
	}
	if got := a.Completed(); got != 1 {
		t.Errorf("after B.Flush, A completed %d steps, want 1 (only what B's wait needs)", got)
	}
	within(t, "A.Flush", func() {
		if err := a.Flush(); err != nil {
			t.Errorf("A.Flush: %v", err)
		}
	})
	if got := a.Completed(); got != 3 {
		t.Errorf("after A.Flush, A completed %d steps, want 3", got)
	}
	if want := []string{"a1", "b2", "a3"}; fmt.Sprint(log) != fmt.Sprint(want) {
		t.Errorf("ran %v, want %v", log, want)
	}
	noFailures(t, a, b)
}

// The same with three queues and a longer chain: C's first wait needs B up to
// its second step, whose first waits on A's first; A's second step waits on
// C, B's third on A's third. Each flush order returns and runs the steps in
// order.
func TestHeldInlineChainsOfThreeQueuesReturnInEveryFlushOrder(t *testing.T) {
	orders := [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for _, order := range orders {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			g := hostqueue.NewRunnerGroup()
			a, b, c := hostqueue.NewInlineHeld(g), hostqueue.NewInlineHeld(g), hostqueue.NewInlineHeld(g)
			qs := []*hostqueue.Inline{a, b, c}
			var mu sync.Mutex
			var log []string
			mustOp(t, a, logged(&mu, &log, "a1"))
			mustWaitFence(t, b, mustFence(t, a)) // B: wait A >= 1
			mustOp(t, b, logged(&mu, &log, "b1"))
			mustWaitFence(t, c, mustFence(t, b)) // C: wait B >= 2
			mustOp(t, c, logged(&mu, &log, "c1"))
			mustWaitFence(t, a, mustFence(t, c)) // A: wait C >= 2
			mustOp(t, a, logged(&mu, &log, "a2"))
			mustWaitFence(t, b, mustFence(t, a)) // B: wait A >= 4
			mustOp(t, b, logged(&mu, &log, "b2"))
			mustWaitFence(t, c, mustFence(t, b)) // C: wait B >= 4
			mustOp(t, c, logged(&mu, &log, "c2"))
			for _, i := range order {
				within(t, fmt.Sprintf("Flush of queue %d", i), func() {
					if err := qs[i].Flush(); err != nil {
						t.Errorf("Flush of queue %d: %v", i, err)
					}
				})
			}
			// Every flush ran what was held when it was called, and the waits
			// it met ran what they needed: whatever the order, all ran.
			for i, q := range qs {
				if got, want := q.Completed(), q.Issued(); got != want {
					t.Errorf("queue %d completed %d of %d steps", i, got, want)
				}
			}
			if want := []string{"a1", "b1", "c1", "a2", "b2", "c2"}; fmt.Sprint(log) != fmt.Sprint(want) {
				t.Errorf("ran %v, want %v", log, want)
			}
			noFailures(t, a, b, c)
		})
	}
}

// Several goroutines flushing the queues of a chain at once: a runner that
// stops short of the step another goroutine waits for lets that goroutine
// run it, so every flush returns.
func TestHeldInlineConcurrentFlushesOfAChainAllReturn(t *testing.T) {
	for round := range 200 {
		g := hostqueue.NewRunnerGroup()
		qs := []*hostqueue.Inline{hostqueue.NewInlineHeld(g), hostqueue.NewInlineHeld(g), hostqueue.NewInlineHeld(g)}
		for i := range 12 {
			q, prev := qs[i%3], qs[(i+2)%3]
			mustWaitFence(t, q, mustFence(t, prev))
			mustOp(t, q, nop(fmt.Sprint(i)))
		}
		var wg sync.WaitGroup
		within(t, fmt.Sprintf("round %d's flushes", round), func() {
			for i := range 6 {
				wg.Go(func() {
					if err := qs[i%3].Flush(); err != nil {
						t.Errorf("Flush: %v", err)
					}
				})
			}
			wg.Wait()
		})
		for i, q := range qs {
			if got, want := q.Completed(), q.Issued(); got != want {
				t.Fatalf("round %d: queue %d completed %d of %d steps", round, i, got, want)
			}
		}
	}
}

// A wait for a later step of a held queue from inside one of its ops could
// never end: the step runs only after the op returns. It is refused, and a
// fence wait step that would wait so fails instead of blocking.
func TestHeldInlineWaitFromItsOwnOpIsRefusedNotHung(t *testing.T) {
	g := hostqueue.NewRunnerGroup()
	a, b := hostqueue.NewInlineHeld(g), hostqueue.NewInlineHeld(g)
	var waitErr, completedErr, waitBErr error
	var fb stream.Fence
	mustOp(t, a, stream.Op{Name: "waits on itself", Run: func() error { // A 1
		waitErr = a.Wait(context.Background(), stream.Fence{Q: a, Seq: 2})
		completedErr = a.WaitCompleted(context.Background(), 2)
		return nil
	}})
	mustOp(t, a, nop("a2"))                                                           // A 2
	mustOp(t, a, stream.Op{Name: "waits on B, which waits on it", Run: func() error { // A 3
		waitBErr = b.Wait(context.Background(), fb)
		return nil
	}})
	mustWaitFence(t, b, mustFence(t, a)) // B 1: wait A >= 3
	fb = mustFence(t, b)
	within(t, "A.Flush", func() {
		if err := a.Flush(); err != nil {
			t.Errorf("A.Flush: %v", err)
		}
	})
	if !errors.Is(waitErr, stream.ErrWaitsOnItself) {
		t.Errorf("Wait from A's op on A's later step: %v, want ErrWaitsOnItself", waitErr)
	}
	if !errors.Is(completedErr, stream.ErrWaitsOnItself) {
		t.Errorf("WaitCompleted from A's op on A's later step: %v, want ErrWaitsOnItself", completedErr)
	}
	if waitBErr != nil {
		t.Errorf("Wait on B from A's op: %v (B's step completes, failed)", waitBErr)
	}
	if f := b.TakeFailures(); len(f) != 1 || !errors.Is(f[0].Err, stream.ErrWaitsOnItself) {
		t.Errorf("B's failures %v, want its wait step's ErrWaitsOnItself", f)
	}
	for i, q := range []*hostqueue.Inline{a, b} {
		if got, want := q.Completed(), q.Issued(); got != want {
			t.Errorf("queue %d completed %d of %d steps", i, got, want)
		}
	}
	noFailures(t, a)
}

// A wait from another queue for a fence of a held queue runs its steps:
// nobody else may ever flush them.
func TestWaitOnAFenceOfAnotherHeldQueueRunsItsSteps(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			a := hostqueue.NewInlineHeld(nil)
			q := k.new()
			defer closeQueue(t, q)
			ran := false
			mustOp(t, a, stream.Op{Name: "a1", Run: func() error { ran = true; return nil }})
			mustOp(t, a, nop("a2"))
			within(t, "Wait", func() {
				if err := q.Wait(context.Background(), stream.Fence{Q: a, Seq: 1}); err != nil {
					t.Errorf("Wait: %v", err)
				}
			})
			if !ran || a.Completed() != 1 {
				t.Errorf("after the wait: a1 ran %v, A completed %d, want true, 1", ran, a.Completed())
			}
		})
	}
}

// A goroutine waiting for a step that another goroutine's run will not reach
// runs it once that runner stops, and a cancelled context ends the wait for
// the runner.
func TestHeldInlineWaitTakesOverFromARunnerThatStopsShort(t *testing.T) {
	a := hostqueue.NewInlineHeld(nil)
	gate, started := make(chan struct{}), make(chan struct{})
	mustOp(t, a, stream.Op{Name: "gated", Run: func() error { close(started); <-gate; return nil }})
	mustOp(t, a, nop("a2"))
	done := make(chan error, 1)
	go func() { done <- a.WaitCompleted(context.Background(), 1) }() // runs step 1 only
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Wait(ctx, stream.Fence{Q: a, Seq: 2}); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a cancelled context behind a runner: %v, want context.Canceled", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- a.Wait(context.Background(), stream.Fence{Q: a, Seq: 2}) }()
	close(gate)
	within(t, "the waits", func() {
		if err := <-done; err != nil {
			t.Errorf("WaitCompleted(1): %v", err)
		}
		if err := <-waited; err != nil {
			t.Errorf("Wait(2): %v", err)
		}
	})
	if got := a.Completed(); got != 2 {
		t.Errorf("A completed %d, want 2", got)
	}
}

// Randomized: goroutines issue ops and cross-queue fence waits on held
// queues sharing a group (fences are taken from what a queue has issued, so
// the waits are acyclic), some ops enqueue on another queue from inside, and
// flushes and waits run concurrently. Every call returns, every op runs once,
// in its queue's order, and after every fence its queue waited on.
func TestHeldInlineRandomCrossWaitsAlwaysReturnInOrder(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { heldRandomRun(t, seed) })
	}
}

// heldQueue is one queue of the randomized test with what its ops check.
type heldQueue struct {
	q *hostqueue.Inline

	mu     sync.Mutex     // guards the fields below
	waits  []stream.Fence // fences waited on so far: later ops check them
	next   int            // index of the next op enqueued
	ran    []int          // indices of ops, as they ran
	broken []string       // what an op found wrong
}

func heldRandomRun(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	g := hostqueue.NewRunnerGroup()
	hq := make([]*heldQueue, 2+rng.IntN(4))
	for i := range hq {
		hq[i] = &heldQueue{q: hostqueue.NewInlineHeld(g)}
	}

	// enqueue issues an op on h that checks, when it runs, that it runs
	// next in h's order and after every fence h waited on before it; with
	// nested set it also enqueues an op on another queue and flushes it.
	var enqueue func(h *heldQueue, nested *heldQueue)
	enqueue = func(h *heldQueue, nested *heldQueue) {
		h.mu.Lock()
		defer h.mu.Unlock()
		idx := h.next
		waits := append([]stream.Fence(nil), h.waits...)
		op := stream.Op{Name: fmt.Sprint(idx), Run: func() error {
			for _, f := range waits {
				if c := f.Q.Completed(); c < f.Seq {
					h.mu.Lock()
					h.broken = append(h.broken, fmt.Sprintf("op %d ran before its fence %d (completed %d)", idx, f.Seq, c))
					h.mu.Unlock()
				}
			}
			h.mu.Lock()
			h.ran = append(h.ran, idx)
			h.mu.Unlock()
			if nested != nil {
				enqueue(nested, nil)
				_ = nested.q.Flush() // left held: this goroutine runs ops of the group
			}
			return nil
		}}
		if _, err := h.q.Enqueue(op); err != nil {
			t.Errorf("Enqueue: %v", err)
			return
		}
		h.next++
	}

	workers := 2 + rng.IntN(3)
	steps := 150 + rng.IntN(150)
	workerSeeds := make([]uint64, workers)
	for i := range workerSeeds {
		workerSeeds[i] = rng.Uint64()
	}
	within(t, "the workers", func() {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(workerSeeds[w], uint64(w)))
				for range steps {
					h := hq[r.IntN(len(hq))]
					switch p := r.IntN(100); {
					case p < 45:
						var nested *heldQueue
						if r.IntN(8) == 0 {
							nested = hq[r.IntN(len(hq))]
							if nested == h {
								nested = nil // an op must not enqueue on its own queue
							}
						}
						enqueue(h, nested)
					case p < 70:
						o := hq[r.IntN(len(hq))]
						if o == h {
							continue
						}
						f, err := o.q.Fence()
						if err != nil {
							t.Errorf("Fence: %v", err)
							return
						}
						h.mu.Lock()
						if err := h.q.WaitFence(f); err != nil {
							t.Errorf("WaitFence: %v", err)
						}
						h.waits = append(h.waits, f)
						h.mu.Unlock()
					case p < 88:
						if err := h.q.Flush(); err != nil {
							t.Errorf("Flush: %v", err)
						}
					case p < 94:
						f, err := h.q.Fence()
						if err == nil {
							err = h.q.Wait(context.Background(), f)
						}
						if err != nil {
							t.Errorf("Wait: %v", err)
						}
					default:
						o := hq[r.IntN(len(hq))]
						if err := o.q.WaitCompleted(context.Background(), o.q.Issued()); err != nil {
							t.Errorf("WaitCompleted: %v", err)
						}
					}
				}
			})
		}
		wg.Wait()
	})
	// Nested enqueues may still be held: flush until every queue is done.
	within(t, "the final flushes", func() {
		for again := true; again; {
			again = false
			for _, h := range hq {
				if err := h.q.Flush(); err != nil {
					t.Errorf("Flush: %v", err)
				}
			}
			for _, h := range hq {
				if h.q.Completed() != h.q.Issued() {
					again = true
				}
			}
		}
	})
	for i, h := range hq {
		h.mu.Lock()
		if len(h.broken) > 0 {
			t.Errorf("queue %d: %v", i, h.broken)
		}
		if len(h.ran) != h.next {
			t.Errorf("queue %d ran %d of %d ops", i, len(h.ran), h.next)
		}
		for j, idx := range h.ran {
			if idx != j {
				t.Errorf("queue %d ran op %d at position %d: out of order", i, idx, j)
				break
			}
		}
		h.mu.Unlock()
		noFailures(t, h.q)
	}
}
