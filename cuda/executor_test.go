//go:build linux

package cuda

import (
	"errors"
	"sync"
	"testing"
)

func newTestExecutor(t *testing.T) *executor {
	t.Helper()
	e, err := newExecutor("test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestExecutorRunsEveryFunctionOnOneLockedThread(t *testing.T) {
	e := newTestExecutor(t)
	var mu sync.Mutex
	seen := map[int]int{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				e.Do(func() error {
					mu.Lock()
					seen[threadID()]++
					mu.Unlock()
					return nil
				})
			}
		}()
	}
	wg.Wait()
	if len(seen) != 1 || seen[e.tid] != 400 {
		t.Fatalf("functions ran on threads %v, want all 400 on the worker's thread %d", seen, e.tid)
	}
}

func TestExecutorKeepsOrderAndReturnsErrors(t *testing.T) {
	e := newTestExecutor(t)
	var order []int
	for i := 0; i < 100; i++ {
		if err := e.Do(func() error { order = append(order, i); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("order[%d] = %d: functions ran out of order", i, v)
		}
	}
	boom := errors.New("boom")
	if err := e.Do(func() error { return boom }); err != boom {
		t.Fatalf("Do returned %v, want the function's error", err)
	}
}

func TestExecutorRunsNestedDoInline(t *testing.T) {
	e := newTestExecutor(t)
	ran := false
	err := e.Do(func() error {
		outer := threadID()
		return e.Do(func() error { // would deadlock if handed over
			ran = threadID() == outer
			return nil
		})
	})
	if err != nil || !ran {
		t.Fatalf("nested Do: err %v, ran inline on the worker %v", err, ran)
	}
	if err := e.Do(func() error { return e.Close() }); err == nil {
		t.Fatal("Close from the worker succeeded; want an error")
	}
}

func TestExecutorReraisesPanicInCaller(t *testing.T) {
	e := newTestExecutor(t)
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the function's panic value", r)
			}
		}()
		e.Do(func() error { panic("kaboom") })
		t.Fatal("Do returned after its function panicked")
	}()
	if err := e.Do(func() error { return nil }); err != nil {
		t.Fatalf("executor unusable after a panic: %v", err)
	}
}

func TestExecutorCloseStopsItAndIsIdempotent(t *testing.T) {
	e, err := newExecutor("closing", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ran := false
	if err := e.Do(func() error { ran = true; return nil }); !errors.Is(err, ErrClosed) || ran {
		t.Fatalf("Do after Close: err %v, ran %v; want ErrClosed and nothing run", err, ran)
	}
}

func TestExecutorSetupFailureEndsIt(t *testing.T) {
	boom := errors.New("setup failed")
	var setupTID int
	e, err := newExecutor("failing", func() error { setupTID = threadID(); return boom })
	if err != boom || e != nil {
		t.Fatalf("newExecutor = %v, %v; want nil and the setup error", e, err)
	}
	if setupTID <= 0 {
		t.Fatal("setup did not run on a worker thread")
	}
}
