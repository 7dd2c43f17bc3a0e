package vulkan

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

func stagingBackend(t *testing.T, opts Options) *Backend {
	t.Helper()
	opts.Staging = true
	return testBackendWith(t, opts)
}

// Writes and reads through staging buffers reuse them: twenty transfers of
// 1 MiB, each waited for, allocate at most two staging buffers (one per
// direction in flight), every byte round-trips, and the pool never holds
// more than its bounds.
func TestStagingBuffersAreReusedAcrossTransfers(t *testing.T) {
	be := stagingBackend(t, Options{})
	d := testDevice(t, be)
	ctx := context.Background()
	s := d.DefaultStream()
	buf, err := s.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		want := bytes.Repeat([]byte{byte(i + 1)}, 1<<20)
		if err := buf.Write(ctx, want); err != nil {
			t.Fatal(err)
		}
		got, err := buf.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: the bytes read differ from the bytes written", i)
		}
	}
	made, reused, pooled, pooledBytes := be.stagingCounts()
	if made > 2 || reused < 18 {
		t.Fatalf("20 transfers of 1 MiB allocated %d staging buffers and reused %d times, want at most 2 and at least 18", made, reused)
	}
	if pooled > stagingPoolBuffers || pooledBytes > be.stage.maxBytes {
		t.Fatalf("the pool holds %d buffers, %d bytes; bounds %d, %d", pooled, pooledBytes, stagingPoolBuffers, be.stage.maxBytes)
	}
}

// The pool is bounded: transfers of many sizes leave at most
// stagingPoolBuffers buffers and maxBytes pooled, and a transfer larger
// than maxBytes gets a buffer of its own, freed once its step completed.
func TestTheStagingPoolIsBounded(t *testing.T) {
	be := stagingBackend(t, Options{})
	d := testDevice(t, be)
	ctx := context.Background()
	s := d.DefaultStream()
	big := be.stage.maxBytes + 4096
	buf, err := s.Alloc(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []uint64{1, 100 << 10, 300 << 10, 1 << 20, 3 << 20, 5 << 20, 9 << 20, 17 << 20, 33 << 20, big} {
		n = min(n, big)
		if err := buf.Write(ctx, bytes.Repeat([]byte{0x5a}, int(n))); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// One more step reclaims the last transfer's buffer.
	if err := s.Enqueue("poll", nil, func([]storage.Resource) error { return nil }); err != nil {
		t.Fatal(err)
	}
	_, _, pooled, pooledBytes := be.stagingCounts()
	if pooled > stagingPoolBuffers || pooledBytes > be.stage.maxBytes {
		t.Fatalf("the pool holds %d buffers, %d bytes; bounds %d, %d", pooled, pooledBytes, stagingPoolBuffers, be.stage.maxBytes)
	}
	pages := 1 // buf
	if got := be.Allocations(); got != pages+pooled {
		t.Fatalf("%d device allocations, want %d (the page and %d pooled staging buffers: the %d-byte transfer's own was freed)", got, pages+pooled, pooled, big)
	}
}

// An explicit cleanup reclaims the staging buffer of a stream's last
// transfer though nothing is enqueued after it: back in the pool, so the
// driver holds nothing else once every buffer is freed (found by the
// conformance suite: an idle stream kept it until its next Enqueue, and
// one over the pool's bounds stayed allocated, outside every count).
func TestCleanupReclaimsTheLastTransfersStagingBufferOfAnIdleStream(t *testing.T) {
	be := stagingBackend(t, Options{})
	d := testDevice(t, be)
	ctx := context.Background()
	s := d.DefaultStream()
	buf, err := s.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte{0x3c}, 1<<20)
	if err := buf.Write(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := buf.Read(ctx)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Read: %v (equal %v)", err, bytes.Equal(got, want))
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	if err := d.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, pooled, _ := be.stagingCounts()
	if n := be.Allocations(); n != pooled || pooled == 0 {
		t.Fatalf("after the last transfer, Free and Cleanup: %d device allocations, %d staging buffers pooled; want them equal and the transfer's buffer pooled", n, pooled)
	}
}

// Pooled staging buffers take the heap's budget like pages: an allocation
// refused for it empties the pool and succeeds on its retry.
func TestAPageAllocationRefusedForMemoryEmptiesTheStagingPool(t *testing.T) {
	const capacity = 8 << 20
	be := stagingBackend(t, Options{Capacity: capacity})
	st, err := be.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	q := testQueue(t, be, 0)
	small, err := st.Alloc(be.stage.maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := q.Enqueue(stream.Op{Name: "write", Run: func() error {
		return be.CopyToDevice(q, storage.Resource{Region: small}, make([]byte, be.stage.maxBytes))
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(context.Background(), stream.Fence{Q: q, Seq: seq}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(stream.Op{Name: "poll", Run: func() error { return nil }}); err != nil {
		t.Fatal(err)
	}
	if _, _, pooled, _ := be.stagingCounts(); pooled != 1 {
		t.Fatalf("%d pooled staging buffers after the write, want 1", pooled)
	}
	rest := uint64(capacity) - 2*be.stage.maxBytes + be.stage.maxBytes/2 // fits only without the pooled buffer
	if _, err := st.Alloc(rest); err != nil {
		t.Fatalf("an allocation that fits once the pool is empty: %v", err)
	}
	if _, _, pooled, _ := be.stagingCounts(); pooled != 0 {
		t.Fatalf("%d pooled staging buffers after the refusal and retry, want 0", pooled)
	}
	if _, err := st.Alloc(capacity); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("an allocation past the heap = %v, want ErrOutOfMemory", err)
	}
}
