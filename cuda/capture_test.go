//go:build linux

package cuda

import (
	"bytes"
	"errors"
	"testing"
)

// captureFixture is a context with one stream, a 256-byte buffer and the
// test kernels.
type captureFixture struct {
	f        *fakeDriver
	c        *primaryContext
	s        *driverStream
	buf      uintptr
	add      *Function
	fill     *Function
	streamTI int
}

func newCaptureFixture(t *testing.T) *captureFixture {
	t.Helper()
	f := buildFake(t)
	c := f.open(t)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.LoadModule([]byte(kernelsPTX))
	if err != nil {
		t.Fatal(err)
	}
	add, _ := m.Function(kernelAddOne)
	fill, _ := m.Function(kernelFillU8)
	buf, err := c.Alloc(256)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CopyHtoD(buf, make([]byte, 256)); err != nil {
		t.Fatal(err)
	}
	return &captureFixture{f: f, c: c, s: s, buf: buf, add: add, fill: fill, streamTI: tidOf(t, s.Executor())}
}

func (x *captureFixture) read(t *testing.T) []byte {
	t.Helper()
	got := make([]byte, 256)
	if err := x.s.CopyDtoH(got, x.buf); err != nil {
		t.Fatal(err)
	}
	return got
}

func (x *captureFixture) status(t *testing.T) captureStatus {
	t.Helper()
	st, err := x.s.CaptureStatus()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestCaptureRecordsOnTheStreamThreadAndReplays(t *testing.T) {
	x := newCaptureFixture(t)
	cfg, _ := Linear(256, 64)
	if err := x.s.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	if st := x.status(t); st != captureActive {
		t.Fatalf("status while capturing = %v, want active", st)
	}
	if err := x.s.Launch(x.add, cfg, x.buf, uint64(100)); err != nil {
		t.Fatal(err)
	}
	if err := x.s.CopyDtoD(x.buf+128, x.buf, 64); err != nil {
		t.Fatal(err)
	}
	if err := x.s.MemsetD8(x.buf+250, 9, 6); err != nil {
		t.Fatal(err)
	}
	g, err := x.s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	begin, end := x.f.last(t, "cuStreamBeginCapture_v2"), x.f.last(t, "cuStreamEndCapture")
	if begin.args["mode"] != "1" {
		t.Errorf("capture mode = %s, want CU_STREAM_CAPTURE_MODE_THREAD_LOCAL (1)", begin.args["mode"])
	}
	if begin.tid != x.streamTI || end.tid != x.streamTI {
		t.Errorf("capture began on thread %d and ended on %d, want both on the stream's %d", begin.tid, end.tid, x.streamTI)
	}
	if st := x.status(t); st != captureNone {
		t.Fatalf("status after EndCapture = %v, want none", st)
	}
	if got := x.read(t); !bytes.Equal(got, make([]byte, 256)) {
		t.Fatal("captured work ran during the capture")
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if cl := x.f.last(t, "cuGraphInstantiateWithFlags"); cl.args["nodes"] != "3" || cl.args["flags"] != "0" {
		t.Errorf("instantiate = %v, want 3 nodes and no flags", cl)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := x.s.LaunchGraph(exec); err != nil {
			t.Fatal(err)
		}
	}
	got := x.read(t)
	want := make([]byte, 256)
	for i := 0; i < 100; i++ {
		want[i] = 2
	}
	copy(want[128:192], want[0:64]) // the second replay copies what two add_ones left
	for i := 250; i < 256; i++ {
		want[i] = 9
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after two replays got %v\nwant %v", got, want)
	}
	if err := exec.Destroy(); err != nil {
		t.Fatal(err)
	}
	if g, e := x.f.liveCount(t, "graphs"), x.f.liveCount(t, "execs"); g != 0 || e != 0 {
		t.Fatalf("live graphs %d, execs %d after Destroy", g, e)
	}
}

func TestCaptureKeepsKernelArgumentsByValue(t *testing.T) {
	x := newCaptureFixture(t)
	cfg, _ := Linear(256, 0)
	x.s.BeginCapture()
	x.s.Launch(x.fill, cfg, x.buf, uint64(10), uint32(7))
	g, err := x.s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	exec, _ := g.Instantiate()
	// Launch's argument buffers are long gone; the graph must still hold 7.
	x.s.LaunchGraph(exec)
	got := x.read(t)
	if !bytes.Equal(got[:10], bytes.Repeat([]byte{7}, 10)) || got[10] != 0 {
		t.Fatalf("replayed fill = %v", got[:12])
	}
}

func TestEndingACaptureOnAnotherThreadIsErrWrongOwner(t *testing.T) {
	x := newCaptureFixture(t)
	if err := x.s.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	// Another thread with the context current, bypassing the stream's
	// executor: exactly what the executors exist to prevent.
	other, err := newExecutor("intruder", func() error {
		return x.c.drv.check("cuCtxSetCurrent", x.c.drv.CuCtxSetCurrent(x.c.ctx))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var graph uintptr
	err = other.Do(func() error {
		return x.c.drv.check("cuStreamEndCapture", x.c.drv.CuStreamEndCapture(x.s.h, &graph))
	})
	if !errors.Is(err, ErrWrongOwner) {
		t.Fatalf("EndCapture from another thread: %v, want ErrWrongOwner", err)
	}
	if st := x.status(t); st != captureActive {
		t.Fatalf("status after the wrong-thread attempt = %v, want still active", st)
	}
	if _, err := x.s.EndCapture(); err != nil {
		t.Fatalf("EndCapture on the stream's executor: %v", err)
	}
}

func TestSynchronizingACapturingStreamInvalidatesTheCapture(t *testing.T) {
	x := newCaptureFixture(t)
	x.s.BeginCapture()
	err := x.s.Synchronize()
	if !errors.Is(err, ErrCaptureInvalidated) || !errors.Is(err, ErrCaptureUnsupported) {
		t.Fatalf("Synchronize while capturing: %v; want 900 (unsupported, invalidating)", err)
	}
	if st := x.status(t); st != captureInvalidated {
		t.Fatalf("status = %v, want invalidated", st)
	}
	err = x.s.CopyDtoD(x.buf+128, x.buf, 8)
	if !errors.Is(err, ErrCaptureInvalidated) || errors.Is(err, ErrCaptureUnsupported) {
		t.Fatalf("work on an invalidated capture: %v; want 901 only", err)
	}
	g, err := x.s.EndCapture()
	var de *DriverError
	if g != nil || !errors.As(err, &de) || de.Code != 901 {
		t.Fatalf("EndCapture of an invalidated capture = %v, %v; want no graph and 901", g, err)
	}
	if st := x.status(t); st != captureNone {
		t.Fatalf("status after EndCapture = %v, want none", st)
	}
}

func TestHostCopiesCannotEnterACapture(t *testing.T) {
	x := newCaptureFixture(t)
	x.s.BeginCapture()
	if err := x.s.CopyHtoD(x.buf, []byte{1}); !errors.Is(err, ErrCaptureUnsupported) {
		t.Fatalf("HtoD while capturing: %v, want ErrCaptureUnsupported", err)
	}
	if _, err := x.s.EndCapture(); !errors.Is(err, ErrCaptureInvalidated) {
		t.Fatalf("EndCapture: %v, want ErrCaptureInvalidated", err)
	}
}

func TestQueryingACapturedEventIsErrCapturedEvent(t *testing.T) {
	x := newCaptureFixture(t)
	x.s.BeginCapture()
	e, err := x.s.Fence()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Query(); !errors.Is(err, ErrCapturedEvent) {
		t.Fatalf("Query of a captured event: %v, want ErrCapturedEvent", err)
	}
	if err := e.Synchronize(); !errors.Is(err, ErrCapturedEvent) {
		t.Fatalf("Synchronize of a captured event: %v, want ErrCapturedEvent", err)
	}
	if _, err := x.s.EndCapture(); err != nil {
		t.Fatalf("EndCapture: %v (querying a captured event does not invalidate)", err)
	}
}

func TestThreadLocalCaptureToleratesStorageCallsOnTheDeviceExecutor(t *testing.T) {
	x := newCaptureFixture(t)
	x.s.BeginCapture()
	p, err := x.c.Alloc(64)
	if err != nil {
		t.Fatalf("Alloc on the device executor during a capture: %v", err)
	}
	if err := x.c.Free(p); err != nil {
		t.Fatalf("Free on the device executor during a capture: %v", err)
	}
	if st := x.status(t); st != captureActive {
		t.Fatalf("status after device-executor alloc/free = %v, want active", st)
	}
	// The same call on the capturing thread is what THREAD_LOCAL forbids.
	var q uintptr
	err = x.s.Executor().Do(func() error {
		return x.c.drv.check("cuMemAlloc_v2", x.c.drv.CuMemAlloc(&q, 64))
	})
	if !errors.Is(err, ErrCaptureUnsupported) {
		t.Fatalf("alloc on the capturing thread: %v, want ErrCaptureUnsupported", err)
	}
	if _, err := x.s.EndCapture(); !errors.Is(err, ErrCaptureInvalidated) {
		t.Fatalf("EndCapture: %v, want ErrCaptureInvalidated", err)
	}
}

func TestForkedCaptureMustJoin(t *testing.T) {
	x := newCaptureFixture(t)
	s2, err := x.c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	fork := func() {
		t.Helper()
		if err := x.s.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		e, _ := x.s.Fence()
		if err := s2.WaitEvent(e); err != nil { // s2 joins the capture
			t.Fatal(err)
		}
		if st, _ := s2.CaptureStatus(); st != captureActive {
			t.Fatalf("forked stream status = %v, want active", st)
		}
		if err := s2.MemsetD8(x.buf, 5, 4); err != nil {
			t.Fatal(err)
		}
	}

	fork()
	if _, err := x.s.EndCapture(); !errors.Is(err, ErrCaptureUnjoined) {
		t.Fatalf("EndCapture with an unjoined fork: %v, want ErrCaptureUnjoined", err)
	}
	if st, _ := s2.CaptureStatus(); st != captureNone {
		t.Fatalf("forked stream status after the failed end = %v, want none", st)
	}

	fork()
	back, _ := s2.Fence()
	if err := x.s.WaitEvent(back); err != nil { // join
		t.Fatal(err)
	}
	g, err := x.s.EndCapture()
	if err != nil {
		t.Fatalf("EndCapture after joining: %v", err)
	}
	exec, _ := g.Instantiate()
	x.s.LaunchGraph(exec)
	if got := x.read(t); !bytes.Equal(got[:5], []byte{5, 5, 5, 5, 0}) {
		t.Fatalf("forked memset replayed as %v", got[:5])
	}
}

func TestCaptureCannotWaitOnOutsideWork(t *testing.T) {
	x := newCaptureFixture(t)
	s2, _ := x.c.NewStream()
	outside, _ := s2.Fence()
	x.s.BeginCapture()
	err := x.s.WaitEvent(outside)
	var de *DriverError
	if !errors.As(err, &de) || de.Code != 905 || de.Name != "CUDA_ERROR_STREAM_CAPTURE_ISOLATION" {
		t.Fatalf("capturing stream waiting on an outside event: %v; want 905", err)
	}
	if _, err := x.s.EndCapture(); !errors.Is(err, ErrCaptureInvalidated) {
		t.Fatalf("EndCapture: %v, want ErrCaptureInvalidated", err)
	}
}
