package vulkan_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/vulkan"
)

// Filling the device's heap ends in ErrOutOfMemory — on lavapipe from the
// budget, before the driver is asked: lavapipe would hand out past its
// heap (TestLavapipeRefusesOnlyWhatTheHostCannotGive); after frees and
// a cleanup nothing is allocated, the device allocates and computes again,
// and Close leaves nothing behind (the validation layer reports leaked
// objects at vkDestroyDevice).
func TestFillingTheHeapEndsInErrOutOfMemoryAndTheDeviceRecovers(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	heap := b.Properties().MaxMemory
	s := d.DefaultStream()
	chunk := heap / 10
	var held []gpumem.Buffer
	var err error
	for range 20 {
		var buf gpumem.Buffer
		buf, err = s.Alloc(context.Background(), chunk)
		if err != nil {
			break
		}
		held = append(held, buf)
	}
	if !errors.Is(err, gpumem.ErrOutOfMemory) {
		t.Fatalf("after %d allocations of %d bytes (heap %d): %v, want ErrOutOfMemory", len(held), chunk, heap, err)
	}
	if len(held) < 5 {
		t.Fatalf("only %d allocations of a tenth of the heap fitted", len(held))
	}
	var budget *storage.OutOfMemoryError
	var driver *vulkan.Error
	if strings.Contains(b.Info().Name, "llvmpipe") && (!errors.As(err, &budget) || errors.As(err, &driver)) {
		t.Fatalf("lavapipe's refusal %v: want the budget's *storage.OutOfMemoryError, not the driver's", err)
	}
	allocs := vulkan.Allocations(b)
	if allocated := d.Stats().BytesAllocated; allocated < uint64(len(held))*chunk || allocated > heap {
		t.Fatalf("BytesAllocated %d with %d buffers of %d held (heap %d)", allocated, len(held), chunk, heap)
	}
	for _, buf := range held {
		if err := buf.Free(); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.BytesAllocated != 0 || st.BytesReserved != 0 || vulkan.Allocations(b) != 0 {
		t.Fatalf("after freeing all and a cleanup: BytesAllocated %d, BytesReserved %d, %d of %d device allocations left",
			st.BytesAllocated, st.BytesReserved, vulkan.Allocations(b), allocs)
	}
	big := mustAlloc(t, s, b.Properties().MaxPageSize)
	add := mustKernel(t, b, vulkan.KernelAddU32)
	small := mustAlloc(t, s, 4096)
	mustWrite(t, small, make([]byte, 4096))
	addOnDevice(t, add, s, small, 5)
	wantBytes(t, small, plusU32(make([]byte, 4096), 5))
	_ = big
}

// The allocation count limit (Options.MaxAllocations standing in for a
// driver's maxMemoryAllocationCount of 4096) refuses with
// ErrAllocationLimit, which is also storage.ErrOutOfMemory.
func TestTheAllocationLimitIsAnOutOfMemoryAnswer(t *testing.T) {
	b := openBackend(t, vulkan.Options{MaxAllocations: 3})
	st, err := b.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	var regions []storage.Region
	for range 3 {
		r, err := st.Alloc(4096)
		if err != nil {
			t.Fatalf("allocation %d of 3: %v", len(regions)+1, err)
		}
		regions = append(regions, r)
	}
	_, err = st.Alloc(4096)
	if !errors.Is(err, vulkan.ErrAllocationLimit) || !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("a fourth allocation under a limit of 3 = %v, want ErrAllocationLimit and ErrOutOfMemory", err)
	}
	if st.BytesAllocated() != 3*4096 {
		t.Fatalf("BytesAllocated %d after a refusal, want %d", st.BytesAllocated(), 3*4096)
	}
	st.Dealloc(regions[0].ID)
	// The queued free is waited for when the next allocation needs it.
	r, err := st.Alloc(4096)
	if err != nil {
		t.Fatalf("after a free: %v", err)
	}
	// So is one a Flush handed to the reaper.
	st.Dealloc(r.ID)
	st.Flush()
	if _, err := st.Alloc(4096); err != nil {
		t.Fatalf("after a flushed free: %v", err)
	}
	if n := vulkan.Allocations(b); n != 3 {
		t.Fatalf("%d device allocations held, want 3", n)
	}
}

func TestDriverErrorsMatchTheStorageSentinels(t *testing.T) {
	oom := &vulkan.Error{Op: "vkAllocateMemory", Code: -2}
	lost := &vulkan.Error{Op: "vkQueueSubmit", Code: -4}
	other := &vulkan.Error{Op: "vkCreateBuffer", Code: -13}
	if !errors.Is(oom, storage.ErrOutOfMemory) || errors.Is(oom, storage.ErrDevicePoisoned) {
		t.Fatalf("%v", oom)
	}
	if !errors.Is(lost, gpumem.ErrDevicePoisoned) || errors.Is(lost, storage.ErrOutOfMemory) {
		t.Fatalf("%v", lost)
	}
	if errors.Is(other, storage.ErrOutOfMemory) || errors.Is(other, storage.ErrDevicePoisoned) {
		t.Fatalf("%v", other)
	}
	if got := oom.Error(); got != "vulkan: vkAllocateMemory: VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)" {
		t.Fatalf("message %q", got)
	}
}

// At the device's capacity (WithCapacity), pages another stream emptied
// serve an Alloc: its make-room gives them back, and the storage drains
// the queued frees before it retries the budget that refused it (found by
// the conformance suite: the pages' bytes stayed taken until the releaser
// freed them, after the retry had failed).
func TestPagesAnotherStreamEmptiedServeAnAllocAtTheDevicesCapacity(t *testing.T) {
	const capacity, size = 8 << 20, 1 << 20
	d, _ := openDevice(t, vulkan.Options{}, gpumem.WithCapacity(capacity))
	ctx := context.Background()
	s0 := d.DefaultStream()
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	var mine, theirs []gpumem.Buffer
	for i := 0; ; i++ {
		s := []*gpumem.Stream{s0, s1}[i%2]
		b, err := s.Alloc(ctx, size)
		if err != nil {
			if !errors.Is(err, gpumem.ErrOutOfMemory) {
				t.Fatalf("Alloc past the capacity: %v, want ErrOutOfMemory", err)
			}
			break
		}
		mustWrite(t, b, pattern(size, byte(i)))
		if s == s0 {
			mine = append(mine, b)
		} else {
			theirs = append(theirs, b)
		}
	}
	for _, b := range mine {
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
	}
	for range mine {
		theirs = append(theirs, mustAlloc(t, s1, size))
	}
	for _, b := range theirs {
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
	}
}
