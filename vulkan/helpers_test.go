package vulkan_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/vulkantest"
	"github.com/gpumem/gpumem/vulkan"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// needVulkan skips (fails under CI=true) when err says there is no loader
// or device here (vulkantest.Need).
func needVulkan(t testing.TB, err error) {
	t.Helper()
	vulkantest.Need(t, err)
}

// validated returns opts with the validation layer on when it is
// installed; under CI=true (where .ci/run installs it) it must be.
func validated(t testing.TB, opts vulkan.Options) vulkan.Options {
	t.Helper()
	return vulkantest.Validated(opts)
}

// openBackend opens a validated backend (simulating a discrete GPU where
// $GPUMEM_VULKAN_TEST_DISCRETE=1) and fails the test on any validation
// message, checked after everything the test registered closed.
func openBackend(t testing.TB, opts vulkan.Options) *vulkan.Backend {
	t.Helper()
	b, err := vulkan.NewBackend(validated(t, opts))
	needVulkan(t, err)
	vulkan.SimulateDiscreteIfAsked(b)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Backend.Close: %v", err)
		}
		for _, m := range b.ValidationMessages() {
			t.Errorf("validation: %s", m)
		}
	})
	return b
}

// openDevice opens a gpumem device on a validated backend; Close is the
// test's cleanup (before the backend's validation check).
func openDevice(t testing.TB, opts vulkan.Options, more ...gpumem.Option) (*gpumem.Device, *vulkan.Backend) {
	t.Helper()
	b := openBackend(t, opts)
	d, err := gpumem.OpenBackend(b, more...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Device.Close: %v", err)
		}
	})
	return d, b
}

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		p[i] = byte(x)
	}
	return p
}

func mustAlloc(t testing.TB, s *gpumem.Stream, n uint64) gpumem.Buffer {
	t.Helper()
	b, err := s.Alloc(context.Background(), n)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n, err)
	}
	return b
}

func mustWrite(t testing.TB, b gpumem.Buffer, p []byte) {
	t.Helper()
	if err := b.Write(context.Background(), p); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func wantBytes(t testing.TB, b gpumem.Buffer, want []byte) {
	t.Helper()
	got, err := b.Read(context.Background())
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !bytes.Equal(got[:len(want)], want) {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("byte %d of %d: got %#x, want %#x", i, len(want), got[i], want[i])
			}
		}
	}
}
