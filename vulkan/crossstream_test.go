package vulkan

import (
	"context"
	"encoding/binary"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
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
	tci := &vk.SemaphoreTypeCreateInfo{SType: vk.StSemaphoreTypeCreateInfo, SemaphoreType: vk.SemaphoreTypeTimeline}
	sci := &vk.SemaphoreCreateInfo{SType: vk.StSemaphoreCreateInfo, PNext: unsafe.Pointer(tci)}
	if err := check("vkCreateSemaphore", vk.Call(d.fn.CreateSemaphore, d.h, uintptr(unsafe.Pointer(sci)), 0, uintptr(unsafe.Pointer(&g.sem)))); err != nil {
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
		vk.Call(d.fn.DestroySemaphore, d.h, uintptr(g.sem), 0)
	})
	return g
}

// hold makes q's next submission wait for the gate.
func (g *gate) hold(q *queue) {
	q.mu.Lock()
	q.waits = append(q.waits, semWait{sem: g.sem, value: 1})
	q.mu.Unlock()
}

// open signals the gate: the held steps may run.
func (g *gate) open() {
	g.t.Helper()
	g.done = true
	si := &vk.SemaphoreSignalInfo{SType: vk.StSemaphoreSignalInfo, Semaphore: g.sem, Value: 1}
	if err := check("vkSignalSemaphore", vk.Call(g.b.dev.fn.SignalSemaphore, g.b.dev.h, uintptr(unsafe.Pointer(si)))); err != nil {
		g.t.Fatal(err)
	}
}

func testBackend(t *testing.T) *Backend { return testBackendWith(t, Options{}) }

// testBackendWith opens a backend with opts and the validation layer where
// it is installed (simulating a discrete GPU where
// $GPUMEM_VULKAN_TEST_DISCRETE=1, discrete_test.go); the test's cleanup
// closes it and fails on any validation message or a device allocation
// left behind.
func testBackendWith(t *testing.T, opts Options) *Backend {
	t.Helper()
	opts.Validation = validationInstalled()
	b, err := NewBackend(opts)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	if discreteAsked() {
		simulateDiscrete(b)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		if n := b.allocations(); n != 0 {
			t.Errorf("%d device allocations after Close, want 0", n)
		}
		for _, m := range b.ValidationMessages() {
			t.Errorf("validation: %s", m)
		}
	})
	return b
}

// testDevice opens a gpumem device on b; the test's cleanup closes it
// (before b's, registered earlier).
func testDevice(t *testing.T, b *Backend, opts ...gpumem.Option) *gpumem.Device {
	t.Helper()
	d, err := gpumem.OpenBackend(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Device.Close: %v", err)
		}
	})
	return d
}

func testQueue(t *testing.T, b *Backend, index int) *queue {
	t.Helper()
	q, err := b.NewQueue(index)
	if err != nil {
		t.Fatal(err)
	}
	return q.(*queue)
}

func validationInstalled() bool {
	_, err := os.Stat("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")
	return err == nil || os.Getenv("CI") == "true"
}

// Streams on a device with several VkQueues in its compute family get
// distinct queues (round robin), and a cross-stream use is a semaphore wait
// between them: with stream 1's write held back, stream 2's dispatch on the
// same buffer cannot complete, and once the write runs the bytes are
// exactly the written ones plus the dispatch's. On a family of one queue
// (lavapipe: queueCount 1, vulkaninfo's VkQueueFamilyProperties) both
// streams share it and the same ordering is checked there.
func TestStreamsOnDistinctQueuesOrderCrossStreamUsesBySemaphores(t *testing.T) {
	be := testBackendWith(t, Options{Staging: true, Queues: 4})
	d := testDevice(t, be)
	s1 := d.DefaultStream()
	s2, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	q1, q2 := s1.Queue().(*queue), s2.Queue().(*queue)
	family := be.Info().ComputeQueues
	if family >= 2 && q1.hw == q2.hw {
		t.Fatalf("the compute family has %d queues, yet both streams share one", family)
	}
	t.Logf("compute family of %d queue(s); streams on distinct VkQueues: %v", family, q1.hw != q2.hw)
	add, err := be.LoadShipped(KernelAddU32)
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(t, be)
	ctx := context.Background()
	const n = 1 << 16
	x, err := s1.Alloc(ctx, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(want[4*i:], uint32(i*2654435761))
	}
	g.hold(q1)
	if err := x.Write(ctx, want); err != nil { // a staging copy, held back
		t.Fatal(err)
	}
	err = Enqueue(s2, "add", []gpumem.Use{{Buffer: x, Access: gpumem.ReadWrite}}, func(op *Op) error {
		return op.Dispatch(add, GroupsFor(n, 64), []Binding{Use(0)}, Push(uint32(n), uint32(3)))
	})
	if err != nil {
		t.Fatal(err)
	}
	if q2.Completed() >= q2.Issued() {
		t.Fatal("stream 2's dispatch completed while the write it depends on was held back")
	}
	g.open()
	got, err := x.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		w := binary.LittleEndian.Uint32(want[4*i:]) + 3
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != w {
			t.Fatalf("element %d: %#x, want %#x", i, v, w)
		}
	}
}
