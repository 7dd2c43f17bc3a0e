package cuda

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gpumem/gpumem/cuda/internal/driver"
)

// Driver flags used by streams, events and captures (cuda.h).
const (
	streamNonBlocking  = 1 // CU_STREAM_NON_BLOCKING: no implicit sync with the legacy stream
	eventDisableTiming = 2 // CU_EVENT_DISABLE_TIMING: the cheapest event, a pure fence
)

// driverStream is a driver stream (non-blocking) with its own executor: every
// call on it, on its events and on its captures runs on that executor's
// thread, in call order, with the context current. Methods are safe for
// concurrent use (the executor serialises them).
type driverStream struct {
	c    *primaryContext
	exec *executor
	h    uintptr // CUstream; not used once closed is set

	mu      sync.Mutex // guards the fields below
	closed  bool
	onClose func() // called once when Close begins (a queue's hook); nil: none
}

// NewStream starts an executor, makes the context current on it and creates
// a non-blocking stream there (cuStreamCreate).
func (c *primaryContext) NewStream() (*driverStream, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: context of device %d", ErrClosed, c.ordinal)
	}
	s := &driverStream{c: c}
	exec, err := newExecutor(fmt.Sprintf("stream of device %d", c.ordinal), func() error {
		if err := c.drv.check("cuCtxSetCurrent", c.drv.CuCtxSetCurrent(c.ctx)); err != nil {
			return err
		}
		return c.drv.check("cuStreamCreate", c.drv.CuStreamCreate(&s.h, streamNonBlocking))
	})
	if err != nil {
		return nil, err
	}
	s.exec = exec
	c.mu.Lock()
	if c.closed { // Close ran meanwhile: do not leak the stream
		c.mu.Unlock()
		s.destroy()
		return nil, fmt.Errorf("%w: context of device %d", ErrClosed, c.ordinal)
	}
	c.streams[s] = struct{}{}
	c.mu.Unlock()
	return s, nil
}

// Executor returns the stream's executor. A caller may batch several
// driverStream calls inside one Do; they run at once, in order, on its thread.
func (s *driverStream) Executor() *executor { return s.exec }

// isClosed reports whether Close has begun.
func (s *driverStream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// closedErr is the error of a call on a closed stream.
func (s *driverStream) closedErr() error {
	return fmt.Errorf("%w: stream of device %d", ErrClosed, s.c.ordinal)
}

// do runs fn on the stream's executor unless the stream is closed, checked
// inside the job: a job handed over before Close but run after it began
// (after the stream's destruction, possibly) does not touch the handle.
func (s *driverStream) do(fn func() error) error {
	return s.exec.Do(func() error {
		if s.isClosed() {
			return s.closedErr()
		}
		return fn()
	})
}

// setOnClose makes Close call fn first (once), or calls it now when the
// stream is already closed.
func (s *driverStream) setOnClose(fn func()) {
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.onClose = fn
	}
	s.mu.Unlock()
	if closed {
		fn()
	}
}

// cleanup runs fn, the destruction of an object of this stream's context
// (event, graph), on the stream's executor while it runs; once the stream
// is gone, on the device executor (the object outlives its stream); once
// the context is closed, not at all: the object died with the context.
func (s *driverStream) cleanup(fn func() error) error {
	ran := false
	err := s.exec.Do(func() error { ran = true; return fn() })
	if ran {
		return err
	}
	return s.c.cleanup(fn)
}

// Handle returns the CUstream.
func (s *driverStream) Handle() uintptr { return s.h }

// Close destroys the stream (cuStreamDestroy_v2; queued work still
// completes) and stops its executor. End a capture first: destroying a
// capturing stream fails and invalidates the capture. Idempotent; every
// other driverStream call afterwards returns an error wrapping ErrClosed. The
// stream of a queue may be closed first (by primaryContext.Close, say): the queue
// then refuses new work and its Close still returns.
func (s *driverStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	hook := s.onClose
	s.onClose = nil
	s.mu.Unlock()
	if hook != nil {
		hook()
	}
	s.c.mu.Lock()
	delete(s.c.streams, s)
	s.c.mu.Unlock()
	return s.destroy()
}

func (s *driverStream) destroy() error {
	err := s.exec.Do(func() error { return s.c.drv.check("cuStreamDestroy_v2", s.c.drv.CuStreamDestroy(s.h)) })
	if cerr := s.exec.Close(); err == nil {
		err = cerr
	}
	return err
}

// Synchronize waits until the stream's work is done (cuStreamSynchronize).
// On a capturing stream it fails with ErrCaptureInvalidated and
// invalidates the capture.
func (s *driverStream) Synchronize() error {
	return s.do(func() error {
		return s.c.drv.check("cuStreamSynchronize", s.c.drv.CuStreamSynchronize(s.h))
	})
}

// CopyDtoD enqueues a copy of n bytes between device pointers
// (cuMemcpyDtoDAsync_v2). The ranges must not overlap.
func (s *driverStream) CopyDtoD(dst, src uintptr, n uint64) error {
	return s.do(func() error {
		return s.c.drv.check("cuMemcpyDtoDAsync_v2", s.c.drv.CuMemcpyDtoDAsync(dst, src, uintptr(n), s.h))
	})
}

// CopyHtoD copies src to device memory at dst (cuMemcpyHtoDAsync_v2). src is
// pageable Go memory, so the driver has read it by the time the call
// returns and the caller may reuse it; the device write is ordered on the
// stream. Not allowed while the stream captures.
func (s *driverStream) CopyHtoD(dst uintptr, src []byte) error {
	err := s.do(func() error {
		return s.c.drv.check("cuMemcpyHtoDAsync_v2", s.c.drv.CuMemcpyHtoDAsync(dst, ptrOf(src), uintptr(len(src)), s.h))
	})
	runtime.KeepAlive(src)
	return err
}

// CopyDtoH copies len(dst) bytes from device memory at src into dst
// (cuMemcpyDtoHAsync_v2). dst is pageable Go memory, so the copy has
// completed when the call returns (after the stream's earlier work). Not
// allowed while the stream captures.
func (s *driverStream) CopyDtoH(dst []byte, src uintptr) error {
	err := s.do(func() error {
		return s.c.drv.check("cuMemcpyDtoHAsync_v2", s.c.drv.CuMemcpyDtoHAsync(ptrOf(dst), src, uintptr(len(dst)), s.h))
	})
	runtime.KeepAlive(dst)
	return err
}

// MemsetD8 enqueues setting n bytes at dst to value (cuMemsetD8Async). It
// returns an error wrapping ErrUnsupported when the driver lacks the symbol
// (see Features).
func (s *driverStream) MemsetD8(dst uintptr, value byte, n uint64) error {
	if s.c.drv.CuMemsetD8Async == nil {
		return fmt.Errorf("%w: cuMemsetD8Async missing from %s", ErrUnsupported, s.c.drv.Path)
	}
	return s.do(func() error {
		return s.c.drv.check("cuMemsetD8Async", s.c.drv.CuMemsetD8Async(dst, value, uintptr(n), s.h))
	})
}

// event is a driver event used as a fence (timing disabled). Its calls run
// on the executor of the stream that created it. After Destroy every call
// but Destroy (a no-op) fails with ErrClosed.
type event struct {
	s  *driverStream
	mu sync.Mutex // guards h; held across each driver call using it
	h  uintptr    // CUevent; 0 once destroyed
}

// NewEvent creates an event (cuEventCreate, CU_EVENT_DISABLE_TIMING).
func (s *driverStream) NewEvent() (*event, error) {
	e := &event{s: s}
	err := s.do(func() error {
		return s.c.drv.check("cuEventCreate", s.c.drv.CuEventCreate(&e.h, eventDisableTiming))
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// use calls fn with e's handle, holding e.mu so that Destroy cannot destroy
// it under the call, or fails when e is destroyed.
func (e *event) use(fn func(h uintptr) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == 0 {
		return fmt.Errorf("%w: event destroyed", ErrClosed)
	}
	return fn(e.h)
}

// Record records e after the stream's work enqueued so far (cuEventRecord):
// e completes when that work does. On a capturing stream the record becomes
// part of the graph, and querying e fails with ErrCapturedEvent.
func (s *driverStream) Record(e *event) error {
	return s.do(func() error {
		return e.use(func(h uintptr) error { return s.c.drv.check("cuEventRecord", s.c.drv.CuEventRecord(h, s.h)) })
	})
}

// Fence creates an event and records it on the stream: a fence covering the
// work enqueued so far. The caller destroys it.
func (s *driverStream) Fence() (*event, error) {
	e := &event{s: s}
	err := s.do(func() error {
		d := s.c.drv
		if err := d.check("cuEventCreate", d.CuEventCreate(&e.h, eventDisableTiming)); err != nil {
			return err
		}
		if err := d.check("cuEventRecord", d.CuEventRecord(e.h, s.h)); err != nil {
			d.CuEventDestroy(e.h)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// WaitEvent makes the stream's later work wait, on the device, for e
// (cuStreamWaitEvent). The host does not block.
func (s *driverStream) WaitEvent(e *event) error {
	return s.do(func() error {
		return e.use(func(h uintptr) error {
			return s.c.drv.check("cuStreamWaitEvent", s.c.drv.CuStreamWaitEvent(s.h, h, 0))
		})
	})
}

// Handle returns the CUevent; 0 once destroyed.
func (e *event) Handle() uintptr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.h
}

// Query reports whether the work e covers is done (cuEventQuery), without
// waiting on the device. It waits for the creating stream's executor, which
// may be busy with a Synchronize.
func (e *event) Query() (bool, error) {
	var done bool
	err := e.s.do(func() error {
		return e.use(func(h uintptr) error {
			rc := e.s.c.drv.CuEventQuery(h)
			if rc == driver.CodeNotReady {
				return nil
			}
			done = rc == driver.CodeSuccess
			return e.s.c.drv.check("cuEventQuery", rc)
		})
	})
	return done, err
}

// Synchronize waits until the work e covers is done (cuEventSynchronize).
func (e *event) Synchronize() error {
	return e.s.do(func() error {
		return e.use(func(h uintptr) error {
			return e.s.c.drv.check("cuEventSynchronize", e.s.c.drv.CuEventSynchronize(h))
		})
	})
}

// Destroy destroys the event (cuEventDestroy_v2); pending records still
// complete. It is idempotent, and works after the creating stream closed
// (on the device executor); after primaryContext.Close the event is already gone
// and Destroy does nothing.
func (e *event) Destroy() error {
	e.mu.Lock()
	h := e.h
	e.h = 0
	e.mu.Unlock()
	if h == 0 {
		return nil
	}
	return e.s.cleanup(func() error {
		return e.s.c.drv.check("cuEventDestroy_v2", e.s.c.drv.CuEventDestroy(h))
	})
}

// Dim3 is a grid or block shape; a zero component counts as 1.
type Dim3 struct{ X, Y, Z uint32 }

func (d Dim3) norm() Dim3 {
	return Dim3{max(d.X, 1), max(d.Y, 1), max(d.Z, 1)}
}

// LaunchConfig is a kernel launch shape.
type LaunchConfig struct {
	Grid, Block Dim3
	SharedMem   uint32 // dynamic shared memory, bytes
}

// Driver limits on a launch's shape, common to every device the kernels
// target (sm_52 and later).
const (
	maxGridX          = math.MaxInt32 // blocks along x
	maxThreadsInBlock = 1024
)

// Linear returns a one-dimensional launch of at least n threads in blocks of
// block threads (block 0 = 256). It fails when block exceeds the driver's
// 1024 threads per block or n needs more than 2^31−1 blocks (the grid's x
// limit).
func Linear(n uint64, block uint32) (LaunchConfig, error) {
	if block == 0 {
		block = 256
	}
	if block > maxThreadsInBlock {
		return LaunchConfig{}, fmt.Errorf("cuda: blocks of %d threads exceed the driver's limit of %d", block, maxThreadsInBlock)
	}
	blocks := n / uint64(block)
	if n%uint64(block) != 0 {
		blocks++
	}
	if blocks > maxGridX {
		return LaunchConfig{}, fmt.Errorf("cuda: %d threads need %d blocks of %d, more than a grid holds (%d)",
			n, blocks, block, maxGridX)
	}
	return LaunchConfig{Grid: Dim3{X: uint32(max(blocks, 1))}, Block: Dim3{X: block}}, nil
}

// Launch enqueues kernel f with args (cuLaunchKernel). Each argument is
// passed by value with its C size: uintptr (a device pointer), uint64 and
// int64 as 8 bytes; uint32, int32 and float32 as 4; uint16 and int16 as 2;
// uint8 and int8 as 1; float64 as 8. Go int and uint are refused, their C
// size being ambiguous. The driver copies the values during the call, so a
// capture keeps them.
//
// args must match the kernel's parameters in number and size: the driver
// reads as many parameters as the kernel declares, so too few arguments
// make it read past the array (a crash or garbage, never an error). Where
// the parameters are known (Function.Params: cuFuncGetParamInfo, CUDA
// 12.4+, or the PTX the module was loaded from) Launch refuses a mismatch
// with an *ArgError before the driver sees it; elsewhere the caller must
// get them right.
//
// From an op's run function, prefer Op.Launch: it takes the op's uses as
// arguments and launches on the op's stream.
func (s *driverStream) Launch(f *Function, cfg LaunchConfig, args ...any) error {
	vals, ptrs, sizes, err := packParams(f.name, args)
	if err != nil {
		return err
	}
	if err := f.checkParams(sizes); err != nil {
		return err
	}
	var params unsafe.Pointer
	if len(ptrs) > 0 {
		params = unsafe.Pointer(&ptrs[0])
	}
	g, b := cfg.Grid.norm(), cfg.Block.norm()
	err = s.do(func() error {
		return f.m.use(func(uintptr) error {
			return s.c.drv.check("cuLaunchKernel", s.c.drv.CuLaunchKernel(f.h, g.X, g.Y, g.Z, b.X, b.Y, b.Z, cfg.SharedMem, s.h, params, nil))
		})
	})
	runtime.KeepAlive(vals)
	runtime.KeepAlive(ptrs)
	if err != nil {
		return fmt.Errorf("cuda: launch %s: %w", f.name, err)
	}
	return nil
}

// captureStatus is a stream's capture state (CUstreamCaptureStatus).
type captureStatus int32

const (
	captureNone        captureStatus = 0 // not capturing
	captureActive      captureStatus = 1 // capturing
	captureInvalidated captureStatus = 2 // capturing, but the capture is invalidated: end it and discard it
)

func (c captureStatus) String() string {
	switch c {
	case captureNone:
		return "none"
	case captureActive:
		return "active"
	case captureInvalidated:
		return "invalidated"
	}
	return fmt.Sprintf("CaptureStatus(%d)", int32(c))
}

// BeginCapture starts recording the stream's work into a graph
// (cuStreamBeginCapture_v2, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL): work
// enqueued afterwards is recorded, not run. It runs on the stream's
// executor, as EndCapture does, so both happen on the same thread; the
// thread-local mode then lets the device executor keep allocating and
// freeing on its own thread meanwhile.
func (s *driverStream) BeginCapture() error {
	return s.do(func() error {
		return s.c.drv.check("cuStreamBeginCapture_v2", s.c.drv.CuStreamBeginCapture(s.h, driver.CodeStreamCaptureModeThread))
	})
}

// EndCapture ends the stream's capture and returns the recorded graph
// (cuStreamEndCapture). An invalidated capture ends with an error matching
// ErrCaptureInvalidated and no graph.
func (s *driverStream) EndCapture() (*graph, error) {
	g := &graph{s: s}
	err := s.do(func() error {
		return s.c.drv.check("cuStreamEndCapture", s.c.drv.CuStreamEndCapture(s.h, &g.h))
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// CaptureStatus returns the stream's capture state (cuStreamIsCapturing).
func (s *driverStream) CaptureStatus() (captureStatus, error) {
	var st int32
	err := s.do(func() error {
		return s.c.drv.check("cuStreamIsCapturing", s.c.drv.CuStreamIsCapturing(s.h, &st))
	})
	return captureStatus(st), err
}

// graph is a recorded graph (CUgraph). Its calls run on the executor of the
// stream that captured it.
type graph struct {
	s  *driverStream
	mu sync.Mutex // guards h; held across each driver call using it
	h  uintptr    // 0 once destroyed
}

// graphExec is an instantiated graph (CUgraphExec), launchable on any
// stream of the context.
type graphExec struct {
	s  *driverStream
	mu sync.Mutex // guards h; held across each driver call using it
	h  uintptr    // 0 once destroyed
}

// Instantiate makes an executable graph (cuGraphInstantiateWithFlags, no
// flags). The Graph may be destroyed afterwards.
func (g *graph) Instantiate() (*graphExec, error) {
	x := &graphExec{s: g.s}
	err := g.s.do(func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.h == 0 {
			return fmt.Errorf("%w: graph destroyed", ErrClosed)
		}
		return g.s.c.drv.check("cuGraphInstantiateWithFlags", g.s.c.drv.CuGraphInstantiateWithFlag(&x.h, g.h, 0))
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// Destroy destroys the graph (cuGraphDestroy). Idempotent; after
// primaryContext.Close the graph is already gone and Destroy does nothing.
func (g *graph) Destroy() error {
	g.mu.Lock()
	h := g.h
	g.h = 0
	g.mu.Unlock()
	if h == 0 {
		return nil
	}
	return g.s.cleanup(func() error { return g.s.c.drv.check("cuGraphDestroy", g.s.c.drv.CuGraphDestroy(h)) })
}

// LaunchGraph enqueues one replay of x on the stream (cuGraphLaunch).
func (s *driverStream) LaunchGraph(x *graphExec) error {
	return s.do(func() error {
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.h == 0 {
			return fmt.Errorf("%w: executable graph destroyed", ErrClosed)
		}
		return s.c.drv.check("cuGraphLaunch", s.c.drv.CuGraphLaunch(x.h, s.h))
	})
}

// Destroy destroys the executable graph (cuGraphExecDestroy); launches
// already enqueued still run. Idempotent; after primaryContext.Close the graph is
// already gone and Destroy does nothing.
func (x *graphExec) Destroy() error {
	x.mu.Lock()
	h := x.h
	x.h = 0
	x.mu.Unlock()
	if h == 0 {
		return nil
	}
	return x.s.cleanup(func() error {
		return x.s.c.drv.check("cuGraphExecDestroy", x.s.c.drv.CuGraphExecDestroy(h))
	})
}
