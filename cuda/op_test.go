//go:build linux

package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/stream"
)

// userPTX is a module of the user's own (testdata/user.ptx): saxpy and
// scalars.
func userPTX(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "user.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadUser loads user.ptx into the backend's context and returns its
// kernels; the module is unloaded when the test ends.
func loadUser(t testing.TB, b *Backend) (saxpy, scalars *Function) {
	t.Helper()
	m, err := b.devContext().LoadModule(userPTX(t))
	if err != nil {
		t.Fatalf("LoadModule(user.ptx): %v", err)
	}
	t.Cleanup(func() { m.Unload() })
	if saxpy, err = m.Function("saxpy"); err != nil {
		t.Fatal(err)
	}
	if scalars, err = m.Function("scalars"); err != nil {
		t.Fatal(err)
	}
	return saxpy, scalars
}

func floats(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func unfloats(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// saxpyInputs returns x and y of n floats whose saxpy results are exact
// (small integers), so the GPU's fma and the host's a*x+y agree bit for bit.
func saxpyInputs(n int) (x, y []float32) {
	x, y = make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(i % 1000)
		y[i] = float32(i % 7)
	}
	return x, y
}

func saxpyWant(a float32, x, y []float32, times int) []float32 {
	out := make([]float32, len(y))
	for i := range y {
		out[i] = y[i] + float32(times)*a*x[i]
	}
	return out
}

// enqueueSaxpy runs saxpy over all of y (ReadWrite) with x (Read) on s.
func enqueueSaxpy(t testing.TB, s *gpumem.Stream, f *Function, a float32, x, y gpumem.Buffer) error {
	t.Helper()
	n := y.Size() / 4
	cfg, err := Linear(n, 128)
	if err != nil {
		t.Fatal(err)
	}
	uses := []gpumem.Use{{Buffer: x, Access: gpumem.Read}, {Buffer: y, Access: gpumem.ReadWrite}}
	return Enqueue(s, "saxpy", uses, func(op *Op) error {
		return op.Launch(f, cfg, Val(n), Val(a), Use(0), Use(1))
	})
}

// A user PTX module loads, its parameters are known (from the driver, or
// from the PTX without cuFuncGetParamInfo), and its kernel launched inside
// an op gets a buffer's address, a sub-range's address and scalars of every
// width, each in its width.
func TestUserKernelLaunchesInsideAnOpWithAddressesAndScalarsOfEachWidth(t *testing.T) {
	for _, tc := range []struct {
		name    string
		defines []string
		from    string
	}{
		{"param-info", nil, "cuFuncGetParamInfo"},
		{"module-api+ptx-params", []string{"FAKE_NO_LIBRARY", "FAKE_NO_PARAM_INFO"}, "the PTX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := buildFake(t, tc.defines...)
			d, b := openDevice(t, Options{Library: f.path})
			saxpy, scalars := loadUser(t, b)
			if sizes, known := scalars.Params(); !known || !reflect.DeepEqual(sizes, []uintptr{8, 1, 1, 2, 2, 4, 4, 8, 8, 4, 8}) || scalars.paramsFrom != tc.from {
				t.Fatalf("scalars' parameters = %v (known %v, from %q); want the 11 widths from %s", sizes, known, scalars.paramsFrom, tc.from)
			}
			s := d.DefaultStream()
			out := mustAlloc(t, s, 4096)
			mustWrite(t, out, make([]byte, 4096))
			const off = 1024
			err := Enqueue(s, "scalars", []gpumem.Use{{Buffer: out, Access: gpumem.Write}}, func(op *Op) error {
				return op.Launch(scalars, LaunchConfig{}, UseAt(0, off),
					Val(uint8(0xA1)), Val(int8(-2)), Val(uint16(0xB2C3)), Val(int16(-4)),
					Val(uint32(0xD4E5F607)), Val(int32(-8)), Val(uint64(0x1122334455667788)), Val(int64(-9)),
					Val(float32(1.5)), Val(float64(-2.25)))
			})
			if err != nil {
				t.Fatal(err)
			}
			got := mustRead(t, out)[off : off+80]
			want := make([]byte, 80)
			want[0] = 0xA1
			want[8] = 0xFE
			binary.LittleEndian.PutUint16(want[16:], 0xB2C3)
			binary.LittleEndian.PutUint16(want[24:], 0xFFFC)
			binary.LittleEndian.PutUint32(want[32:], 0xD4E5F607)
			binary.LittleEndian.PutUint32(want[40:], 0xFFFFFFF8)
			binary.LittleEndian.PutUint64(want[48:], 0x1122334455667788)
			binary.LittleEndian.PutUint64(want[56:], ^uint64(8))
			binary.LittleEndian.PutUint32(want[64:], math.Float32bits(1.5))
			binary.LittleEndian.PutUint64(want[72:], math.Float64bits(-2.25))
			if !bytes.Equal(got, want) {
				t.Fatalf("scalars wrote\n% x\nwant\n% x", got, want)
			}
			if cl := f.last(t, "cuLaunchKernel"); cl.args["p0"] != hex(outPtr(t, s, out)+off) {
				t.Fatalf("cuLaunchKernel p0 = %s; want the use's address + %d (%s)", cl.args["p0"], off, hex(outPtr(t, s, out)+off))
			}

			x, y := saxpyInputs(2048)
			xb, yb := mustAlloc(t, s, 4*2048), mustAlloc(t, s, 4*2048)
			mustWrite(t, xb, floats(x))
			mustWrite(t, yb, floats(y))
			if err := enqueueSaxpy(t, s, saxpy, 3, xb, yb); err != nil {
				t.Fatal(err)
			}
			if got := unfloats(mustRead(t, yb)); !reflect.DeepEqual(got, saxpyWant(3, x, y, 1)) {
				t.Fatalf("saxpy result differs from the host's")
			}
		})
	}
}

// outPtr returns buf's current device address, read inside an op.
func outPtr(t testing.TB, s *gpumem.Stream, buf gpumem.Buffer) uintptr {
	t.Helper()
	var p uintptr
	err := Enqueue(s, "address", []gpumem.Use{{Buffer: buf, Access: gpumem.Read}}, func(op *Op) error {
		var err error
		p, _, err = op.DevicePtr(0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A user kernel on one stream reading what another stream's op wrote is
// ordered after it on the device: the launch's stream waits on the
// writer's event first.
func TestUserKernelIsInStreamOrderWithAnotherStreamsOp(t *testing.T) {
	f := buildFake(t)
	d, b := openDevice(t, Options{Library: f.path})
	saxpy, _ := loadUser(t, b)
	s0 := d.DefaultStream()
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	x, y := saxpyInputs(4096)
	xb, yb := mustAlloc(t, s0, 4*4096), mustAlloc(t, s1, 4*4096)
	mustWrite(t, yb, floats(y))
	if err := s1.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	w := s0.Queue().(*queue)
	w.gate.Lock() // s0's write stays unobserved: s1 must wait on the device
	mustWrite(t, xb, floats(x))
	ev := f.last(t, "cuEventRecord").args["event"]
	f.logClear()
	err = enqueueSaxpy(t, s1, saxpy, 2, xb, yb)
	w.gate.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	calls := f.calls(t)
	wait, launch := indexOf(calls, "cuStreamWaitEvent", 0), indexOf(calls, "cuLaunchKernel", 0)
	s1h := hex(s1.Queue().(*queue).s.h)
	if wait < 0 || launch < 0 || wait > launch || calls[wait].args["event"] != ev || calls[wait].args["stream"] != s1h || calls[launch].args["stream"] != s1h {
		t.Fatalf("calls %v; want s1's stream waiting on s0's write event %s, then the launch on s1", calls, ev)
	}
	if got := unfloats(mustRead(t, yb)); !reflect.DeepEqual(got, saxpyWant(2, x, y, 1)) {
		t.Fatal("saxpy after the other stream's write differs from the host's")
	}
}

// A user kernel captured into a graph, with a library-style call on the
// op's CUstream beside it, replays after a relocation moved other buffers.
func TestUserKernelInACapturedGraphLaunchedAfterARelocation(t *testing.T) {
	forEachTarget(t, func(t *testing.T, d *gpumem.Device, b *Backend, f *fakeDriver) {
		ctx := context.Background()
		saxpy, _ := loadUser(t, b)
		s := d.DefaultStream()
		const n = 64 << 10
		x, y := saxpyInputs(n)
		xb, yb, flag := mustAlloc(t, s, 4*n), mustAlloc(t, s, 4*n), mustAlloc(t, s, 256)
		mustWrite(t, xb, floats(x))
		mustWrite(t, yb, floats(y))
		cfg, _ := Linear(n, 256)
		memset := b.ctx.drv.CuMemsetD8Async
		g, err := s.Capture(ctx, func(_ context.Context, s *gpumem.Stream) error {
			uses := []gpumem.Use{{Buffer: xb, Access: gpumem.Read}, {Buffer: yb, Access: gpumem.ReadWrite}, {Buffer: flag, Access: gpumem.Write}}
			return Enqueue(s, "step", uses, func(op *Op) error {
				if err := op.Launch(saxpy, cfg, Val(uint64(n)), Val(float32(2)), Use(0), Use(1)); err != nil {
					return err
				}
				// A "library" enqueueing on the op's stream over a use.
				h, err := op.StreamHandle()
				if err != nil {
					return err
				}
				p, size, err := op.DevicePtr(2)
				if err != nil {
					return err
				}
				return b.ctx.drv.check("cuMemsetD8Async", memset(p, 0x5A, uintptr(size), h))
			})
		})
		if err != nil {
			t.Fatalf("Capture: %v", err)
		}
		// A buffer on another page, then growth: a relocation moves it
		// while the graph's page stays guarded.
		keepWant := pattern(mib, 9)
		keep := mustAlloc(t, s, mib)
		mustWrite(t, keep, keepWant)
		mustFree(t, mustAlloc(t, s, 10*mib))
		if err := d.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
		if d.Stats().Relocation.Moves < 1 {
			t.Fatal("Cleanup moved nothing; want a relocation before the graph's launches")
		}
		for range 5 {
			if err := g.Launch(ctx); err != nil {
				t.Fatalf("graph launch after relocation: %v", err)
			}
		}
		if got := unfloats(mustRead(t, yb)); !reflect.DeepEqual(got, saxpyWant(2, x, y, 6)) { // warmup + 5
			t.Fatal("y after the warmup and 5 graph launches differs from the host's")
		}
		wantBytes(t, flag, bytes.Repeat([]byte{0x5A}, 256))
		wantBytes(t, keep, keepWant)
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// badPTX does not compile: its body is never closed.
const badPTX = `.version 7.0
.target sm_52
.address_size 64

.visible .entry broken(
	.param .u64 broken_p
)
{
	ret;
`

// A PTX the JIT refuses fails LoadModule with a *JITError carrying the
// JIT's log, with or without the library API, and when the driver defers
// the JIT to the first kernel lookup (FAKE_LAZY_JIT: LoadModule looks up
// every entry before it returns). A binary image the driver refuses fails
// LoadModule, or, loaded lazily, the Function that loads its kernel, with
// a *JITError too.
func TestJITFailureReturnsTheLog(t *testing.T) {
	for _, defines := range [][]string{nil, {"FAKE_NO_LIBRARY"}, {"FAKE_LAZY_JIT"}} {
		lazy := len(defines) > 0 && defines[0] == "FAKE_LAZY_JIT"
		t.Run(strings.Join(append([]string{"fake"}, defines...), "-"), func(t *testing.T) {
			f := buildFake(t, defines...)
			c := f.open(t)
			_, err := c.LoadModule([]byte(badPTX))
			var je *JITError
			if !errors.As(err, &je) || je.Err.Code != 218 || je.Kind != ImagePTX {
				t.Fatalf("LoadModule(bad PTX) = %v; want a *JITError of CUDA_ERROR_INVALID_PTX", err)
			}
			if op := map[bool]string{false: "cuModuleLoadDataEx", true: "cuModuleGetFunction"}[lazy]; je.Err.Op != op {
				t.Errorf("the refusal came from %s; want %s", je.Err.Op, op)
			}
			if !strings.Contains(je.Log, "line 8") || !strings.Contains(err.Error(), je.Log) {
				t.Fatalf("JIT log %q (error %q); want the log, naming line 8, in the error", je.Log, err)
			}
			if n := f.liveCount(t, "modules"); n != 0 {
				t.Fatalf("%d modules live after a failed load", n)
			}
			if cs := f.named(t, "cuLibraryLoadData"); len(cs) != 0 {
				t.Fatalf("LoadModule called cuLibraryLoadData: %v", cs)
			}
			cubin := append([]byte{0x7f, 'E', 'L', 'F'}, make([]byte, 60)...)
			m, err := c.LoadModule(cubin)
			if lazy {
				if err != nil {
					t.Fatalf("LoadModule(cubin) on a lazy fake = %v; want it loaded, refused at the lookup", err)
				}
				_, err = m.Function("k")
				defer m.Unload()
			}
			if !errors.As(err, &je) || je.Kind != ImageCubin || je.Err.Code != 209 {
				t.Fatalf("loading a cubin on the fake = %v; want a *JITError of CUDA_ERROR_NO_BINARY_FOR_GPU for a cubin", err)
			}
			if !lazy && je.Log == "" {
				t.Fatalf("LoadModule(cubin) on the fake = %v; want the fake's log", err)
			}
		})
	}
	t.Run("real", func(t *testing.T) {
		c, err := openContext(Options{Library: realLibrary(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		t.Logf("driver %d, features %+v, CUDA_MODULE_LOADING=%q", c.DriverVersion(), c.Features(), os.Getenv("CUDA_MODULE_LOADING"))
		m, err := c.LoadModule([]byte(badPTX))
		var je *JITError
		if !errors.As(err, &je) || je.Log == "" {
			if m != nil {
				_, ferr := m.Function("broken")
				t.Logf("Function(\"broken\") of the module the driver accepted = %v", ferr)
				m.Unload()
			}
			t.Fatalf("LoadModule(bad PTX) on the GPU = %v; want a *JITError with ptxas's log", err)
		}
		t.Logf("LoadModule(bad PTX) on the GPU: %v", err)
		// A good module still loads and resolves after the refusal.
		good, err := c.LoadModule([]byte(kernelsPTX))
		if err != nil {
			t.Fatal(err)
		}
		defer good.Unload()
		if _, err := good.Function(kernelAddOne); err != nil {
			t.Fatal(err)
		}
	})
}

// Wrong argument lists are refused before the driver sees them, with an
// *ArgError, whether the parameters come from the driver or the PTX; the
// op fails and its output reads as unwritten.
func TestWrongArgumentListIsRefused(t *testing.T) {
	for _, defines := range [][]string{nil, {"FAKE_NO_PARAM_INFO"}} {
		t.Run(strings.Join(append([]string{"fake"}, defines...), "-"), func(t *testing.T) {
			f := buildFake(t, defines...)
			d, b := openDevice(t, Options{Library: f.path})
			saxpy, _ := loadUser(t, b)
			s := d.DefaultStream()
			xb, yb := mustAlloc(t, s, 4096), mustAlloc(t, s, 4096)
			mustWrite(t, xb, make([]byte, 4096))
			mustWrite(t, yb, make([]byte, 4096))
			cfg, _ := Linear(1024, 0)
			for _, tc := range []struct {
				name  string
				args  []Arg
				index int
			}{
				{"too few", []Arg{Val(uint64(1024)), Val(float32(2)), Use(0)}, -1},
				{"too many", []Arg{Val(uint64(1024)), Val(float32(2)), Use(0), Use(1), Use(1)}, -1},
				{"n as 4 bytes", []Arg{Val(uint32(1024)), Val(float32(2)), Use(0), Use(1)}, 0},
				{"a as a double", []Arg{Val(uint64(1024)), Val(2.0), Use(0), Use(1)}, 1},
				{"a use the op lacks", []Arg{Val(uint64(1024)), Val(float32(2)), Use(0), Use(2)}, 3},
				{"offset past the use", []Arg{Val(uint64(1024)), Val(float32(2)), Use(0), UseAt(1, 4096)}, 3},
				{"zero Arg", []Arg{Val(uint64(1024)), Val(float32(2)), {}, Use(1)}, 2},
			} {
				f.logClear()
				var launchErr error
				uses := []gpumem.Use{{Buffer: xb, Access: gpumem.Read}, {Buffer: yb, Access: gpumem.ReadWrite}}
				err := Enqueue(s, "saxpy", uses, func(op *Op) error {
					launchErr = op.Launch(saxpy, cfg, tc.args...)
					return launchErr
				})
				if err != nil {
					t.Fatalf("%s: Enqueue: %v", tc.name, err)
				}
				var ae *ArgError
				if !errors.As(launchErr, &ae) || ae.Index != tc.index || !errors.Is(launchErr, ErrArgs) || !errors.Is(launchErr, stream.ErrInvalid) {
					t.Errorf("%s: Launch = %v; want an *ArgError for argument %d matching ErrArgs", tc.name, launchErr, tc.index)
				}
				if cs := f.named(t, "cuLaunchKernel"); len(cs) != 0 {
					t.Fatalf("%s: a refused launch reached the driver: %v", tc.name, cs)
				}
				if _, err := yb.Read(context.Background()); !errors.Is(err, gpumem.ErrUnwritten) {
					t.Fatalf("%s: reading the failed op's output = %v; want ErrUnwritten", tc.name, err)
				}
				mustWrite(t, yb, make([]byte, 4096)) // written again for the next case
			}
		})
	}
}

// An Op is the run function's only: after it returns every method fails
// with ErrOpEnded, and from another goroutine a call is refused at once
// instead of deadlocking on the busy executor. A stream of another backend
// is refused.
func TestOpIsValidOnlyInsideItsRunFunction(t *testing.T) {
	f := buildFake(t)
	d, b := openDevice(t, Options{Library: f.path})
	saxpy, _ := loadUser(t, b)
	s := d.DefaultStream()
	buf := mustAlloc(t, s, 4096)
	mustWrite(t, buf, make([]byte, 4096))
	var kept *Op
	var fromOther error
	err := Enqueue(s, "keep", []gpumem.Use{{Buffer: buf, Access: gpumem.Read}}, func(op *Op) error {
		kept = op
		done := make(chan error, 1)
		go func() { _, err := op.StreamHandle(); done <- err }()
		select {
		case fromOther = <-done:
		case <-time.After(10 * time.Second):
			fromOther = errors.New("deadlock")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(fromOther, stream.ErrInvalid) {
		t.Fatalf("StreamHandle from another goroutine = %v; want stream.ErrInvalid", fromOther)
	}
	if _, err := kept.StreamHandle(); !errors.Is(err, ErrOpEnded) {
		t.Errorf("StreamHandle after the op = %v; want ErrOpEnded", err)
	}
	if _, _, err := kept.DevicePtr(0); !errors.Is(err, ErrOpEnded) {
		t.Errorf("DevicePtr after the op = %v; want ErrOpEnded", err)
	}
	if err := kept.Launch(saxpy, LaunchConfig{}, Val(uint64(0)), Val(float32(0)), Use(0), Use(0)); !errors.Is(err, ErrOpEnded) {
		t.Errorf("Launch after the op = %v; want ErrOpEnded", err)
	}

	host, err := gpumem.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := Enqueue(host.DefaultStream(), "x", nil, func(*Op) error { return nil }); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Enqueue on a host stream = %v; want stream.ErrInvalid", err)
	}
}

// The PTX parameter reader understands what nvcc and hand-written PTX
// declare, and leaves out entries it cannot read rather than guessing.
func TestPTXParams(t *testing.T) {
	src := `
	// .entry commented(.param .u64 x)
	.visible .entry a(
		.param .u64 .ptr .global .align 8 a_p,
		.param .align 16 .b8 a_s[24],
		.param .f16 a_h,
		.param .s8 a_c
	) { ret; }
	.entry b() { ret; }
	.entry c { ret; }
	.entry d(.param .f16x2 d_v) { ret; }
	/* .entry e(.param .u64 x) */
	`
	got := ptxParams(src)
	want := map[string][]uintptr{"a": {8, 24, 2, 1}, "b": {}, "c": {}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ptxParams = %v; want %v", got, want)
	}
	if KindOf([]byte(src)) != ImagePTX || KindOf([]byte{0x50, 0xed, 0x55, 0xba, 1}) != ImageFatbin {
		t.Fatal("KindOf misreads PTX or a fatbin")
	}
}
