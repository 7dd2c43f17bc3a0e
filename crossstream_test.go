package gpumem

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumem/gpumem/storage"
)

// newGate returns a channel gated ops wait on and the function opening it.
// The gate also opens when the test ends, before the device closes, so a
// failing test does not leave an op blocked in Close.
func newGate(t *testing.T) (<-chan struct{}, func()) {
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	return gate, release
}

func twoStreams(t *testing.T, opts ...Option) (*Device, *Stream, *Stream) {
	t.Helper()
	d := openHost(t, opts...)
	b, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	return d, d.DefaultStream(), b
}

// design §12.7 scenario 64: a buffer of A used by an op on B and freed at
// once stays non-free until B's fence passes; Cleanup drains it.
func TestBufferFreedWhileAnotherStreamUsesItStaysReservedUntilCleanupDrains(t *testing.T) {
	d, a, b := twoStreams(t)
	buf := mustAlloc(t, a, 4*kib)
	mustWrite(t, buf, pattern(4*kib, 64))
	if err := a.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate, release := newGate(t)
	var seen atomic.Value
	err := b.Enqueue("gated read", []Use{{Buffer: buf, Access: Read}}, func(res []storage.Resource) error {
		<-gate
		seen.Store(string(res[0].Bytes))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	desc := buf.h.Descriptor()
	loc := buf.h.Location()
	mustFree(t, buf)
	if desc.IsFree() {
		t.Fatal("slice free while B's op using it has not run")
	}
	// The user freed it: not in use, but held back for B (issue 25).
	if st := d.Stats(); st.BytesInUse != 0 || st.BytesPendingFree != 4*kib {
		t.Fatalf("BytesInUse = %d, BytesPendingFree = %d; want 0 and the freed buffer's 4 KiB", st.BytesInUse, st.BytesPendingFree)
	}
	// A's next allocation of the same size must not land on the held slice.
	next := mustAlloc(t, a, 4*kib)
	if next.h.Location() == loc {
		t.Fatalf("new allocation placed at %v, the slice B still reads", loc)
	}
	mustWrite(t, next, pattern(4*kib, 1)) // must not reach B's view
	if err := a.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	release()
	mustCleanup(t, d)
	if !desc.IsFree() {
		t.Fatal("slice still held after Cleanup drained B's deferred uses")
	}
	if st := d.Stats(); st.BytesInUse != 4*kib || st.BytesPendingFree != 0 {
		t.Fatalf("after Cleanup: BytesInUse = %d, BytesPendingFree = %d; want only the new buffer's 4 KiB, nothing pending", st.BytesInUse, st.BytesPendingFree)
	}
	if got, _ := seen.Load().(string); got != string(pattern(4*kib, 64)) {
		t.Fatal("B's op read bytes other than the buffer's")
	}
}

func TestForeignUseIsReleasedByTheUsingStreamOnceItsOpCompleted(t *testing.T) {
	_, a, b := twoStreams(t)
	buf := mustAlloc(t, a, 4*kib)
	if err := b.Enqueue("read", []Use{{Buffer: buf, Access: Read}}, func([]storage.Resource) error { return nil }); err != nil {
		t.Fatal(err)
	}
	desc := buf.h.Descriptor()
	mustFree(t, buf)
	if err := b.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !desc.IsFree() {
		t.Fatal("slice still held after B synchronized past its use")
	}
}

// X1: an op on B using A's buffer runs after A's pending op on it.
func TestOpOnAnotherStreamWaitsForTheOwnersPendingWrite(t *testing.T) {
	_, a, b := twoStreams(t)
	buf := mustAlloc(t, a, 64)
	gate, release := newGate(t)
	var written atomic.Bool
	err := a.Enqueue("gated write", []Use{{Buffer: buf, Access: Write}}, func(res []storage.Resource) error {
		<-gate
		copy(res[0].Bytes, pattern(64, 7))
		written.Store(true)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var sawWrite atomic.Bool
	var got atomic.Value
	err = b.Enqueue("reader", []Use{{Buffer: buf, Access: Read}}, func(res []storage.Resource) error {
		sawWrite.Store(written.Load())
		got.Store(string(res[0].Bytes))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := b.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !sawWrite.Load() || got.Load().(string) != string(pattern(64, 7)) {
		t.Fatal("B's op ran before A's pending write on the buffer")
	}
}

// X2: the owner's next op on a buffer runs after another stream's use.
func TestOwnersNextOpWaitsForAnotherStreamsPendingRead(t *testing.T) {
	_, a, b := twoStreams(t)
	buf := mustAlloc(t, a, 64)
	mustWrite(t, buf, pattern(64, 1))
	if err := a.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate, release := newGate(t)
	var got atomic.Value
	err := b.Enqueue("gated reader", []Use{{Buffer: buf, Access: Read}}, func(res []storage.Resource) error {
		<-gate
		got.Store(string(res[0].Bytes))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, buf, pattern(64, 2))
	release()
	wantBytes(t, buf, pattern(64, 2)) // Read waits for B's use too
	if got.Load().(string) != string(pattern(64, 1)) {
		t.Fatal("A's write overtook B's earlier read of the buffer")
	}
}

// Two streams other than the owner using one buffer are ordered too: C's
// read runs after B's earlier pending write.
func TestThirdStreamWaitsForAnotherForeignStreamsPendingWrite(t *testing.T) {
	d, a, b := twoStreams(t)
	c, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	buf := mustAlloc(t, a, 64)
	mustWrite(t, buf, pattern(64, 1))
	if err := a.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate, release := newGate(t)
	err = b.Enqueue("gated write", []Use{{Buffer: buf, Access: Write}}, func(res []storage.Resource) error {
		<-gate
		copy(res[0].Bytes, pattern(64, 2))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Value
	err = c.Enqueue("reader", []Use{{Buffer: buf, Access: Read}}, func(res []storage.Resource) error {
		got.Store(string(res[0].Bytes))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if err := c.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Load().(string) != string(pattern(64, 2)) {
		t.Fatal("C's read overtook B's earlier write of A's buffer")
	}
}

// A slice freed while its old buffer's op is still pending on the owner is
// reused in stream order; another stream's first op on the new buffer must
// still wait for that pending op (X1), or the old op would overwrite it.
func TestOtherStreamsFirstUseOfReusedSliceWaitsForTheOwnersPendingOps(t *testing.T) {
	_, a, b := twoStreams(t)
	old := mustAlloc(t, a, 4*kib)
	loc := old.h.Location()
	gate, release := newGate(t)
	var oldDone atomic.Bool
	err := a.Enqueue("gated old write", []Use{{Buffer: old, Access: Write}}, func(res []storage.Resource) error {
		<-gate
		copy(res[0].Bytes, pattern(4*kib, 1))
		oldDone.Store(true)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, old)
	fresh := mustAlloc(t, a, 4*kib)
	if fresh.h.Location() != loc {
		t.Fatalf("fresh buffer at %v, not on the freed slice %v: the scenario needs the reuse", fresh.h.Location(), loc)
	}
	a.d.mu.Lock()
	cursor, err := a.mem.Cursor(fresh.h)
	completed := a.q.Completed()
	a.d.mu.Unlock()
	if err != nil || cursor <= completed {
		t.Fatalf("fresh buffer's cursor %d (err %v) does not cover the pending op (completed %d)", cursor, err, completed)
	}
	var sawOld atomic.Bool
	err = b.Enqueue("new write", []Use{{Buffer: fresh, Access: Write}}, func(res []storage.Resource) error {
		sawOld.Store(oldDone.Load())
		copy(res[0].Bytes, pattern(4*kib, 2))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	release()
	wantBytes(t, fresh, pattern(4*kib, 2))
	if !sawOld.Load() {
		t.Fatal("B's write to the fresh buffer ran before A's pending op on the reused slice")
	}
}

// X1 at Launch: graph on A reads B's buffer; B's pending write is not waited for.
func TestGraphLaunchWaitsForTheOwnersPendingWrite(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	bs, _ := d.NewStream()
	x := mustAlloc(t, bs, 64)
	mustWrite(t, x, []byte{1})
	if err := bs.Synchronize(bg); err != nil {
		t.Fatal(err)
	}
	var seen byte
	g, err := a.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("read", []Use{{Buffer: x, Access: Read}}, func(r []storage.Resource) error { seen = r[0].Bytes[0]; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gate := make(chan struct{})
	_ = bs.Enqueue("block", nil, func([]storage.Resource) error { <-gate; return nil })
	mustWrite(t, x, []byte{2}) // B's write, queued behind the gate
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	done := a.q.Completed()
	fence, _ := a.q.Fence()
	close(gate)
	_ = a.Synchronize(bg)
	_ = bs.Synchronize(bg)
	if done >= fence.Seq {
		t.Fatalf("launch ran (seen %d) before B's earlier write to the buffer: no X1 wait at Launch", seen)
	}
}

// X2 at Launch: graph on A reads buffer of B; B's next write does not wait.
func TestOwnersNextWriteWaitsForALaunchedGraphsRead(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	bs, _ := d.NewStream()
	x := mustAlloc(t, bs, 64)
	mustWrite(t, x, []byte{1})
	_ = bs.Synchronize(bg)
	var seen byte
	g, err := a.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("read", []Use{{Buffer: x, Access: Read}}, func(r []storage.Resource) error { seen = r[0].Bytes[0]; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gate := make(chan struct{})
	_ = a.Enqueue("block", nil, func([]storage.Resource) error { <-gate; return nil })
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, x, []byte{9}) // B writes after A's launch reads (program order)
	time.Sleep(50 * time.Millisecond)
	close(gate)
	_ = a.Synchronize(bg)
	_ = bs.Synchronize(bg)
	if seen != 1 {
		t.Fatalf("launched read saw %d: B's later write ran before it (no X2 note for read uses at Launch)", seen)
	}
}

func TestLaunchNotesAreDroppedWhenTheGraphCloses(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	b, _ := d.NewStream()
	x := mustAlloc(t, a, 64)
	g, err := b.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		_ = g.Launch(bg)
	}
	_ = b.Synchronize(bg)
	_ = g.Close()
	mustFree(t, x)
	mustCleanup(t, d)
	d.mu.Lock()
	n := len(d.foreign[x.h.Descriptor()])
	d.mu.Unlock()
	if n > 0 {
		t.Fatalf("after 1000 launches, sync, graph close, free and cleanup, d.foreign still holds %d fences for the freed buffer", n)
	}
}
