package vulkan_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan"
)

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u32bytes(v []uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
	return b
}

func mustKernel(t testing.TB, b *vulkan.Backend, name string) *vulkan.Kernel {
	t.Helper()
	k, err := b.LoadShipped(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSaxpyDispatchesOnTheResolvedBuffers(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	saxpy := mustKernel(t, b, vulkan.KernelSaxpy)
	s := d.DefaultStream()
	const n = 10000
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i), float32(2*i+1)
	}
	x, y := mustAlloc(t, s, 4*n), mustAlloc(t, s, 4*n)
	mustWrite(t, x, f32bytes(xs))
	mustWrite(t, y, f32bytes(ys))
	err := vulkan.Enqueue(s, "saxpy", []gpumem.Use{{Buffer: x, Access: gpumem.Read}, {Buffer: y, Access: gpumem.ReadWrite}}, func(op *vulkan.Op) error {
		return op.Dispatch(saxpy, vulkan.GroupsFor(n, 64), []vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n), float32(3)))
	})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, n)
	for i := range want {
		want[i] = 3*xs[i] + ys[i]
	}
	wantBytes(t, y, f32bytes(want))
}

func TestReductionSumsOnTheDevice(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	reduce := mustKernel(t, b, vulkan.KernelReduceU32)
	s := d.DefaultStream()
	const n = 200000
	vs := make([]uint32, n)
	var want uint32
	for i := range vs {
		vs[i] = uint32(i*7 + 3)
		want += vs[i]
	}
	in := mustAlloc(t, s, 4*n)
	mustWrite(t, in, u32bytes(vs))
	g1 := vulkan.GroupsFor(n, 256)            // 782 partial sums
	g2 := vulkan.GroupsFor(uint64(g1.X), 256) // 4
	part := mustAlloc(t, s, 4*uint64(g1.X))
	out := mustAlloc(t, s, 4*uint64(g2.X))
	uses := []gpumem.Use{{Buffer: in, Access: gpumem.Read}, {Buffer: part, Access: gpumem.ReadWrite}, {Buffer: out, Access: gpumem.Write}}
	err := vulkan.Enqueue(s, "reduce", uses, func(op *vulkan.Op) error {
		if err := op.Dispatch(reduce, g1, []vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n))); err != nil {
			return err
		}
		return op.Dispatch(reduce, g2, []vulkan.Binding{vulkan.Use(1), vulkan.Use(2)}, vulkan.Push(g1.X))
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := out.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var sum uint32
	for i := range g2.X {
		sum += binary.LittleEndian.Uint32(got[4*i:])
	}
	if sum != want {
		t.Fatalf("device sum %d, host sum %d", sum, want)
	}
}

func TestDispatchArgumentsAreCheckedBeforeTheDriver(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	saxpy := mustKernel(t, b, vulkan.KernelSaxpy)
	s := d.DefaultStream()
	for name, call := range map[string]func(op *vulkan.Op) error{
		"one buffer for two": func(op *vulkan.Op) error {
			return op.Dispatch(saxpy, vulkan.Groups{X: 1, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0)}, vulkan.Push(uint32(1), float32(1)))
		},
		"a use the op lacks": func(op *vulkan.Op) error {
			return op.Dispatch(saxpy, vulkan.Groups{X: 1, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(1), float32(1)))
		},
		"push constants too short": func(op *vulkan.Op) error {
			return op.Dispatch(saxpy, vulkan.Groups{X: 1, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0), vulkan.Use(0)}, vulkan.Push(uint32(1)))
		},
		"zero groups": func(op *vulkan.Op) error {
			return op.Dispatch(saxpy, vulkan.Groups{X: 0, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0), vulkan.Use(0)}, vulkan.Push(uint32(1), float32(1)))
		},
		"misaligned window": func(op *vulkan.Op) error {
			return op.Dispatch(saxpy, vulkan.Groups{X: 1, Y: 1, Z: 1}, []vulkan.Binding{vulkan.UseRange(0, 4, 64), vulkan.Use(0)}, vulkan.Push(uint32(1), float32(1)))
		},
		"window past the use": func(op *vulkan.Op) error {
			return op.Dispatch(saxpy, vulkan.Groups{X: 1, Y: 1, Z: 1}, []vulkan.Binding{vulkan.UseRange(0, 0, 8192), vulkan.Use(0)}, vulkan.Push(uint32(1), float32(1)))
		},
		"push constants past the block": func(op *vulkan.Op) error {
			return op.Dispatch(saxpy, vulkan.Groups{X: 1, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0), vulkan.Use(0)}, vulkan.Push(uint32(1), float32(1), uint32(7)))
		},
		"a string push constant": func(op *vulkan.Op) error {
			return op.Dispatch(saxpy, vulkan.Groups{X: 1, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0), vulkan.Use(0)}, vulkan.Push("one", float32(1)))
		},
	} {
		// A fresh buffer each time: gpumem skips ops on what a failed op
		// wrote.
		x := mustAlloc(t, s, 4096)
		uses := []gpumem.Use{{Buffer: x, Access: gpumem.ReadWrite}}
		got := errors.New("the op did not run")
		if err := vulkan.Enqueue(s, name, uses, func(op *vulkan.Op) error { got = call(op); return got }); err != nil {
			t.Fatalf("%s: Enqueue: %v", name, err)
		}
		var ae *vulkan.ArgError
		if !errors.Is(got, vulkan.ErrArgs) || !errors.As(got, &ae) {
			t.Errorf("%s: Dispatch = %v, want an *ArgError", name, got)
		}
	}
	if _, err := b.LoadKernel("saxpy as one buffer", mustSPIRV(t, vulkan.KernelSaxpy), vulkan.KernelSpec{Buffers: 1, PushConstants: 8}); !errors.Is(err, vulkan.ErrArgs) {
		t.Fatalf("LoadKernel with a spec the module contradicts = %v, want ErrArgs", err)
	}
	if _, err := b.LoadKernel("text", []byte("#version 450 is GLSL, not SPIR-V"), vulkan.KernelSpec{}); !errors.Is(err, vulkan.ErrArgs) {
		t.Fatalf("LoadKernel of GLSL text = %v, want ErrArgs", err)
	}
}

// The spec's push constants are checked against the module's
// push-constant block (8 bytes for saxpy: uint n, float a): a larger spec
// would let Dispatch push bytes the shader never reads, a smaller one
// leave the shader reading past what is pushed; both are an *ArgError
// naming the block's size, before the driver sees the module.
func TestLoadKernelRefusesPushConstantsOtherThanTheModulesBlock(t *testing.T) {
	_, b := openDevice(t, vulkan.Options{})
	for _, n := range []uint32{0, 4, 12, 16} {
		_, err := b.LoadKernel("saxpy", mustSPIRV(t, vulkan.KernelSaxpy), vulkan.KernelSpec{Buffers: 2, PushConstants: n})
		var ae *vulkan.ArgError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), "push-constant block is 8 bytes") {
			t.Errorf("LoadKernel(saxpy, PushConstants %d) = %v, want an *ArgError naming the 8-byte block", n, err)
		}
	}
	k, err := b.LoadKernel("saxpy", mustSPIRV(t, vulkan.KernelSaxpy), vulkan.KernelSpec{Buffers: 2, PushConstants: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
}

func mustSPIRV(t testing.TB, name string) []byte {
	t.Helper()
	c, err := vulkan.ShippedSPIRV(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// On host-visible pages (lavapipe's) Buffer.Map maps device memory: after
// the buffer's pending dispatch, the mapping shows its result; bytes
// written through it reach the next dispatch once released. Where pages
// are not host-visible (a discrete GPU's) Map is refused with
// gpumem.ErrNotSupported by design, which is checked, and the rest skips:
// there is no mapping to look through (the dispatches' results through
// Write and Read are checked by the other kernel tests).
func TestMapShowsTheDevicesBytesWhereThePagesAreHostVisible(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	if !b.PagesHostVisible() {
		x := mustAlloc(t, d.DefaultStream(), 64)
		if _, err := x.Map(context.Background()); !errors.Is(err, gpumem.ErrNotSupported) {
			t.Fatalf("Map where pages are not host-visible = %v, want gpumem.ErrNotSupported", err)
		}
		t.Skipf("device %q gives pages memory the host cannot map: Map is not supported (checked), nothing to map", b.Info().Name)
	}
	add := mustKernel(t, b, vulkan.KernelAddU32)
	s := d.DefaultStream()
	const n = 1 << 14
	x := mustAlloc(t, s, 4*n)
	vs := make([]uint32, n)
	for i := range vs {
		vs[i] = uint32(i * 3)
	}
	mustWrite(t, x, u32bytes(vs))
	addOnDevice(t, add, s, x, 7)
	m, err := x.Map(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if got := binary.LittleEndian.Uint32(m.Bytes()[4*i:]); got != v+7 {
			t.Fatalf("mapped element %d = %d, want %d (the dispatch's result)", i, got, v+7)
		}
		binary.LittleEndian.PutUint32(m.Bytes()[4*i:], uint32(i))
	}
	m.Release()
	addOnDevice(t, add, s, x, 1)
	want := make([]uint32, n)
	for i := range want {
		want[i] = uint32(i) + 1
	}
	wantBytes(t, x, u32bytes(want))
}

// Op.Copy records device copies between windows of an op's uses, in the
// op's order with its dispatches, and in a capture every launch copies
// again; windows of other sizes, past their use or overlapping are
// refused and nothing is recorded.
func TestOpCopyCopiesWindowsOnTheDevice(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	add := mustKernel(t, b, vulkan.KernelAddU32)
	s := d.DefaultStream()
	ctx := context.Background()
	const n = 4096
	src, dst := mustAlloc(t, s, n), mustAlloc(t, s, n)
	p := pattern(n, 9)
	mustWrite(t, src, p)
	mustWrite(t, dst, make([]byte, n))
	uses := []gpumem.Use{{Buffer: src, Access: gpumem.ReadWrite}, {Buffer: dst, Access: gpumem.Write}}
	// dst = src rotated left by 1000, then src += 1 per u32: the copy
	// reads src before the dispatch changes it.
	rotate := func(op *vulkan.Op) error {
		if err := op.Copy(vulkan.UseRange(1, 0, n-1000), vulkan.UseRange(0, 1000, n-1000)); err != nil {
			return err
		}
		if err := op.Copy(vulkan.UseRange(1, n-1000, 1000), vulkan.UseRange(0, 0, 1000)); err != nil {
			return err
		}
		return op.Dispatch(add, vulkan.GroupsFor(n/4, 64), []vulkan.Binding{vulkan.Use(0)}, vulkan.Push(uint32(n/4), uint32(1)))
	}
	if err := vulkan.Enqueue(s, "rotate", uses, rotate); err != nil {
		t.Fatal(err)
	}
	wantBytes(t, dst, append(append([]byte(nil), p[1000:]...), p[:1000]...))
	wantBytes(t, src, plusU32(p, 1))

	g, err := s.Capture(ctx, func(_ context.Context, s *gpumem.Stream) error {
		return vulkan.Enqueue(s, "copy", uses, func(op *vulkan.Op) error { return op.Copy(vulkan.Use(1), vulkan.Use(0)) })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	mustWrite(t, src, pattern(n, 10))
	if err := g.Launch(ctx); err != nil {
		t.Fatal(err)
	}
	wantBytes(t, dst, pattern(n, 10))
	mustWrite(t, src, pattern(n, 11))
	if err := g.Launch(ctx); err != nil {
		t.Fatal(err)
	}
	wantBytes(t, dst, pattern(n, 11))

	for name, bad := range map[string]func(op *vulkan.Op) error{
		"sizes differ": func(op *vulkan.Op) error { return op.Copy(vulkan.UseRange(1, 0, 16), vulkan.UseRange(0, 0, 32)) },
		"past the use": func(op *vulkan.Op) error { return op.Copy(vulkan.UseRange(1, n-8, 16), vulkan.UseRange(0, 0, 16)) },
		"overlapping":  func(op *vulkan.Op) error { return op.Copy(vulkan.UseRange(0, 8, 64), vulkan.UseRange(0, 0, 64)) },
		"no such use":  func(op *vulkan.Op) error { return op.Copy(vulkan.Use(2), vulkan.Use(0)) },
	} {
		x := mustAlloc(t, s, n)
		got := errors.New("the op did not run")
		if err := vulkan.Enqueue(s, name, []gpumem.Use{{Buffer: x, Access: gpumem.ReadWrite}, {Buffer: dst, Access: gpumem.Write}}, func(op *vulkan.Op) error { got = bad(op); return got }); err != nil {
			t.Fatalf("%s: Enqueue: %v", name, err)
		}
		if !errors.Is(got, stream.ErrInvalid) {
			t.Errorf("%s: Copy = %v, want stream.ErrInvalid", name, got)
		}
	}
}
