package vulkan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
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
	if got := be.allocations(); got != pages+pooled {
		t.Fatalf("%d device allocations, want %d (the page and %d pooled staging buffers: the %d-byte transfer's own was freed)", got, pages+pooled, pooled, big)
	}
}

// Pooled staging buffers take their heap's budget like pages. Where they
// share the pages' heap (lavapipe, integrated GPUs), a page allocation
// refused by that heap's budget empties the pool and succeeds on its
// retry. Where they do not (a discrete GPU: staging buffers in the host's
// heap, pages in the device's; Options.Capacity bounds each heap), the
// pooled buffer takes nothing from the page heap, so the same page fits
// without a refusal, and a page the heap refuses leaves the pool alone:
// emptying it would make no room (stagingToTrim, whose test covers
// NVIDIA's memory types here on lavapipe).
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
	page, err := be.lookup(storage.Resource{Region: small}, "test")
	if err != nil {
		t.Fatal(err)
	}
	types := be.Info().MemoryTypes
	pageHeap, stagingHeap := types[page.typ].Heap, pooledHeaps(be)[0]
	shared := pageHeap == stagingHeap
	t.Logf("pages in heap %d, the pooled staging buffer in heap %d", pageHeap, stagingHeap)
	rest := uint64(capacity) - 2*be.stage.maxBytes + be.stage.maxBytes/2 // fits only without the pooled buffer in the page heap
	if _, err := st.Alloc(rest); err != nil {
		t.Fatalf("an allocation that fits once the pool is empty: %v", err)
	}
	wantPooled := 0
	if !shared {
		wantPooled = 1 // nothing was refused: the staging buffer is in another heap
	}
	if _, _, pooled, _ := be.stagingCounts(); pooled != wantPooled {
		t.Fatalf("%d pooled staging buffers after the allocation (pages in heap %d, staging in %d), want %d", pooled, pageHeap, stagingHeap, wantPooled)
	}
	if _, err := st.Alloc(capacity); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("an allocation past the heap = %v, want ErrOutOfMemory", err)
	}
	if _, _, pooled, _ := be.stagingCounts(); pooled != wantPooled {
		t.Fatalf("%d pooled staging buffers after a page refused by heap %d's budget (staging in heap %d), want %d", pooled, pageHeap, stagingHeap, wantPooled)
	}
	if !shared {
		t.Logf("heaps differ here: the refusal left the pool alone; a refusal emptying it is checked where they are shared (lavapipe)")
	}
}

// pooledHeaps returns the heaps of the pooled staging buffers.
func pooledHeaps(be *Backend) []uint32 {
	p := be.stage
	p.mu.Lock()
	defer p.mu.Unlock()
	var hs []uint32
	for _, l := range p.free {
		for _, a := range l {
			hs = append(hs, be.Info().MemoryTypes[a.typ].Heap)
		}
	}
	return hs
}

// The allocation count limit counts pages and staging buffers together,
// whatever their heaps: a page refused by it empties the pool and succeeds
// on its retry, on every device.
func TestAPageRefusedByTheAllocationLimitEmptiesTheStagingPool(t *testing.T) {
	be := stagingBackend(t, Options{MaxAllocations: 3})
	st, err := be.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	q := testQueue(t, be, 0)
	first, err := st.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	seq, err := q.Enqueue(stream.Op{Name: "write", Run: func() error {
		return be.CopyToDevice(q, storage.Resource{Region: first}, make([]byte, 4096))
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
	if _, _, pooled, _ := be.stagingCounts(); pooled != 1 || be.allocations() != 2 {
		t.Fatalf("%d pooled staging buffers, %d device allocations after the write, want 1, 2", pooled, be.allocations())
	}
	for i := range 2 { // the second is refused by the limit, then fits
		if _, err := st.Alloc(4096); err != nil {
			t.Fatalf("page %d of 3 (limit 3, one pooled staging buffer to give back): %v", i+2, err)
		}
	}
	if _, _, pooled, _ := be.stagingCounts(); pooled != 0 || be.allocations() != 3 {
		t.Fatalf("%d pooled staging buffers, %d device allocations after the refusal and retry, want 0, 3", pooled, be.allocations())
	}
	if _, err := st.Alloc(4096); !errors.Is(err, ErrAllocationLimit) || !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("a fourth page = %v, want ErrAllocationLimit (and ErrOutOfMemory)", err)
	}
}

// Which pooled buffers a refusal frees, on NVIDIA's memory types (an H200,
// driver 580: heap 0 device-local, heap 1 the host's; type 4 the BAR
// window, where a staging buffer lands when the host types fail) and on
// lavapipe's one type: a page refused by its heap's budget or the driver's
// VK_ERROR_OUT_OF_DEVICE_MEMORY frees only the buffers in heap 0; the
// allocation count, VK_ERROR_TOO_MANY_OBJECTS or the host's memory frees
// every one; a staging buffer's refusal frees every one in a heap staging
// draws on; on lavapipe, every one.
func TestARefusalFreesThePooledStagingBuffersThatMakeRoomForIt(t *testing.T) {
	nvidia := []MemoryType{
		{Flags: 0, Heap: 1},
		{Flags: vk.MemoryPropertyDeviceLocal, Heap: 0},
		{Flags: vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCoherent, Heap: 1},
		{Flags: vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCoherent | vk.MemoryPropertyHostCached, Heap: 1},
		{Flags: vk.MemoryPropertyDeviceLocal | vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCoherent, Heap: 0},
	}
	lavapipe := []MemoryType{{Flags: vk.MemoryPropertyDeviceLocal | vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCoherent | vk.MemoryPropertyHostCached}}
	budget := &storage.OutOfMemoryError{}
	for _, c := range []struct {
		name  string
		types []MemoryType
		pool  []int // the pooled buffers' memory types
		w     memoryWants
		err   error
		want  []int // the types of the buffers freed
	}{
		{"nvidia page, heap budget", nvidia, []int{3, 2, 4}, pageMemory, fmt.Errorf("heap 0 budget: %w", budget), []int{4}},
		{"nvidia page, driver", nvidia, []int{3, 2, 4}, pageMemory, errors.Join(&Error{Code: vk.ErrorOutOfDeviceMemory}, &Error{Code: vk.ErrorOutOfDeviceMemory}), []int{4}},
		{"nvidia page, host types only pooled", nvidia, []int{3, 3}, pageMemory, budget, nil},
		{"nvidia page, allocation limit", nvidia, []int{3, 2, 4}, pageMemory, fmt.Errorf("x: %w: %w", ErrAllocationLimit, storage.ErrOutOfMemory), []int{2, 3, 4}},
		{"nvidia page, too many objects", nvidia, []int{3, 4}, pageMemory, errors.Join(&Error{Code: vk.ErrorTooManyObjects}), []int{3, 4}},
		{"nvidia page, host memory", nvidia, []int{3, 4}, pageMemory, errors.Join(&Error{Code: vk.ErrorOutOfDeviceMemory}, fmt.Errorf("type 4: %w", &Error{Code: vk.ErrorOutOfHostMemory})), []int{3, 4}},
		{"nvidia staging, heap budget", nvidia, []int{3, 2, 4}, stagingMemory, budget, []int{2, 3, 4}},
		{"lavapipe page, heap budget", lavapipe, []int{0, 0}, pageMemory, budget, []int{0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &Backend{dev: &device{info: DeviceInfo{MemoryTypes: c.types}}, stage: newStagingPool(1 << 30)}
			for i, typ := range c.pool {
				b.stage.out++ // handed out by staging, as keep expects
				if !b.stage.keep(&allocation{size: stagingMinClass << i, typ: typ, pooled: true}) {
					t.Fatal("the pool refused a buffer")
				}
			}
			var got []int
			for _, a := range b.stagingToTrim(c.err, c.w) {
				got = append(got, a.typ)
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Fatalf("freed buffers of types %v, want %v", got, c.want)
			}
			if _, _, pooled, _ := b.stagingCounts(); pooled != len(c.pool)-len(c.want) {
				t.Fatalf("%d pooled after, want %d", pooled, len(c.pool)-len(c.want))
			}
		})
	}
}
