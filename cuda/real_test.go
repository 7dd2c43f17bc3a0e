//go:build linux

package cuda

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// envRequireCUDA names the variable that makes the real-driver tests fail instead of skipping when
// no driver is loadable (set it on GPU CI machines).
const envRequireCUDA = "GPUMEM_REQUIRE_CUDA"

// openReal opens device 0 of the real driver (libcuda.so.1, or the path
// GPUMEM_LIBCUDA held when the test binary started), skipping the test when
// none is usable unless GPUMEM_REQUIRE_CUDA=1.
func openReal(t *testing.T) *primaryContext {
	t.Helper()
	path := libraryPath(inheritedLibrary)
	if err := available(path); err != nil {
		if os.Getenv(envRequireCUDA) == "1" {
			t.Fatalf("%s=1 but no usable CUDA driver: %v", envRequireCUDA, err)
		}
		t.Skipf("no usable CUDA driver (%v); set %s=1 to make this a failure", err, envRequireCUDA)
	}
	c, err := openContext(Options{Library: path})
	if err != nil {
		t.Fatalf("Available() succeeded but Open failed: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Logf("device %q, %d bytes, driver %d, features %+v", c.Name(), c.TotalMem(), c.DriverVersion(), c.Features())
	return c
}

func TestRealDriverCopiesKernelsAndGraphs(t *testing.T) {
	c := openReal(t)
	if c.Name() == "" || c.TotalMem() == 0 || c.DriverVersion() < 11040 {
		t.Fatalf("device %q with %d bytes, driver %d: want a name, memory and CUDA >= 11.4", c.Name(), c.TotalMem(), c.DriverVersion())
	}
	free, total, err := c.MemGetInfo()
	if err != nil || total != c.TotalMem() || free == 0 || free > total {
		t.Fatalf("MemGetInfo = %d, %d, %v", free, total, err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	const n = 1 << 20
	a, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(a)
	b, err := c.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(b)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i % 251)
	}
	if err := s.CopyHtoD(a, src); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoD(b, a, n); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := s.CopyDtoH(got, b); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("round trip through the device: equal %v, err %v", bytes.Equal(got, src), err)
	}

	m, err := c.LoadModule([]byte(kernelsPTX))
	if err != nil {
		t.Fatalf("loading KernelsPTX: %v", err)
	}
	defer m.Unload()
	add, err := m.Function(kernelAddOne)
	if err != nil {
		t.Fatal(err)
	}
	fill, err := m.Function(kernelFillU8)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := Linear(n, 256)
	if err := s.Launch(fill, cfg, a, uint64(n-1), uint32(0x41)); err != nil {
		t.Fatal(err)
	}
	if err := s.Launch(add, cfg, a, uint64(n)); err != nil {
		t.Fatal(err)
	}
	e, err := s.Fence()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if done, err := e.Query(); !done || err != nil {
		t.Fatalf("Query after Synchronize = %v, %v", done, err)
	}
	e.Destroy()
	if err := s.CopyDtoH(got, a); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte{0x42}, n)
	want[n-1] = src[n-1] + 1
	if !bytes.Equal(got, want) {
		t.Fatalf("kernels: got %v... %v, want %v... %v", got[:4], got[n-4:], want[:4], want[n-4:])
	}

	if err := s.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	// The device executor allocates and frees on its own thread while the
	// stream captures in thread-local mode.
	p, err := c.Alloc(4096)
	if err != nil {
		t.Fatalf("Alloc during a capture: %v", err)
	}
	if err := s.Launch(add, cfg, a, uint64(n)); err != nil {
		t.Fatal(err)
	}
	if st, err := s.CaptureStatus(); st != captureActive || err != nil {
		t.Fatalf("CaptureStatus = %v, %v", st, err)
	}
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Free(p); err != nil {
		t.Fatal(err)
	}
	x, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	g.Destroy()
	for i := 0; i < 3; i++ {
		if err := s.LaunchGraph(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	x.Destroy()
	s.CopyDtoH(got, a)
	if got[0] != 0x45 {
		t.Fatalf("after 3 replays byte 0 = %#x, want 0x45", got[0])
	}

	if c.Features().AsyncMemset {
		if err := s.MemsetD8(b, 0x7F, n); err != nil {
			t.Fatal(err)
		}
		s.CopyDtoH(got, b)
		if !bytes.Equal(got, bytes.Repeat([]byte{0x7F}, n)) {
			t.Fatal("memset did not land")
		}
	}

	if _, err := c.Alloc(c.TotalMem() * 4); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Alloc(4x the device) = %v, want ErrOutOfMemory", err)
	}
	if err := s.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); !errors.Is(err, ErrCaptureInvalidated) {
		t.Fatalf("Synchronize while capturing: %v, want ErrCaptureInvalidated", err)
	}
	if _, err := s.EndCapture(); !errors.Is(err, ErrCaptureInvalidated) {
		t.Fatalf("EndCapture after invalidation: %v, want ErrCaptureInvalidated", err)
	}
}

func TestRealDriverVirtualMemory(t *testing.T) {
	c := openReal(t)
	if !c.Features().VirtualMemory {
		t.Skip("driver or device without virtual memory management")
	}
	gran, _, err := c.AllocationGranularity()
	if err != nil || gran == 0 {
		t.Fatalf("AllocationGranularity = %d, %v", gran, err)
	}
	base, err := c.ReserveAddress(2*gran, 0)
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.CreatePhysical(gran)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Map(base+uintptr(gran), gran, h); err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("through a VMM mapping")
	if err := s.CopyHtoD(base+uintptr(gran), data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := s.CopyDtoH(got, base+uintptr(gran)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("VMM round trip %q, %v", got, err)
	}
	for _, step := range []func() error{
		func() error { return c.Unmap(base+uintptr(gran), gran) },
		func() error { return c.ReleasePhysical(h) },
		func() error { return c.FreeAddress(base, 2*gran) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}
