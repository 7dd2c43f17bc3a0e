//go:build linux

package cuda

import (
	"bytes"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

func TestOpenWithoutDriverLibraryIsErrNoDriver(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	c, err := openContext(Options{Library: missing})
	if !errors.Is(err, ErrNoDriver) || c != nil {
		t.Fatalf("Open(missing library) = %v, %v; want nil and ErrNoDriver", c, err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the library", err)
	}
	t.Setenv(EnvLibrary, missing)
	if err := Available(); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Available() with GPUMEM_LIBCUDA=%s: %v; want ErrNoDriver", missing, err)
	}
	if _, err := openContext(Options{}); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open(Options{}) with GPUMEM_LIBCUDA=%s: %v; want ErrNoDriver", missing, err)
	}
}

func TestMissingRequiredSymbolIsErrNoDriverNamingIt(t *testing.T) {
	f := buildFake(t, "FAKE_OMIT_GRAPH_LAUNCH")
	c, err := openContext(Options{Library: f.path})
	if !errors.Is(err, ErrNoDriver) || c != nil {
		t.Fatalf("Open(fake without cuGraphLaunch) = %v, %v; want nil and ErrNoDriver", c, err)
	}
	if !strings.Contains(err.Error(), "cuGraphLaunch") {
		t.Errorf("error %q does not name the missing symbol", err)
	}
	if n := len(f.calls(t)); n != 0 {
		t.Errorf("the driver was called %d times although binding failed", n)
	}
}

func TestOptionalSymbolsMissingLeaveFeaturesOff(t *testing.T) {
	f := buildFake(t, "FAKE_NO_VMM", "FAKE_NO_MEMSET", "FAKE_NO_LIBRARY", "FAKE_NO_PARAM_INFO")
	c := f.open(t)
	if got := c.Features(); got != (Features{}) {
		t.Fatalf("Features() = %+v, want all off", got)
	}
	p, err := c.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MemsetD8(p, 1, 64); !errors.Is(err, ErrUnsupported) {
		t.Errorf("MemsetD8 without cuMemsetD8Async: %v, want ErrUnsupported", err)
	}
	vmmCalls := map[string]func() error{
		"AllocationGranularity": func() error { _, _, err := c.AllocationGranularity(); return err },
		"ReserveAddress":        func() error { _, err := c.ReserveAddress(2<<20, 0); return err },
		"FreeAddress":           func() error { return c.FreeAddress(1, 2<<20) },
		"CreatePhysical":        func() error { _, err := c.CreatePhysical(2 << 20); return err },
		"ReleasePhysical":       func() error { return c.ReleasePhysical(1) },
		"Map":                   func() error { return c.Map(1, 2<<20, 1) },
		"Unmap":                 func() error { return c.Unmap(1, 2<<20) },
	}
	for name, call := range vmmCalls {
		if err := call(); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s without VMM symbols: %v, want ErrUnsupported", name, err)
		}
	}
	if n := len(f.named(t, "cuDeviceGetAttribute")); n != 0 {
		t.Errorf("VMM attribute queried %d times although the symbols are missing", n)
	}
}

func TestVirtualMemoryNeedsTheDeviceAttributeToo(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	if got := c.Features(); got != (Features{VirtualMemory: true, AsyncMemset: true, Library: true, ParamInfo: true}) {
		t.Fatalf("Features() on the full fake = %+v, want all on", got)
	}
	if a := f.last(t, "cuDeviceGetAttribute"); a.args["attr"] != "102" || a.args["dev"] != "0" {
		t.Errorf("VMM probe = %v, want attribute 102 of device 0", a)
	}
	c.Close()

	f2 := buildFake(t)
	f2.setAttribute(int32(attrVirtualMemoryManagementSupported), 0)
	c2 := f2.open(t)
	if c2.Features().VirtualMemory {
		t.Fatal("VirtualMemory on although the device reports no VMM support")
	}
	if _, err := c2.ReserveAddress(2<<20, 0); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("ReserveAddress: %v, want ErrUnsupported", err)
	}
}

func TestOpenFollowsEnvLibraryAndQueriesTheDevice(t *testing.T) {
	f := buildFake(t)
	f.setTotalMem(64 << 20)
	t.Setenv(EnvLibrary, f.path)
	if err := Available(); err != nil {
		t.Fatalf("Available() with GPUMEM_LIBCUDA at the fake: %v", err)
	}
	f.logClear()
	c, err := openContext(Options{})
	if err != nil {
		t.Fatalf("Open(Options{}) with GPUMEM_LIBCUDA at the fake: %v", err)
	}
	defer c.Close()
	if c.Name() != "Fake CUDA Device 0" || c.TotalMem() != 64<<20 || c.DriverVersion() != 12040 || c.Ordinal() != 0 {
		t.Fatalf("device = %q, %d bytes, driver %d, ordinal %d", c.Name(), c.TotalMem(), c.DriverVersion(), c.Ordinal())
	}
	if v, err := c.Attribute(attrComputeCapabilityMajor); err != nil || v != 9 {
		t.Fatalf("Attribute(major) = %d, %v; want 9", v, err)
	}
	if a := f.last(t, "cuDeviceGetAttribute"); a.args["attr"] != "75" {
		t.Errorf("Attribute asked for %v, want attr 75", a)
	}
	if in := f.last(t, "cuInit"); in.args["flags"] != "0" || in.rc != 0 {
		t.Errorf("cuInit call = %v", in)
	}
	if r := f.last(t, "cuDevicePrimaryCtxRetain"); r.args["dev"] != "0" {
		t.Errorf("retain = %v, want device 0", r)
	}
	if g := f.last(t, "cuDeviceGetName"); g.args["len"] != "256" {
		t.Errorf("cuDeviceGetName = %v, want a 256-byte buffer", g)
	}
	if n := f.liveCount(t, "ctxrefs"); n != 1 {
		t.Fatalf("primary context references = %d, want 1", n)
	}
	devTID := tidOf(t, c.Executor())
	for _, cl := range f.calls(t) {
		if cl.tid != devTID {
			t.Errorf("%v ran on thread %d, not the device executor's %d", cl, cl.tid, devTID)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.liveCount(t, "ctxrefs"); n != 0 {
		t.Fatalf("primary context references after Close = %d, want 0", n)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Alloc(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc after Close: %v, want ErrClosed", err)
	}
	if _, err := c.NewStream(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NewStream after Close: %v, want ErrClosed", err)
	}
}

func TestOpenWithoutDeviceIsErrNoDriver(t *testing.T) {
	f := buildFake(t)
	c, err := openContext(Options{Library: f.path, Device: 1})
	if !errors.Is(err, ErrNoDriver) || c != nil {
		t.Fatalf("Open(device 1 of 1) = %v, %v; want ErrNoDriver", c, err)
	}
	f.setDeviceCount(0)
	c, err = openContext(Options{Library: f.path})
	var de *DriverError
	if !errors.Is(err, ErrNoDriver) || !errors.As(err, &de) || de.Code != 100 || de.Name != "CUDA_ERROR_NO_DEVICE" {
		t.Fatalf("Open(no device) = %v, %v; want ErrNoDriver wrapping CUDA_ERROR_NO_DEVICE", c, err)
	}
	t.Setenv(EnvLibrary, f.path)
	if err := Available(); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Available() with no device: %v, want ErrNoDriver", err)
	}
	if n := f.liveCount(t, "ctxrefs"); n != 0 {
		t.Fatalf("a failed Open left %d context references", n)
	}
}

func TestAllocFreeAndMemGetInfoAccountExactly(t *testing.T) {
	f := buildFake(t)
	f.setTotalMem(1 << 20)
	c := f.open(t)
	free0, total, err := c.MemGetInfo()
	if err != nil || total != 1<<20 || free0 != 1<<20 {
		t.Fatalf("MemGetInfo = %d, %d, %v; want all of 1 MiB free", free0, total, err)
	}
	p, err := c.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	if a := f.last(t, "cuMemAlloc_v2"); a.args["size"] != "1000" || a.args["ptr"] != hex(p) {
		t.Errorf("cuMemAlloc_v2 = %v, want size 1000 returning %s", a, hex(p))
	}
	if free1, _, _ := c.MemGetInfo(); free1 != free0-1000 {
		t.Errorf("free after allocating 1000 bytes = %d, want %d", free1, free0-1000)
	}
	_, err = c.Alloc(2 << 20)
	var de *DriverError
	if !errors.Is(err, storage.ErrOutOfMemory) || !errors.As(err, &de) ||
		de.Op != "cuMemAlloc_v2" || de.Code != 2 || de.Name != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Fatalf("Alloc(2 MiB of 1 MiB) = %v; want ErrOutOfMemory from cuMemAlloc_v2", err)
	}
	if !strings.Contains(err.Error(), "2097152 bytes") {
		t.Errorf("error %q does not say how much was asked", err)
	}
	if err := c.Free(p); err != nil {
		t.Fatal(err)
	}
	if a := f.last(t, "cuMemFree_v2"); a.args["ptr"] != hex(p) {
		t.Errorf("cuMemFree_v2 = %v, want %s", a, hex(p))
	}
	if err := c.Free(p); !errors.As(err, &de) || de.Code != 1 {
		t.Fatalf("double Free = %v; want CUDA_ERROR_INVALID_VALUE", err)
	}
	if free2, _, _ := c.MemGetInfo(); free2 != free0 {
		t.Errorf("free after Free = %d, want %d", free2, free0)
	}
	if err := c.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if len(f.named(t, "cuCtxSynchronize")) != 1 {
		t.Error("Synchronize did not call cuCtxSynchronize")
	}
}

func TestCopiesMoveRealBytes(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	const n = 4096
	a, _ := c.Alloc(n)
	b, _ := c.Alloc(n)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := s.CopyHtoD(a, src); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyDtoD(b, a, n); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	if err := s.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("bytes changed on the way HtoD, DtoD, DtoH")
	}
	st := hex(s.Handle())
	if cl := f.last(t, "cuMemcpyHtoDAsync_v2"); cl.args["dst"] != hex(a) || cl.args["size"] != "4096" || cl.args["stream"] != st {
		t.Errorf("HtoD = %v, want dst %s size 4096 stream %s", cl, hex(a), st)
	}
	if cl := f.last(t, "cuMemcpyDtoDAsync_v2"); cl.args["dst"] != hex(b) || cl.args["src"] != hex(a) || cl.args["stream"] != st {
		t.Errorf("DtoD = %v, want dst %s src %s stream %s", cl, hex(b), hex(a), st)
	}
	if cl := f.last(t, "cuMemcpyDtoHAsync_v2"); cl.args["src"] != hex(b) || cl.args["size"] != "4096" || cl.args["stream"] != st {
		t.Errorf("DtoH = %v", cl)
	}

	if err := s.MemsetD8(a+100, 0xEE, 50); err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuMemsetD8Async"); cl.args["value"] != "238" || cl.args["size"] != "50" || cl.args["dst"] != hex(a+100) {
		t.Errorf("memset = %v", cl)
	}
	if err := c.CopyDtoD(b, a, n); err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuMemcpyDtoD_v2"); cl.args["dst"] != hex(b) || cl.args["src"] != hex(a) || cl.args["size"] != "4096" {
		t.Errorf("sync DtoD = %v", cl)
	}
	if err := s.CopyDtoH(got, b); err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(src)
	for i := 100; i < 150; i++ {
		want[i] = 0xEE
	}
	if !bytes.Equal(got, want) {
		t.Fatal("memset and synchronous copy did not land")
	}
	// A copy past an allocation's end is refused, not performed.
	var de *DriverError
	if err := s.CopyDtoD(b, a, n+1); !errors.As(err, &de) || de.Code != 1 {
		t.Fatalf("out-of-range copy = %v; want CUDA_ERROR_INVALID_VALUE", err)
	}
	if err := s.CopyHtoD(a, nil); err != nil {
		t.Fatalf("empty copy: %v", err)
	}
}

func TestEveryDriverCallRunsOnItsExecutorWithTheContextCurrent(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s1, _ := c.NewStream()
	s2, _ := c.NewStream()
	devTID, t1, t2 := tidOf(t, c.Executor()), tidOf(t, s1.Executor()), tidOf(t, s2.Executor())
	if devTID == t1 || devTID == t2 || t1 == t2 {
		t.Fatalf("executors share threads: device %d, streams %d and %d", devTID, t1, t2)
	}
	f.logClear()
	var wg sync.WaitGroup
	for _, s := range []*driverStream{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				p, err := c.Alloc(256)
				if err != nil {
					t.Error(err)
					return
				}
				buf := make([]byte, 256)
				s.CopyHtoD(p, buf)
				e, _ := s.Fence()
				e.Synchronize()
				e.Destroy()
				s.Synchronize()
				c.Free(p)
			}
		}()
	}
	wg.Wait()
	for _, cl := range f.calls(t) {
		want := devTID
		switch cl.args["stream"] {
		case hex(s1.Handle()):
			want = t1
		case hex(s2.Handle()):
			want = t2
		}
		if cl.name == "cuEventCreate" || cl.name == "cuEventSynchronize" || cl.name == "cuEventDestroy_v2" {
			if cl.tid != t1 && cl.tid != t2 {
				t.Errorf("%v ran on thread %d, not a stream executor", cl, cl.tid)
			}
			continue
		}
		if cl.tid != want {
			t.Errorf("%v ran on thread %d, want %d", cl, cl.tid, want)
		}
		if cl.rc != 0 {
			t.Errorf("%v failed (201 = no current context)", cl)
		}
	}
	if n := len(f.named(t, "cuMemAlloc_v2")); n != 40 {
		t.Errorf("%d allocations logged, want 40", n)
	}
}

func TestStreamsAreDestroyedByCloseAndByContextClose(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s1, _ := c.NewStream()
	s2, _ := c.NewStream()
	if cl := f.last(t, "cuStreamCreate"); cl.args["flags"] != "1" {
		t.Errorf("cuStreamCreate = %v, want CU_STREAM_NON_BLOCKING", cl)
	}
	if n := f.liveCount(t, "streams"); n != 2 {
		t.Fatalf("live streams = %d, want 2", n)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s1.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Synchronize after Close: %v, want ErrClosed", err)
	}
	if cl := f.last(t, "cuStreamDestroy_v2"); cl.args["stream"] != hex(s1.Handle()) {
		t.Errorf("destroyed %v, want %s", cl, hex(s1.Handle()))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.liveCount(t, "streams"); n != 0 {
		t.Fatalf("live streams after Context.Close = %d, want 0", n)
	}
	if err := s2.Synchronize(); !errors.Is(err, ErrClosed) {
		t.Fatalf("stream op after Context.Close: %v, want ErrClosed", err)
	}
}

func TestEventsAreFences(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s1, _ := c.NewStream()
	s2, _ := c.NewStream()
	e, err := s1.Fence()
	if err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuEventCreate"); cl.args["flags"] != "2" {
		t.Errorf("cuEventCreate = %v, want CU_EVENT_DISABLE_TIMING", cl)
	}
	if cl := f.last(t, "cuEventRecord"); cl.args["event"] != hex(e.Handle()) || cl.args["stream"] != hex(s1.Handle()) {
		t.Errorf("cuEventRecord = %v", cl)
	}
	if done, err := e.Query(); !done || err != nil {
		t.Fatalf("Query = %v, %v; want done", done, err)
	}
	f.setNextError("cuEventQuery", 600)
	if done, err := e.Query(); done || err != nil {
		t.Fatalf("Query while not ready = %v, %v; want false, nil", done, err)
	}
	if err := e.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := s2.WaitEvent(e); err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuStreamWaitEvent"); cl.args["stream"] != hex(s2.Handle()) || cl.args["event"] != hex(e.Handle()) || cl.args["flags"] != "0" {
		t.Errorf("cuStreamWaitEvent = %v", cl)
	}
	e2, _ := s2.NewEvent()
	if err := s1.Record(e2); err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuEventRecord"); cl.args["event"] != hex(e2.Handle()) || cl.args["stream"] != hex(s1.Handle()) {
		t.Errorf("Record = %v", cl)
	}
	f.setNextError("cuEventSynchronize", 719)
	if err := e2.Synchronize(); !errors.Is(err, storage.ErrDevicePoisoned) {
		t.Fatalf("Synchronize after a launch failure: %v, want ErrDevicePoisoned", err)
	}
	// The fault is sticky: everything fails from now on.
	if _, err := e.Query(); !errors.Is(err, storage.ErrDevicePoisoned) {
		t.Fatalf("Query after the fault: %v, want ErrDevicePoisoned", err)
	}
	if _, err := c.Alloc(1); !errors.Is(err, storage.ErrDevicePoisoned) {
		t.Fatalf("Alloc after the fault: %v, want ErrDevicePoisoned", err)
	}
}

func TestEventDestroyReleasesIt(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s, _ := c.NewStream()
	e, _ := s.Fence()
	if n := f.liveCount(t, "events"); n != 1 {
		t.Fatalf("live events = %d, want 1", n)
	}
	if err := e.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n := f.liveCount(t, "events"); n != 0 {
		t.Fatalf("live events after Destroy = %d, want 0", n)
	}
	f.logClear()
	if err := e.Destroy(); err != nil {
		t.Fatalf("second Destroy = %v; want nil (a no-op)", err)
	}
	if cs := f.named(t, "cuEventDestroy_v2"); len(cs) != 0 {
		t.Fatalf("second Destroy called the driver: %v", cs)
	}
	if err := s.Record(e); !errors.Is(err, ErrClosed) {
		t.Fatalf("Record of a destroyed event = %v; want ErrClosed", err)
	}
}

func TestKernelsRunWithTheirArguments(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s, _ := c.NewStream()
	m, err := c.LoadModule([]byte(kernelsPTX))
	if err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuModuleLoadDataEx"); cl.args["size"] != strconv.Itoa(len(kernelsPTX)) {
		t.Errorf("cuModuleLoadDataEx = %v, want the whole %d-byte image", cl, len(kernelsPTX))
	}
	if cs := f.named(t, "cuLibraryLoadData"); len(cs) != 0 {
		t.Errorf("LoadModule called cuLibraryLoadData (%v): it defers the JIT under lazy loading", cs)
	}
	fill, err := m.Function(kernelFillU8)
	if err != nil {
		t.Fatal(err)
	}
	add, err := m.Function(kernelAddOne)
	if err != nil {
		t.Fatal(err)
	}
	var de *DriverError
	if _, err := m.Function("missing"); !errors.As(err, &de) || de.Code != 500 {
		t.Fatalf("Function(missing) = %v; want CUDA_ERROR_NOT_FOUND", err)
	}
	const size, n = 1024, 1000
	p, _ := c.Alloc(size)
	s.MemsetD8(p, 0, size)
	cfg, _ := Linear(n, 128)
	if err := s.Launch(fill, cfg, p, uint64(n), uint32(0x1AB)); err != nil {
		t.Fatal(err)
	}
	cl := f.last(t, "cuLaunchKernel")
	want := map[string]string{"kernel": "fill_u8", "grid": "8x1x1", "block": "128x1x1", "shared": "0",
		"stream": hex(s.Handle()), "p0": hex(p), "p1": "0x3e8", "p2": "0x1ab"}
	for k, v := range want {
		if cl.args[k] != v {
			t.Errorf("cuLaunchKernel %s = %q, want %q", k, cl.args[k], v)
		}
	}
	if err := s.Launch(add, LaunchConfig{Grid: Dim3{X: 4}, Block: Dim3{X: 256}, SharedMem: 64}, p, uint64(n)); err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuLaunchKernel"); cl.args["shared"] != "64" || cl.args["grid"] != "4x1x1" {
		t.Errorf("cuLaunchKernel = %v", cl)
	}
	got := make([]byte, size)
	s.CopyDtoH(got, p)
	for i, v := range got {
		want := byte(0)
		if i < n {
			want = 0xAC // fill with 0xAB, then add one
		}
		if v != want {
			t.Fatalf("byte %d = %#x, want %#x", i, v, want)
		}
	}
	if err := s.Launch(add, cfg, p, 5); err == nil {
		t.Fatal("Launch with a Go int argument succeeded; want an error")
	}
	if err := m.Unload(); err != nil {
		t.Fatal(err)
	}
	if n := f.liveCount(t, "modules"); n != 0 {
		t.Fatalf("live modules after Unload = %d", n)
	}
	if _, err := c.LoadModule([]byte("not ptx")); !errors.As(err, &de) || de.Code != 200 {
		t.Fatalf("LoadModule(garbage) = %v; want CUDA_ERROR_INVALID_IMAGE", err)
	}
}

func TestKernelFaultPoisonsTheDevice(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s, _ := c.NewStream()
	m, _ := c.LoadModule([]byte(kernelsPTX))
	add, _ := m.Function(kernelAddOne)
	p, _ := c.Alloc(16)
	err := s.Launch(add, LaunchConfig{Grid: Dim3{X: 1}, Block: Dim3{X: 64}}, p, uint64(64))
	if !errors.Is(err, storage.ErrDevicePoisoned) || !strings.Contains(err.Error(), "add_one") {
		t.Fatalf("kernel writing past its buffer: %v; want ErrDevicePoisoned naming the kernel", err)
	}
	if err := s.Synchronize(); !errors.Is(err, storage.ErrDevicePoisoned) {
		t.Fatalf("Synchronize after the fault: %v; want ErrDevicePoisoned (sticky)", err)
	}
}

func TestVirtualMemoryMapsPhysicalMemory(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	lo, hi, err := c.AllocationGranularity()
	if err != nil || lo != 2<<20 || hi != 4<<20 {
		t.Fatalf("AllocationGranularity = %d, %d, %v; want 2 MiB, 4 MiB", lo, hi, err)
	}
	gs := f.named(t, "cuMemGetAllocationGranularity")
	if len(gs) != 2 || gs[0].args["option"] != "0" || gs[1].args["option"] != "1" || gs[0].args["type"] != "1" || gs[0].args["loc"] != "1:0" {
		t.Fatalf("granularity calls = %v; want options 0 then 1 for pinned memory on device 0", gs)
	}
	base, err := c.ReserveAddress(2*lo, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuMemAddressReserve"); cl.args["size"] != strconv.FormatUint(2*lo, 10) || cl.args["align"] != "0" {
		t.Errorf("reserve = %v", cl)
	}
	h, err := c.CreatePhysical(lo)
	if err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuMemCreate"); cl.args["type"] != "1" || cl.args["loc"] != "1:0" || cl.args["size"] != strconv.FormatUint(lo, 10) {
		t.Errorf("create = %v", cl)
	}
	if free, total, _ := c.MemGetInfo(); free != total-lo {
		t.Errorf("free after creating %d bytes = %d of %d", lo, free, total)
	}
	if err := c.Map(base+uintptr(lo), lo, h); err != nil {
		t.Fatal(err)
	}
	if cl := f.last(t, "cuMemMap"); cl.args["offset"] != "0" || cl.args["ptr"] != hex(base+uintptr(lo)) {
		t.Errorf("map = %v", cl)
	}
	if cl := f.last(t, "cuMemSetAccess"); cl.args["flags"] != "3" || cl.args["loc"] != "1:0" || cl.args["count"] != "1" {
		t.Errorf("set access = %v; want read-write for device 0", cl)
	}
	s, _ := c.NewStream()
	data := []byte("mapped bytes")
	if err := s.CopyHtoD(base+uintptr(lo), data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := s.CopyDtoH(got, base+uintptr(lo)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copy through the mapping: %q, %v", got, err)
	}
	if err := s.CopyHtoD(base, data); err == nil {
		t.Fatal("copy into the unmapped half of the reservation succeeded")
	}
	if err := c.ReleasePhysical(h); err != nil { // still mapped: memory stays
		t.Fatal(err)
	}
	if err := c.FreeAddress(base, 2*lo); err == nil {
		t.Fatal("FreeAddress of a mapped reservation succeeded")
	}
	if err := c.Unmap(base+uintptr(lo), lo); err != nil {
		t.Fatal(err)
	}
	if err := c.FreeAddress(base, 2*lo); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"reservations", "physicals", "mappings"} {
		if n := f.liveCount(t, kind); n != 0 {
			t.Errorf("live %s = %d after unmapping and freeing", kind, n)
		}
	}
	if free, total, _ := c.MemGetInfo(); free != total {
		t.Errorf("free after release = %d of %d", free, total)
	}
	f.setTotalMem(lo)
	if _, err := c.CreatePhysical(2 * lo); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("CreatePhysical beyond capacity: %v, want ErrOutOfMemory", err)
	}
}

func TestInjectedErrorsCarryTheDriverName(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s, _ := c.NewStream()
	cases := []struct {
		fn   string
		code int
		call func() error
		is   error
		name string
	}{
		{"cuMemAlloc_v2", 2, func() error { _, err := c.Alloc(1); return err }, storage.ErrOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY"},
		{"cuStreamBeginCapture_v2", 900, s.BeginCapture, ErrCaptureUnsupported, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"},
		{"cuStreamSynchronize", 901, s.Synchronize, ErrCaptureInvalidated, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"},
		{"cuGraphLaunch", 907, func() error { return s.LaunchGraph(&graphExec{s: s, h: 1}) }, ErrCapturedEvent, "CUDA_ERROR_CAPTURED_EVENT"},
		{"cuStreamEndCapture", 908, func() error { _, err := s.EndCapture(); return err }, ErrWrongOwner, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD"},
		{"cuStreamEndCapture", 904, func() error { _, err := s.EndCapture(); return err }, ErrCaptureUnjoined, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED"},
		{"cuMemGetInfo_v2", 12345, func() error { _, _, err := c.MemGetInfo(); return err }, nil, ""},
	}
	for _, tc := range cases {
		f.setNextError(tc.fn, int32(tc.code))
		err := tc.call()
		var de *DriverError
		if !errors.As(err, &de) || de.Op != tc.fn || de.Code != tc.code || de.Name != tc.name {
			t.Errorf("%s cued with %d: %v; want DriverError{%s, %d, %q}", tc.fn, tc.code, err, tc.fn, tc.code, tc.name)
			continue
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s cued with %d: %v does not match %v", tc.fn, tc.code, err, tc.is)
		}
	}
}

// Without the library API and cuFuncGetParamInfo their features are off,
// and modules load as they do with them (through cuModuleLoadDataEx).
func TestOptionalModuleFeaturesFollowTheSymbols(t *testing.T) {
	f := buildFake(t, "FAKE_NO_LIBRARY", "FAKE_NO_PARAM_INFO")
	c := f.open(t)
	if got := c.Features(); got.Library || got.ParamInfo {
		t.Fatalf("Features() without the library API and cuFuncGetParamInfo = %+v; want both off", got)
	}
	m, err := c.LoadModule([]byte(kernelsPTX))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.named(t, "cuModuleLoadDataEx")) != 1 {
		t.Fatal("the module did not load through cuModuleLoadDataEx")
	}
	if err := m.Unload(); err != nil {
		t.Fatal(err)
	}
}
