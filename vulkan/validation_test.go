package vulkan

import (
	"errors"
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// The messenger sees what the layer reports: a buffer of size 0 breaks
// VUID-VkBufferCreateInfo-size-00912, and the message must reach
// ValidationMessages (so the tests that expect none are not vacuous).
func TestValidationMessagesReachTheBackend(t *testing.T) {
	b, err := NewBackend(Options{Validation: true})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no validated Vulkan device: %v", err)
	}
	defer b.Close()
	if m := b.ValidationMessages(); len(m) != 0 {
		t.Fatalf("messages before any misuse: %v", m)
	}
	d := b.dev
	bci := &vk.BufferCreateInfo{SType: vk.StBufferCreateInfo, Size: 0, Usage: vk.BufferUsageStorage}
	var buf uint64
	vk.Call(d.fn.CreateBuffer, d.h, uintptr(unsafe.Pointer(bci)), 0, uintptr(unsafe.Pointer(&buf)))
	if buf != 0 {
		vk.Call(d.fn.DestroyBuffer, d.h, uintptr(buf), 0)
	}
	msgs := b.ValidationMessages()
	if len(msgs) == 0 || !strings.Contains(strings.Join(msgs, "\n"), "00912") {
		t.Fatalf("validation messages after a zero-size buffer: %v", msgs)
	}
}

// A leak is a validation message: the layer's object tracker reports, at
// vkDestroyDevice, every object still alive, so the tests that expect no
// message also prove Close destroyed everything.
func TestALeakedObjectIsReportedAtClose(t *testing.T) {
	b, err := NewBackend(Options{Validation: true})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no validated Vulkan device: %v", err)
	}
	d := b.dev
	bci := &vk.BufferCreateInfo{SType: vk.StBufferCreateInfo, Size: 4096, Usage: vk.BufferUsageStorage}
	var buf uint64
	if err := check("vkCreateBuffer", vk.Call(d.fn.CreateBuffer, d.h, uintptr(unsafe.Pointer(bci)), 0, uintptr(unsafe.Pointer(&buf)))); err != nil {
		t.Fatal(err)
	}
	if m := b.ValidationMessages(); len(m) != 0 {
		t.Fatalf("messages before Close: %v", m)
	}
	b.Close() // the buffer is never destroyed
	msgs := strings.Join(b.ValidationMessages(), "\n")
	if !strings.Contains(msgs, "VkBuffer") || !strings.Contains(msgs, "not been destroyed") {
		t.Fatalf("no leak reported for a VkBuffer left alive at Close; messages:\n%s", msgs)
	}
}

// A lost device poisons the backend: later allocations and submissions
// fail with the poison (matching storage.ErrDevicePoisoned), and Close
// still releases what it can without reporting the poison again.
func TestDeviceLostPoisonsTheBackend(t *testing.T) {
	b, err := NewBackend(Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	st, err := b.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.NewQueue(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Alloc(4096); err != nil {
		t.Fatal(err)
	}
	lost := &Error{Op: "vkQueueSubmit", Code: vk.ErrorDeviceLost}
	b.notePoison(lost)
	b.notePoison(&Error{Op: "vkWaitSemaphores", Code: vk.ErrorDeviceLost}) // the first is kept
	if got := b.Poisoned(); got != lost {
		t.Fatalf("Poisoned = %v, want the first loss", got)
	}
	if _, err := st.Alloc(4096); !errors.Is(err, storage.ErrDevicePoisoned) {
		t.Fatalf("Alloc on a poisoned backend = %v", err)
	}
	if _, err := q.Enqueue(stream.Op{Name: "x", Run: func() error { return nil }}); !errors.Is(err, storage.ErrDevicePoisoned) {
		t.Fatalf("Enqueue on a poisoned backend = %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close of a poisoned backend = %v, want nil (Poisoned reports it)", err)
	}
}
