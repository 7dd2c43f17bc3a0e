//go:build linux

package cuda

import (
	"context"
	"errors"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// newTestBackend opens a backend on the fake and closes it when the test
// ends.
func newTestBackend(t *testing.T, f *fakeDriver) *Backend {
	t.Helper()
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// newTestQueue makes queue 0 of b.
func newTestQueue(t *testing.T, b *Backend) *queue {
	t.Helper()
	q, err := b.NewQueue(0)
	if err != nil {
		t.Fatal(err)
	}
	return q.(*queue)
}

func nop(name string) stream.Op { return stream.Op{Name: name, Run: func() error { return nil }} }

func capturingCount(b *Backend) int {
	b.capMu.Lock()
	defer b.capMu.Unlock()
	return b.capturing
}

func TestQueueCloseReturnsAfterItsStreamWasClosed(t *testing.T) {
	f := buildFake(t)
	b := newTestBackend(t, f)
	q := newTestQueue(t, b)
	seq, err := q.Enqueue(nop("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(context.Background(), stream.Fence{Q: q, Seq: seq}); err != nil {
		t.Fatal(err)
	}
	if err := q.Stream().Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(nop("b")); !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("Enqueue after its stream closed = %v; want stream.ErrClosed", err)
	}
	if err := q.Close(); err != nil { // the test's timeout catches a hang
		t.Fatalf("Queue.Close after Stream.Close = %v", err)
	}
	if n := f.liveCount(t, "events"); n != 0 {
		t.Errorf("%d events live after Queue.Close; want 0 (destroyed on the device executor)", n)
	}
}

func TestQueueCloseEndsARecordingWhoseStreamWasClosed(t *testing.T) {
	f := buildFake(t)
	b := newTestBackend(t, f)
	q := newTestQueue(t, b)
	if err := q.BeginCapture(3); err != nil {
		t.Fatal(err)
	}
	q.Stream().Close() // fails: the stream captures; the executor stops anyway
	if err := q.Close(); err != nil {
		t.Fatalf("Queue.Close = %v", err)
	}
	if n := capturingCount(b); n != 0 {
		t.Fatalf("backend counts %d open captures after Queue.Close; want 0 (storage frees would stay queued)", n)
	}
}

func TestBackendCloseReturnsAfterItsContextWasClosed(t *testing.T) {
	f := buildFake(t)
	b := newTestBackend(t, f)
	q := newTestQueue(t, b)
	seq, err := q.Enqueue(nop("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(context.Background(), stream.Fence{Q: q, Seq: seq}); err != nil {
		t.Fatal(err)
	}
	if err := b.devContext().Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(nop("b")); !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("Enqueue after Context.Close = %v; want stream.ErrClosed", err)
	}
	if err := b.Close(); err != nil { // the test's timeout catches a hang
		t.Fatalf("Backend.Close after Context.Close = %v", err)
	}
}

func TestCancelledWaitLeavesTheQueueUsable(t *testing.T) {
	f := buildFake(t)
	b := newTestBackend(t, f)
	q := newTestQueue(t, b)
	q.gate.Lock() // the watcher cannot observe the completion
	seq, err := q.Enqueue(nop("a"))
	if err != nil {
		q.gate.Unlock()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = q.Wait(ctx, stream.Fence{Q: q, Seq: seq})
	q.gate.Unlock()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v; want context.Canceled", err)
	}
	if err := q.Wait(context.Background(), stream.Fence{Q: q, Seq: seq}); err != nil {
		t.Fatal(err)
	}
}

func TestTransientEventErrorsCostASyncNotTheQueue(t *testing.T) {
	for _, fn := range []string{"cuEventCreate", "cuEventRecord"} {
		t.Run(fn, func(t *testing.T) {
			f := buildFake(t)
			b := newTestBackend(t, f)
			q := newTestQueue(t, b)
			if fn == "cuEventRecord" { // have an event to reuse, so record is what fails
				s0, _ := q.Enqueue(nop("warm"))
				if err := q.Wait(context.Background(), stream.Fence{Q: q, Seq: s0}); err != nil {
					t.Fatal(err)
				}
			}
			f.logClear()
			f.setNextError(fn, 2) // CUDA_ERROR_OUT_OF_MEMORY: not sticky
			s1, err := q.Enqueue(nop("a"))
			if err != nil {
				t.Fatal(err)
			}
			if len(f.named(t, "cuStreamSynchronize")) != 1 {
				t.Errorf("no cuStreamSynchronize after the failed %s: %v", fn, f.calls(t))
			}
			if err := q.Wait(context.Background(), stream.Fence{Q: q, Seq: s1}); err != nil {
				t.Fatalf("wait on the step without an event: %v", err)
			}
			s2, _ := q.Enqueue(nop("b"))
			fe, err := q.Fence()
			if err != nil || fe.Seq != s2 {
				t.Fatalf("Fence = %+v, %v; want seq %d", fe, err, s2)
			}
			if err := q.Wait(context.Background(), fe); err != nil {
				t.Fatalf("wait on a later step: %v", err)
			}
			if fs := q.TakeFailures(); len(fs) != 0 {
				t.Errorf("failures after a transient %s: %v; want none", fn, fs)
			}
			if err := b.Poisoned(); err != nil {
				t.Errorf("Poisoned = %v", err)
			}
			// Another queue may wait on the eventless step device-side.
			q2 := newTestQueue(t, b)
			if err := q2.WaitFence(stream.Fence{Q: q, Seq: s1}); err != nil {
				t.Errorf("WaitFence on the eventless step: %v", err)
			}
		})
	}
}

func TestStickyEventErrorStopsTheQueue(t *testing.T) {
	f := buildFake(t)
	b := newTestBackend(t, f)
	q := newTestQueue(t, b)
	f.setNextError("cuEventCreate", 700)
	seq, err := q.Enqueue(nop("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(context.Background(), stream.Fence{Q: q, Seq: seq}); !errors.Is(err, storage.ErrDevicePoisoned) {
		t.Fatalf("wait after a sticky cuEventCreate error = %v; want ErrDevicePoisoned", err)
	}
	if b.Poisoned() == nil {
		t.Error("backend not poisoned")
	}
}

func TestBackendLaunchRefusesWrongExtraArguments(t *testing.T) {
	// Without cuFuncGetParamInfo, Backend.Launch's own check is all that
	// stands between a missing argument and the driver reading past the
	// array.
	f := buildFake(t, "FAKE_NO_PARAM_INFO")
	b := newTestBackend(t, f)
	q := newTestQueue(t, b)
	p, err := b.ctx.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		kernel string
		extra  []any
	}{
		{kernelFillU8, nil},
		{kernelFillU8, []any{uint64(7)}},
		{kernelFillU8, []any{uint32(7), uint32(8)}},
		{kernelAddOne, []any{uint32(7)}},
		{"no_such_kernel", nil},
	}
	f.logClear()
	for _, tc := range cases {
		if err := b.launch(q, tc.kernel, p, 4096, tc.extra...); !errors.Is(err, stream.ErrInvalid) {
			t.Errorf("Launch(%s, %v) = %v; want stream.ErrInvalid", tc.kernel, tc.extra, err)
		}
	}
	if cs := f.named(t, "cuLaunchKernel"); len(cs) != 0 {
		t.Fatalf("refused launches reached the driver: %v", cs)
	}
	if err := b.launch(q, kernelFillU8, p, 4096, uint32(7)); err != nil {
		t.Fatal(err)
	}
	if err := b.launch(q, kernelAddOne, p, 4096); err != nil {
		t.Fatal(err)
	}
}

func TestStreamLaunchRefusesArgumentsNotMatchingTheKernel(t *testing.T) {
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
	fn, err := m.Function(kernelFillU8)
	if err != nil {
		t.Fatal(err)
	}
	if fn.paramsFrom != "cuFuncGetParamInfo" || len(fn.params) != 3 {
		t.Fatalf("fill_u8's parameters = %v (from %q); want 3 from cuFuncGetParamInfo", fn.params, fn.paramsFrom)
	}
	p, err := c.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := Linear(4096, 0)
	f.logClear()
	for _, args := range [][]any{
		{p, uint64(4096)},                       // too few: the driver would read a third pointer past the array
		{p, uint64(4096), uint32(1), uint32(2)}, // too many
		{p, uint64(4096), uint64(1)},            // the value is 4 bytes, not 8
		{p, uint32(4096), uint32(1)},            // n is 8 bytes, not 4
	} {
		if err := s.Launch(fn, cfg, args...); !errors.Is(err, stream.ErrInvalid) {
			t.Errorf("Launch(fill_u8, %v) = %v; want stream.ErrInvalid", args, err)
		}
	}
	if cs := f.named(t, "cuLaunchKernel"); len(cs) != 0 {
		t.Fatalf("refused launches reached the driver: %v", cs)
	}
	if err := s.Launch(fn, cfg, p, uint64(4096), uint32(1)); err != nil {
		t.Fatal(err)
	}
}

func TestFunctionsOfAnUnloadedModuleAreRefused(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s, _ := c.NewStream()
	m, err := c.LoadModule([]byte(kernelsPTX))
	if err != nil {
		t.Fatal(err)
	}
	fn, err := m.Function(kernelAddOne)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unload(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unload(); err != nil {
		t.Fatalf("second Unload = %v; want nil", err)
	}
	if n := len(f.named(t, "cuModuleUnload")); n != 1 {
		t.Fatalf("%d cuModuleUnload calls; want 1", n)
	}
	if _, err := m.Function(kernelAddOne); !errors.Is(err, ErrClosed) {
		t.Errorf("Function of an unloaded module = %v; want ErrClosed", err)
	}
	p, _ := c.Alloc(64)
	if err := s.Launch(fn, LaunchConfig{}, p, uint64(64)); !errors.Is(err, ErrClosed) {
		t.Errorf("Launch of an unloaded kernel = %v; want ErrClosed", err)
	}
}

// ptxRegs matches a register declaration: .reg .b64 %rd<7>;
var ptxRegs = regexp.MustCompile(`\.reg\s+\.\w+\s+%(\w+?)<(\d+)>;`)

// ptxUse matches a numbered register operand: %rd3 (not %ctaid.x).
var ptxUse = regexp.MustCompile(`%([a-z]+)(\d+)\b`)

func TestKernelsPTXIndexesIn64BitsWithDeclaredRegisters(t *testing.T) {
	for _, h := range []string{".version 7.0\n", ".target sm_52\n", ".address_size 64\n"} {
		if !strings.Contains(kernelsPTX, h) {
			t.Errorf("KernelsPTX lacks the directive %q", h)
		}
	}
	entries := strings.Split(kernelsPTX, ".visible .entry ")[1:]
	if len(entries) != 2 {
		t.Fatalf("%d entries; want 2", len(entries))
	}
	for _, e := range entries {
		name := e[:strings.Index(e, "(")]
		declared := map[string]int{}
		for _, m := range ptxRegs.FindAllStringSubmatch(e, -1) {
			declared[m[1]], _ = strconv.Atoi(m[2])
		}
		body := e[strings.Index(e, "{"):]
		for _, m := range ptxUse.FindAllStringSubmatch(body, -1) {
			n, ok := declared[m[1]]
			i, _ := strconv.Atoi(m[2])
			if !ok || i >= n {
				t.Errorf("%s: register %%%s%s used, %%%s<%d> declared", name, m[1], m[2], m[1], n)
			}
		}
		for _, want := range []string{
			".param .u64 " + name + "_n",
			"ld.param.u64        %rd2, [" + name + "_n];",
			"mul.wide.u32        %rd3, %r1, %r2;", // ctaid.x·ntid.x in 64 bits
			"cvt.u64.u32         %rd6, %r3;",      // tid.x widened
			"add.u64             %rd3, %rd3, %rd6;",
			"setp.ge.u64         %p1, %rd3, %rd2;", // against the 64-bit n
			"add.u64             %rd5, %rd4, %rd3;",
		} {
			if !strings.Contains(e, want) {
				t.Errorf("%s lacks %q", name, want)
			}
		}
		if strings.Contains(e, "mad.lo.u32") {
			t.Errorf("%s still computes the index in 32 bits", name)
		}
	}
}

func TestFenceDuringCaptureCoversEarlierDeviceCopies(t *testing.T) {
	f := buildFake(t)
	b := newTestBackend(t, f)
	q := newTestQueue(t, b)
	sa, err := q.Enqueue(nop("a"))
	if err != nil {
		t.Fatal(err)
	}
	src, _ := b.ctx.Alloc(256)
	dst, _ := b.ctx.Alloc(256)
	if err := q.copyDtoD(dst, src, 256); err != nil {
		t.Fatal(err)
	}
	f.logClear()
	if err := q.BeginCapture(7); err != nil {
		t.Fatal(err)
	}
	fe, err := q.Fence()
	if err != nil {
		t.Fatal(err)
	}
	if fe.Seq != sa+1 {
		t.Fatalf("fence during the capture = %d; want %d (a step for the copy before it)", fe.Seq, sa+1)
	}
	cs := f.calls(t)
	rec, begin := indexOf(cs, "cuEventRecord", 0), indexOf(cs, "cuStreamBeginCapture_v2", 0)
	if rec < 0 || begin < 0 || rec > begin {
		t.Fatalf("want cuEventRecord before cuStreamBeginCapture_v2: %v", cs)
	}
	if _, err := q.EndCapture(7, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(context.Background(), fe); err != nil {
		t.Fatal(err)
	}
}

func TestRawHandlesTolerateSecondDestroyAndUseAfterClose(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	x, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Fence()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := g.Destroy(); err != nil {
			t.Fatalf("Graph.Destroy #%d = %v", i+1, err)
		}
	}
	if _, err := g.Instantiate(); !errors.Is(err, ErrClosed) {
		t.Errorf("Instantiate of a destroyed graph = %v; want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Objects outlive their stream: destroyed on the device executor.
	for i := 0; i < 2; i++ {
		if err := x.Destroy(); err != nil {
			t.Fatalf("GraphExec.Destroy #%d after Stream.Close = %v", i+1, err)
		}
		if err := e.Destroy(); err != nil {
			t.Fatalf("Event.Destroy #%d after Stream.Close = %v", i+1, err)
		}
	}
	for _, kind := range []string{"events", "graphs", "execs"} {
		if n := int(f.live(kind)); n > 0 {
			t.Errorf("%d %s live", n, kind)
		}
	}
	if n := len(f.named(t, "cuGraphExecDestroy")); n != 1 {
		t.Errorf("%d cuGraphExecDestroy calls; want 1", n)
	}
	calls := map[string]func() error{
		"Synchronize":  s.Synchronize,
		"CopyDtoD":     func() error { return s.CopyDtoD(0, 0, 0) },
		"BeginCapture": s.BeginCapture,
		"LaunchGraph":  func() error { return s.LaunchGraph(x) },
		"NewEvent":     func() error { _, err := s.NewEvent(); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("Stream.%s after Close = %v; want ErrClosed", name, err)
		}
	}
}

func TestStreamJobsQueuedBeforeCloseDoNotTouchTheDestroyedStream(t *testing.T) {
	f := buildFake(t)
	c := f.open(t)
	s, err := c.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	// Hold the executor so that a Synchronize is handed over, then Close
	// begins (closed set) before either runs.
	release := make(chan struct{})
	held := make(chan struct{})
	go s.exec.Do(func() error { close(held); <-release; return nil })
	<-held
	syncErr := make(chan error, 1)
	go func() { syncErr <- s.Synchronize() }()
	// Handing over holds the executor's read lock until the worker takes
	// the job: once the write lock cannot be had, Synchronize is handed over.
	for s.exec.mu.TryLock() {
		s.exec.mu.Unlock()
		runtime.Gosched()
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.isClosed() {
		runtime.Gosched()
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-syncErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("Synchronize handed over before Close = %v; want ErrClosed", err)
	}
	for _, cl := range f.named(t, "cuStreamSynchronize") {
		t.Errorf("the destroyed stream was used: %v", cl)
	}
}

func TestTypedNilFencesAreRefused(t *testing.T) {
	f := buildFake(t)
	b := newTestBackend(t, f)
	q := newTestQueue(t, b)
	host := hostqueue.NewHost()
	defer host.Close()
	inline := hostqueue.NewInline()
	defer inline.Close()
	fences := []stream.Fence{
		{Q: (*queue)(nil), Seq: 1},
		{Q: (*hostqueue.Host)(nil), Seq: 1},
		{Q: (*hostqueue.Inline)(nil), Seq: 1},
	}
	for _, w := range []stream.Queue{q, host, inline} {
		for _, fe := range fences {
			if err := w.Wait(context.Background(), fe); !errors.Is(err, stream.ErrInvalid) {
				t.Errorf("%T.Wait(%T nil) = %v; want stream.ErrInvalid", w, fe.Q, err)
			}
			if err := w.WaitFence(fe); !errors.Is(err, stream.ErrInvalid) {
				t.Errorf("%T.WaitFence(%T nil) = %v; want stream.ErrInvalid", w, fe.Q, err)
			}
		}
	}
	if err := q.Replay(&graphExecutable{}); !errors.Is(err, stream.ErrInvalid) {
		t.Errorf("Replay(&GraphExecutable{}) = %v; want stream.ErrInvalid", err)
	}
	if err := q.Replay((*graphExecutable)(nil)); !errors.Is(err, stream.ErrInvalid) {
		t.Errorf("Replay(nil *GraphExecutable) = %v; want stream.ErrInvalid", err)
	}
}

func TestExecutorIsNotFooledByAReusedThreadID(t *testing.T) {
	e, err := newExecutor("reused", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// The worker's thread has ended; a new thread may get its id. Stand in
	// for that thread: give the executor this (locked) thread's id.
	res := make(chan error, 1)
	ran := false
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		e.tid = threadID()
		res <- e.Do(func() error { ran = true; return nil })
	}()
	if err := <-res; !errors.Is(err, ErrClosed) || ran {
		t.Fatalf("Do on a closed executor from a thread with the worker's id = %v (ran %v); want ErrClosed, not run", err, ran)
	}
}
