package vulkan

import (
	"os"
	"strings"
	"testing"
	"unsafe"
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
	bci := &vkBufferCreateInfo{SType: stBufferCreateInfo, Size: 0, Usage: bufferUsageStorage}
	var buf uint64
	call(d.fn.CreateBuffer, d.h, uintptr(unsafe.Pointer(bci)), 0, uintptr(unsafe.Pointer(&buf)))
	if buf != 0 {
		call(d.fn.DestroyBuffer, d.h, uintptr(buf), 0)
	}
	msgs := b.ValidationMessages()
	if len(msgs) == 0 || !strings.Contains(strings.Join(msgs, "\n"), "00912") {
		t.Fatalf("validation messages after a zero-size buffer: %v", msgs)
	}
}
