package vulkan_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan"
)

// A group count past maxComputeWorkGroupCount is refused at the Dispatch,
// naming the count, the dimension and the limit, for a kernel that is not
// GridStride: the driver would fail the whole submission, and before the
// refusal was there the failure surfaced only at the next Read. 4 Mi items
// at a local size of 64 are 65,536 groups, one past the least limit.
func TestDispatchRefusesAGroupCountPastTheDeviceLimit(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	// The shipped saxpy loaded as a kernel of one item per invocation (no
	// GridStride): Dispatch takes the counts as they are.
	k, err := b.LoadKernel("saxpy, exact cover", mustSPIRV(t, vulkan.KernelSaxpy), vulkan.KernelSpec{Buffers: 2, PushConstants: 8})
	if err != nil {
		t.Fatal(err)
	}
	lim := b.Info().Limits.MaxComputeWorkGroupCount
	s := d.DefaultStream()
	const n = 4 << 20
	cases := []struct {
		dim    int
		groups vulkan.Groups
	}{
		{0, vulkan.GroupsFor(n, 64)},
		{0, vulkan.Groups{X: lim[0] + 1, Y: 1, Z: 1}},
		{1, vulkan.Groups{X: 1, Y: lim[1] + 1, Z: 1}},
		{2, vulkan.Groups{X: 1, Y: 1, Z: lim[2] + 1}},
	}
	for _, c := range cases {
		count := []uint32{c.groups.X, c.groups.Y, c.groups.Z}[c.dim]
		if lim[c.dim] == math.MaxUint32 || count <= lim[c.dim] {
			continue // the device runs this many (GroupsFor(4 Mi, 64) on a device above 65,535)
		}
		x, y := mustAlloc(t, s, 4096), mustAlloc(t, s, 4096)
		uses := []gpumem.Use{{Buffer: x, Access: gpumem.Read}, {Buffer: y, Access: gpumem.ReadWrite}}
		got := errors.New("the op did not run")
		if err := vulkan.Enqueue(s, "too many groups", uses, func(op *vulkan.Op) error {
			got = op.Dispatch(k, c.groups, []vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n), float32(2)))
			return got
		}); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		var ae *vulkan.ArgError
		if !errors.Is(got, vulkan.ErrWorkGroupCount) || !errors.Is(got, vulkan.ErrArgs) || !errors.As(got, &ae) {
			t.Errorf("Dispatch of %+v = %v, want an *ArgError matching ErrWorkGroupCount and ErrArgs", c.groups, got)
			continue
		}
		for _, want := range []string{
			fmt.Sprintf("workgroup count %d", count),
			fmt.Sprintf("dimension %d", c.dim),
			fmt.Sprintf("limit of %d", lim[c.dim]),
		} {
			if !strings.Contains(got.Error(), want) {
				t.Errorf("Dispatch of %+v = %q, want it to name %q", c.groups, got, want)
			}
		}
	}
	// A refusal for anything else is no group-count refusal.
	x := mustAlloc(t, s, 4096)
	var got error
	if err := vulkan.Enqueue(s, "zero groups", []gpumem.Use{{Buffer: x, Access: gpumem.ReadWrite}}, func(op *vulkan.Op) error {
		got = op.Dispatch(k, vulkan.Groups{X: 0, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0), vulkan.Use(0)}, vulkan.Push(uint32(1), float32(1)))
		return got
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got, vulkan.ErrArgs) || errors.Is(got, vulkan.ErrWorkGroupCount) {
		t.Errorf("Dispatch of 0 groups = %v, want ErrArgs and not ErrWorkGroupCount", got)
	}
}

// The shipped kernels stride over the grid: saxpy over more items than
// 65,535 groups of 64 cover, with GroupsFor's count (past the limit on a
// device with the least one), gives every item its result exactly once.
func TestShippedSaxpyCoversMoreItemsThanTheGroupLimit(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	saxpy := mustKernel(t, b, vulkan.KernelSaxpy)
	s := d.DefaultStream()
	const n = vulkan.MaxStrideGroups*64 + 4097
	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i], ys[i] = float32(i%1000), float32(i%777)
	}
	x, y := mustAlloc(t, s, 4*n), mustAlloc(t, s, 4*n)
	mustWrite(t, x, f32bytes(xs))
	mustWrite(t, y, f32bytes(ys))
	if g := vulkan.GroupsFor(n, 64); g.X <= vulkan.MaxStrideGroups {
		t.Fatalf("GroupsFor(%d, 64) = %d groups, want more than %d", n, g.X, vulkan.MaxStrideGroups)
	}
	var dispatchErr error
	err := vulkan.Enqueue(s, "saxpy", []gpumem.Use{{Buffer: x, Access: gpumem.Read}, {Buffer: y, Access: gpumem.ReadWrite}}, func(op *vulkan.Op) error {
		dispatchErr = op.Dispatch(saxpy, vulkan.GroupsFor(n, 64), []vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n), float32(3)))
		return dispatchErr
	})
	if err != nil || dispatchErr != nil {
		t.Fatalf("Enqueue: %v; Dispatch: %v", err, dispatchErr)
	}
	got, err := y.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range n {
		want := 3*xs[i] + ys[i]
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != want {
			if bad++; bad <= 5 {
				t.Errorf("y[%d] = %v, want %v", i, v, want)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d items wrong", bad, n)
	}
}

// With fewer groups than items need, each invocation loops: add_u32 adds
// once to every item, and reduce_u32 writes every block's sum.
func TestShippedKernelsLoopOverTheGridWithFewGroups(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	add := mustKernel(t, b, vulkan.KernelAddU32)
	reduce := mustKernel(t, b, vulkan.KernelReduceU32)
	s := d.DefaultStream()
	const n = 200003 // 782 blocks of 256, the last partial
	vs := make([]uint32, n)
	for i := range vs {
		vs[i] = uint32(i*7 + 3)
	}
	v := mustAlloc(t, s, 4*n)
	mustWrite(t, v, u32bytes(vs))
	blocks := vulkan.GroupsFor(n, 256).X
	sums := mustAlloc(t, s, 4*uint64(blocks))
	err := vulkan.Enqueue(s, "add then reduce", []gpumem.Use{{Buffer: v, Access: gpumem.ReadWrite}, {Buffer: sums, Access: gpumem.Write}}, func(op *vulkan.Op) error {
		if err := op.Dispatch(add, vulkan.Groups{X: 7, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0)}, vulkan.Push(uint32(n), uint32(5))); err != nil {
			return err
		}
		return op.Dispatch(reduce, vulkan.Groups{X: 3, Y: 1, Z: 1}, []vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n)))
	})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]uint32, n)
	for i := range want {
		want[i] = vs[i] + 5
	}
	wantBytes(t, v, u32bytes(want))
	wantSums := make([]uint32, blocks)
	for i, x := range want {
		wantSums[i/256] += x
	}
	wantBytes(t, sums, u32bytes(wantSums))
}

// A spec that says GridStride for a module that does not read
// gl_NumWorkGroups is refused: Dispatch would cap its groups and the
// kernel, not looping, would leave items undone. The module is
// testdata/once.spv, committed and embedded in the test binary (no glslc
// needed here; TestCommittedSPIRVMatchesAFreshCompile checks it), and
// loaded without GridStride it runs: one item per invocation, checked
// with Write and Read.
func TestLoadKernelRefusesGridStrideForAModuleThatDoesNotLoop(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	code := vulkan.NonLoopingSPIRV()
	_, err := b.LoadKernel("once", code, vulkan.KernelSpec{Buffers: 1, PushConstants: 8, GridStride: true})
	var ae *vulkan.ArgError
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "gl_NumWorkGroups") {
		t.Errorf("LoadKernel(GridStride, a module without gl_NumWorkGroups) = %v, want an *ArgError naming gl_NumWorkGroups", err)
	}
	k, err := b.LoadKernel("once", code, vulkan.KernelSpec{Buffers: 1, PushConstants: 8})
	if err != nil {
		t.Fatalf("LoadKernel without GridStride: %v", err)
	}
	defer func() {
		if err := k.Close(); err != nil {
			t.Error(err)
		}
	}()
	s := d.DefaultStream()
	const n = 1000
	v := mustAlloc(t, s, 4*n)
	vs := make([]uint32, n)
	for i := range vs {
		vs[i] = uint32(i)
	}
	mustWrite(t, v, u32bytes(vs))
	err = vulkan.Enqueue(s, "once", []gpumem.Use{{Buffer: v, Access: gpumem.ReadWrite}}, func(op *vulkan.Op) error {
		return op.Dispatch(k, vulkan.GroupsFor(n, 64), []vulkan.Binding{vulkan.Use(0)}, vulkan.Push(uint32(n), uint32(3)))
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range vs {
		vs[i] += 3
	}
	wantBytes(t, v, u32bytes(vs))
}

func TestGroupsForCoversEveryItem(t *testing.T) {
	for _, c := range []struct {
		n     uint64
		local uint32
		want  uint32
	}{
		{0, 64, 0},
		{1, 64, 1},
		{64, 64, 1},
		{65, 64, 2},
		{4 << 20, 64, 65536},
		{10, 0, 10}, // local 0 counts as 1
		{math.MaxUint64, 1, math.MaxUint32},
		{math.MaxUint64, 64, math.MaxUint32},
	} {
		if g := vulkan.GroupsFor(c.n, c.local); g != (vulkan.Groups{X: c.want, Y: 1, Z: 1}) {
			t.Errorf("GroupsFor(%d, %d) = %+v, want X %d", c.n, c.local, g, c.want)
		}
	}
}
