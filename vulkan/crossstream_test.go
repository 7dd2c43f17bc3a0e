package vulkan

import (
	"context"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/gpumem/gpumem/stream"
)

// A cross-stream WaitFence is a semaphore wait on the device: with stream
// 1's step held back (its submission waits on a semaphore only the test
// signals), stream 2's next step, ordered after it by WaitFence, cannot
// complete either, and the caller never blocked; once the test signals,
// both complete in order.
func TestWaitFenceIsADeviceSideSemaphoreWait(t *testing.T) {
	b := testBackend(t)
	q1, q2 := testQueue(t, b, 1), testQueue(t, b, 2)

	g := newGate(t, b)

	noop := stream.Op{Name: "noop", Run: func() error { return nil }}
	g.hold(q1) // its next step waits until g.open
	s1, err := q1.Enqueue(noop)
	if err != nil {
		t.Fatal(err)
	}
	f1, _ := q1.Fence()
	if err := q2.WaitFence(f1); err != nil {
		t.Fatal(err)
	}
	q2.mu.Lock()
	pending := len(q2.waits)
	q2.mu.Unlock()
	if pending != 1 {
		t.Fatalf("WaitFence on an unfinished step left %d semaphore waits, want 1", pending)
	}
	s2, err := q2.Enqueue(noop) // returns: the wait is the device's
	if err != nil {
		t.Fatal(err)
	}
	// The step cannot complete while stream 1's is held back.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err = q2.Wait(ctx, stream.Fence{Q: q2, Seq: s2})
	cancel()
	if err == nil || q1.Completed() >= s1 {
		t.Fatalf("stream 2's step completed (%v) while stream 1's was held back (completed %d of %d)", err, q1.Completed(), s1)
	}
	g.open()
	if err := q2.Wait(context.Background(), stream.Fence{Q: q2, Seq: s2}); err != nil {
		t.Fatal(err)
	}
	if q1.Completed() < s1 {
		t.Fatal("stream 2's step completed before the step it waited for")
	}
	// A fence already passed adds no wait.
	if err := q2.WaitFence(f1); err != nil {
		t.Fatal(err)
	}
	q2.mu.Lock()
	pending = len(q2.waits)
	q2.mu.Unlock()
	if pending != 0 {
		t.Fatalf("WaitFence on a passed fence left %d waits", pending)
	}
}

// gate is a timeline semaphore only the test signals: a queue's next
// submission can be made to wait on it (hold), so its work stays queued
// until open, whatever the machine's speed.
type gate struct {
	t    testing.TB
	b    *Backend
	sem  uint64
	done bool
}

// newGate makes a gate; the test's cleanup opens it if the test did not
// (registered after the device, so it runs before the device's Close,
// which would wait for the held work forever) and destroys it.
func newGate(t testing.TB, b *Backend) *gate {
	t.Helper()
	d := b.dev
	g := &gate{t: t, b: b}
	tci := &vkSemaphoreTypeCreateInfo{SType: stSemaphoreTypeCreateInfo, SemaphoreType: semaphoreTypeTimeline}
	sci := &vkSemaphoreCreateInfo{SType: stSemaphoreCreateInfo, PNext: unsafe.Pointer(tci)}
	if err := check("vkCreateSemaphore", call(d.fn.CreateSemaphore, d.h, uintptr(unsafe.Pointer(sci)), 0, uintptr(unsafe.Pointer(&g.sem)))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !g.done {
			g.open()
		}
		// Nothing waits on it once the held steps completed.
		if err := b.WaitOutsideStreams(); err != nil {
			t.Error(err)
		}
		call(d.fn.DestroySemaphore, d.h, uintptr(g.sem), 0)
	})
	return g
}

// hold makes q's next submission wait for the gate.
func (g *gate) hold(q *Queue) {
	q.mu.Lock()
	q.waits = append(q.waits, semWait{sem: g.sem, value: 1})
	q.mu.Unlock()
}

// open signals the gate: the held steps may run.
func (g *gate) open() {
	g.t.Helper()
	g.done = true
	si := &vkSemaphoreSignalInfo{SType: stSemaphoreSignalInfo, Semaphore: g.sem, Value: 1}
	if err := check("vkSignalSemaphore", call(g.b.dev.fn.SignalSemaphore, g.b.dev.h, uintptr(unsafe.Pointer(si)))); err != nil {
		g.t.Fatal(err)
	}
}

func testBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := NewBackend(Options{Validation: validationInstalled()})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		for _, m := range b.ValidationMessages() {
			t.Errorf("validation: %s", m)
		}
	})
	return b
}

func testQueue(t *testing.T, b *Backend, index int) *Queue {
	t.Helper()
	q, err := b.NewQueue(index)
	if err != nil {
		t.Fatal(err)
	}
	return q.(*Queue)
}

func validationInstalled() bool {
	_, err := os.Stat("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")
	return err == nil || os.Getenv("CI") == "true"
}
