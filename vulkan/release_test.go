package vulkan

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// gatedDevice opens a gpumem device on a validated backend with opts.
func gatedDevice(t *testing.T, opts Options) (*gpumem.Device, *Backend) {
	t.Helper()
	b := testBackendWith(t, opts)
	return testDevice(t, b), b
}

// forTransferPaths runs f once with Write and Read through the pages'
// mappings where the device has them ("mapped"; on a discrete GPU they go
// through staging buffers there too) and once through staging buffers
// (Options.Staging, the path a discrete GPU takes).
func forTransferPaths(t *testing.T, f func(t *testing.T, opts Options)) {
	for _, staging := range []bool{false, true} {
		name := "mapped"
		if staging {
			name = "staging"
		}
		t.Run(name, func(t *testing.T) { f(t, Options{Staging: staging}) })
	}
}

// A free waits only for the work that uses the allocation: with another
// stream's step held back (it waits on a semaphore only the test signals),
// freeing a buffer and cleaning up gives its page back before Cleanup
// returns: BytesAllocated and BytesReserved are 0, and the driver holds no
// VkDeviceMemory, the staging buffers Write and Read went through included
// (Cleanup empties the pool: nothing uses them). (Before, a free waited
// for every queue's issued work and the freed memory went back at a later
// Flush; and the pooled staging buffers stayed until Close.)
func TestCleanupGivesBackWhatNoQueuedWorkUses(t *testing.T) {
	forTransferPaths(t, func(t *testing.T, opts Options) {
		d, b := gatedDevice(t, opts)
		ctx := context.Background()
		sA := d.DefaultStream()
		sB, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		g := newGate(t, b)
		x, err := sA.Alloc(ctx, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Write(ctx, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Read(ctx); err != nil { // stream A is idle after
			t.Fatal(err)
		}
		if made, _, _, _ := b.stagingCounts(); opts.Staging && made == 0 {
			t.Fatal("Write and Read made no staging buffer: the test proves nothing about them")
		}
		qB := sB.Queue().(*queue)
		g.hold(qB)
		if err := sB.Enqueue("held", nil, func([]storage.Resource) error { return nil }); err != nil {
			t.Fatal(err)
		}
		held := qB.Issued()
		if err := x.Free(); err != nil {
			t.Fatal(err)
		}
		if err := d.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		st := d.Stats()
		if st.BytesAllocated != 0 || st.BytesReserved != 0 || b.allocations() != 0 {
			_, _, pooled, _ := b.stagingCounts()
			t.Fatalf("after Free and Cleanup: BytesAllocated %d, BytesReserved %d, %d device allocations (%d pooled staging buffers); want 0, 0, 0",
				st.BytesAllocated, st.BytesReserved, b.allocations(), pooled)
		}
		if qB.Completed() >= held {
			t.Fatal("stream B's held step completed: the test proves nothing")
		}
		g.open()
		if err := sB.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		// The pool refills on demand.
		y, err := sA.Alloc(ctx, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte{7}, 1<<20)
		if err := y.Write(ctx, want); err != nil {
			t.Fatal(err)
		}
		if got, err := y.Read(ctx); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Write and Read after the Cleanup: %v (bytes equal: %v)", err, bytes.Equal(got, want))
		}
	})
}

// A buffer freed while a step that uses it is queued goes back after that
// step: the device holds the page's release, Cleanup waits for the step
// with the device lock released, and when it returns the page is freed,
// and so is the staging buffer the Write went through.
func TestCleanupGivesBackWhatQueuedWorkUsedOnceItCompleted(t *testing.T) {
	forTransferPaths(t, func(t *testing.T, opts Options) {
		d, b := gatedDevice(t, opts)
		ctx := context.Background()
		s := d.DefaultStream()
		add, err := b.LoadShipped(KernelAddU32)
		if err != nil {
			t.Fatal(err)
		}
		const n = 1 << 18
		x, err := s.Alloc(ctx, 4*n)
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Write(ctx, make([]byte, 4*n)); err != nil {
			t.Fatal(err)
		}
		g := newGate(t, b)
		q := s.Queue().(*queue)
		g.hold(q)
		err = Enqueue(s, "add", []gpumem.Use{{Buffer: x, Access: gpumem.ReadWrite}}, func(op *Op) error {
			return op.Dispatch(add, GroupsFor(n, 64), []Binding{Use(0)}, Push(uint32(n), uint32(1)))
		})
		if err != nil {
			t.Fatal(err)
		}
		held := q.Issued()
		if err := x.Free(); err != nil {
			t.Fatal(err)
		}
		if st := d.Stats(); st.BytesAllocated == 0 {
			t.Fatal("the page went back while a queued dispatch used it")
		}
		done := make(chan error, 1)
		go func() { done <- d.Cleanup(ctx) }()
		g.open() // Cleanup may be waiting for the step, or not yet
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if q.Completed() < held {
			t.Fatalf("Cleanup returned before the step that used the page (completed %d of %d)", q.Completed(), held)
		}
		st := d.Stats()
		if st.BytesAllocated != 0 || st.BytesReserved != 0 || b.allocations() != 0 {
			_, _, pooled, _ := b.stagingCounts()
			t.Fatalf("after the step and Cleanup: BytesAllocated %d, BytesReserved %d, %d device allocations (%d pooled staging buffers); want 0, 0, 0",
				st.BytesAllocated, st.BytesReserved, b.allocations(), pooled)
		}
	})
}

// At the storage: an allocation a queued step uses stays allocated through
// Flush and Release while the step is held back, and goes back once it
// completes without another call (the releaser waits on the queue's
// semaphore); one that step does not use goes back at Release.
func TestAFreeWaitsForTheStepsThatUseTheAllocationOnly(t *testing.T) {
	b := testBackend(t)
	st, err := b.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	q := testQueue(t, b, 0)
	g := newGate(t, b)
	const size = 1 << 20
	src, err := st.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := st.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	other, err := st.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	res := func(r storage.Region) storage.Resource { return storage.Resource{Region: r} }
	g.hold(q)
	if err := b.CopyOnDevice(q, res(src), res(dst)); err != nil {
		t.Fatal(err)
	}
	f, err := q.Fence() // submits the copy, held back
	if err != nil {
		t.Fatal(err)
	}
	st.Dealloc(src.ID)
	st.Dealloc(other.ID)
	st.Flush()
	b.Release()
	if got := st.BytesAllocated(); got != 2*size {
		t.Fatalf("BytesAllocated %d with the copy held back, want %d (dst, and src the copy reads)", got, 2*size)
	}
	if q.Completed() >= f.Seq {
		t.Fatal("the held copy completed: the test proves nothing")
	}
	g.open()
	if err := q.Wait(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	// The releaser frees src on its own; bound the wait only so that a
	// lost free fails instead of hanging.
	for deadline := time.Now().Add(30 * time.Second); st.BytesAllocated() != size; {
		if time.Now().After(deadline) {
			t.Fatalf("BytesAllocated %d long after the copy completed, want %d: nothing freed the source", st.BytesAllocated(), size)
		}
		time.Sleep(time.Millisecond)
	}
	st.Dealloc(dst.ID)
	st.Flush()
	b.Release()
	if got := st.BytesAllocated(); got != 0 {
		t.Fatalf("BytesAllocated %d after Release, want 0", got)
	}
}

// An allocation a CommandGraph recorded a command on stays allocated after
// its free while the graph exists (it may be launched again), and goes
// back once the graph is closed.
func TestAFreeWaitsForTheGraphsThatRecordedTheAllocation(t *testing.T) {
	b := testBackend(t)
	st, err := b.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	q := testQueue(t, b, 0)
	const size = 64 << 10
	r, err := st.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.BeginCapture(1); err != nil {
		t.Fatal(err)
	}
	_, err = q.Enqueue(stream.Op{Name: "fill", Run: func() error {
		return b.CopyToDevice(q, storage.Resource{Region: r}, make([]byte, size))
	}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := q.EndCapture(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Replay(e); err != nil {
		t.Fatal(err)
	}
	f, _ := q.Fence()
	if err := q.Wait(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	st.Dealloc(r.ID)
	st.Flush()
	b.Release()
	if got := st.BytesAllocated(); got != size {
		t.Fatalf("BytesAllocated %d with the graph alive, want %d", got, size)
	}
	if err := e.(*commandGraph).Close(); err != nil {
		t.Fatal(err)
	}
	b.Release()
	if got := st.BytesAllocated(); got != 0 {
		t.Fatalf("BytesAllocated %d after the graph closed and Release, want 0", got)
	}
}

// Release after Close does nothing and does not fail; Close freed all.
func TestReleaseAfterCloseIsANoOp(t *testing.T) {
	b := testBackend(t)
	st, err := b.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	st.Dealloc(r.ID)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.Release()
	if n := b.allocations(); n != 0 || st.BytesAllocated() != 0 {
		t.Fatalf("after Close: %d allocations, BytesAllocated %d", n, st.BytesAllocated())
	}
	if _, err := st.Alloc(4096); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc after Close = %v, want ErrClosed", err)
	}
}
