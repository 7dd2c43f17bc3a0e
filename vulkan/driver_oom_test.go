package vulkan

import (
	"errors"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// What lavapipe answers vkAllocateMemory, asked directly (no backend, no
// validation layer: the layer would rightly flag sizes past the heap): it
// keeps no account of its heap, so allocations past the heap's size
// succeed (they are host virtual memory, untouched), and it returns
// VK_ERROR_OUT_OF_DEVICE_MEMORY only when the host refuses the pages (one
// allocation far past the machine's memory). So on lavapipe the backend's
// heap budget is what refuses (TestFillingTheHeapEndsInErrOutOfMemory...),
// and a driver's refusal is still checked to be an *Error matching
// storage.ErrOutOfMemory where the host gives one.
//
// Measured on Mesa 22.3.6 (lavapipe, 2 GiB heap, maxMemoryAllocationSize 2
// GiB, 23 GiB host): three 1 GiB allocations, 2 GiB + 4 KiB and 4 GiB all
// succeeded with the resident set unchanged; 64 GiB and 1 TiB returned
// VK_ERROR_OUT_OF_DEVICE_MEMORY (-2).
func TestLavapipeRefusesOnlyWhatTheHostCannotGive(t *testing.T) {
	b, err := NewBackend(Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	defer b.Close()
	if !strings.Contains(b.Info().Name, "llvmpipe") {
		t.Skipf("device %q is not lavapipe: this pins lavapipe's behaviour", b.Info().Name)
	}
	d := b.dev
	typ := uint32(pageMemory.candidates(d.info.MemoryTypes, ^uint32(0))[0])
	heap := d.info.Heaps[d.info.MemoryTypes[typ].Heap].Size
	alloc := func(size uint64) (uint64, error) {
		mai := &vk.MemoryAllocateInfo{SType: vk.StMemoryAllocateInfo, AllocationSize: size, MemoryTypeIndex: typ}
		var mem uint64
		err := check("vkAllocateMemory", vk.Call(d.fn.AllocateMemory, d.h, uintptr(unsafe.Pointer(mai)), 0, uintptr(unsafe.Pointer(&mem))))
		return mem, err
	}
	var mems []uint64
	defer func() {
		for _, m := range mems {
			vk.Call(d.fn.FreeMemory, d.h, uintptr(m), 0)
		}
	}()
	half := heap/2 + 32<<20
	for i := range 2 {
		m, err := alloc(half)
		if err != nil {
			t.Fatalf("allocation %d of %d bytes (heap %d): %v; lavapipe used to hand out past its heap", i+1, half, heap, err)
		}
		mems = append(mems, m)
	}
	t.Logf("lavapipe gave %d bytes in two allocations from a heap of %d", 2*half, heap)
	const huge = 1 << 40
	m, err := alloc(huge)
	if err == nil {
		mems = append(mems, m)
		t.Logf("this host gave a %d-byte allocation too (overcommit): no driver refusal to check here", uint64(huge))
		return
	}
	var ve *Error
	if !errors.As(err, &ve) || ve.Code != vk.ErrorOutOfDeviceMemory || !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("a %d-byte allocation = %v, want VK_ERROR_OUT_OF_DEVICE_MEMORY matching storage.ErrOutOfMemory", uint64(huge), err)
	}
}
