// Ops that dispatch compute shaders: the bridge between a gpumem op and
// the device.
//
// A gpumem op's run function runs inside Enqueue, in stream order, after
// the device resolved every use to its current place (after any
// relocation) and ordered the op after the other streams' writers of what
// it reads. What it records through its *Op goes into the op's command
// buffer, submitted when the function returns: ordered exactly as a host
// op's work would be. A failed dispatch fails the op, and gpumem marks
// what it writes as failed, as for any op.

package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/backendkit"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// Op is one running op on a vulkan stream, as its run function sees it
// (see Enqueue). Call its methods only from the run function, before it
// returns.
type Op struct{ k *backendkit.Op[*queue] }

// Enqueue submits an op on s, a stream of a device on the vulkan backend,
// as gpumem's Stream.Enqueue does, with an *Op for run: Dispatch records
// compute shader dispatches over the op's uses. Ordering across streams
// and failure marks hold as for any op. A stream of another backend is
// refused with an error wrapping stream.ErrInvalid.
//
// run runs on the enqueuing goroutine with the device held: like any op
// under a backend that runs ops at enqueue, it may call Free, Clone,
// Window, Stats and Report on the device and gets gpumem.ErrCalledFromOp
// for the rest.
func Enqueue(s *gpumem.Stream, name string, uses []gpumem.Use, run func(op *Op) error) error {
	var k func(*backendkit.Op[*queue]) error
	if run != nil {
		k = func(op *backendkit.Op[*queue]) error { return run(&Op{op}) }
	}
	return backendkit.Enqueue("vulkan", s, name, uses, k)
}

// DeviceAddress returns the buffer device address and size of the op's
// i-th use (for shaders that take addresses, GL_EXT_buffer_reference).
// Valid only until the run function returns: the buffer may move after.
func (op *Op) DeviceAddress(i int) (addr uint64, size uint64, err error) {
	if err := op.live("device address"); err != nil {
		return 0, 0, err
	}
	r, err := op.k.Use("vulkan", i)
	if err != nil {
		return 0, 0, err
	}
	if r.Size > 0 {
		// The shader may reach it through the address: a free waits for
		// this op's step (and for the graph it is recorded into).
		a, err := op.k.Q.b.lookup(r, "device address")
		if err != nil {
			return 0, 0, err
		}
		q := op.k.Q
		q.mu.Lock()
		if q.op != nil {
			q.op.use(a)
		}
		q.mu.Unlock()
	}
	return uint64(r.Ptr), r.Size, nil
}

// live refuses a call after the op returned or from another goroutine.
func (op *Op) live(call string) error {
	return op.k.Live("vulkan", call, op.k.Q.RunsOpsOn(stream.CurrentGoroutine()), ErrOpEnded, "")
}

// Binding binds (a window of) one of the op's uses as a storage buffer.
type Binding struct {
	use      int
	off, len uint64
	whole    bool
}

// Use binds the whole of the op's i-th use.
func Use(i int) Binding { return Binding{use: i, whole: true} }

// UseRange binds size bytes of the op's i-th use from off (relative to the
// use); off must keep the binding at a multiple of
// minStorageBufferOffsetAlignment.
func UseRange(i int, off, size uint64) Binding { return Binding{use: i, off: off, len: size} }

// Groups is a dispatch's workgroup counts.
type Groups struct{ X, Y, Z uint32 }

// GroupsFor returns the 1-D groups covering n items with local size local
// (the shader's local_size_x), one item per invocation: ceil(n/local)
// (local 0 counts as 1), at most 2^32-1.
//
// A device runs at most maxComputeWorkGroupCount groups per dimension:
// 65,535 on many devices (lavapipe's, and the least Vulkan allows), which
// is 4,194,240 items at a local size of 64. Past that, a kernel whose spec
// is GridStride (the shipped ones) still works: Dispatch caps its groups at
// MaxStrideGroups and the kernel's loop covers the rest. For any other
// kernel Dispatch refuses the count with an *ArgError matching
// ErrWorkGroupCount; split the items over several dispatches, or make the
// kernel loop over the grid and declare it GridStride.
func GroupsFor(n uint64, local uint32) Groups {
	l := uint64(max(local, 1))
	g := n / l
	if n%l != 0 {
		g++
	}
	return Groups{X: uint32(min(g, math.MaxUint32)), Y: 1, Z: 1}
}

// Push encodes push constants as std430 lays scalars out in a push
// constant block: each of uint32, int32, float32 (4 bytes) or uint64,
// int64, float64 (8 bytes, aligned to 8), little-endian. Another type is
// refused by Dispatch as an *ArgError.
func Push(vals ...any) PushConstants { return PushConstants{vals: vals} }

// PushConstants are a dispatch's scalars (see Push).
type PushConstants struct{ vals []any }

func (p PushConstants) encode() ([]byte, error) {
	var out []byte
	for i, v := range p.vals {
		switch x := v.(type) {
		case uint32:
			out = binary.LittleEndian.AppendUint32(out, x)
		case int32:
			out = binary.LittleEndian.AppendUint32(out, uint32(x))
		case float32:
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(x))
		case uint64, int64, float64:
			for len(out)%8 != 0 {
				out = append(out, 0)
			}
			var u uint64
			switch y := x.(type) {
			case uint64:
				u = y
			case int64:
				u = uint64(y)
			case float64:
				u = math.Float64bits(y)
			}
			out = binary.LittleEndian.AppendUint64(out, u)
		default:
			return nil, fmt.Errorf("push constant %d is a %T; use uint32, int32, float32, uint64, int64 or float64", i, v)
		}
	}
	return out, nil
}

// Dispatch records k over groups with buffers bound at set 0, bindings 0
// to len(buffers)-1, and push constants. Every argument is checked first:
// a count that differs from the kernel's spec, a use the op does not have,
// a window past its use, an offset off minStorageBufferOffsetAlignment, a
// binding larger than maxStorageBufferRange, push constants of another
// size, or groups of 0 is an *ArgError matching ErrArgs, and nothing is
// recorded.
//
// A group count past the device's maxComputeWorkGroupCount in some
// dimension (65,535 on many devices; Backend.Info().Limits has the
// device's) is refused here, with an *ArgError matching ErrArgs and
// ErrWorkGroupCount that names the count, the dimension and the limit:
// what a driver does with such a count is undefined. A run function that
// returns the refusal fails its op, so the next Read of what the op writes
// reports it too. A GridStride kernel's counts are capped at
// MaxStrideGroups (or the device's limit, if lower) instead, and its loop
// covers the items of the groups not run.
func (op *Op) Dispatch(k *Kernel, groups Groups, buffers []Binding, push PushConstants) error {
	if k == nil {
		return fmt.Errorf("vulkan: op %q: dispatch of a nil *Kernel: %w", op.k.Name, stream.ErrInvalid)
	}
	if err := op.live("dispatch " + k.name); err != nil {
		return err
	}
	b := op.k.Q.b
	if k.b != b {
		return fmt.Errorf("vulkan: op %q: dispatch %s: the kernel was loaded on another backend: %w", op.k.Name, k.name, stream.ErrInvalid)
	}
	bad := func(format string, args ...any) error {
		return &ArgError{Kernel: k.name, Reason: fmt.Sprintf(format, args...)}
	}
	lim := b.dev.info.Limits
	if len(buffers) != k.spec.Buffers {
		return bad("%d buffers bound, the kernel takes %d", len(buffers), k.spec.Buffers)
	}
	pc, err := push.encode()
	if err != nil {
		return bad("%v", err)
	}
	if uint32(len(pc)) != k.spec.PushConstants {
		return bad("%d bytes of push constants, the kernel takes %d", len(pc), k.spec.PushConstants)
	}
	dims := [3]*uint32{&groups.X, &groups.Y, &groups.Z}
	for i, g := range dims {
		limit := lim.MaxComputeWorkGroupCount[i]
		if k.spec.GridStride {
			limit = min(limit, MaxStrideGroups)
			*g = min(*g, limit) // the kernel's loop covers the groups not run
		}
		switch {
		case *g == 0:
			return bad("workgroup count 0 in dimension %d: a dispatch runs at least one group in each dimension", i)
		case *g > limit:
			return &ArgError{Kernel: k.name, kind: ErrWorkGroupCount, Reason: fmt.Sprintf(
				"workgroup count %d in dimension %d is past the device's limit of %d (maxComputeWorkGroupCount): "+
					"split the work over several dispatches, or loop over the grid in the kernel and declare it KernelSpec.GridStride",
				*g, i, limit)}
		}
	}
	infos := make([]vk.DescriptorBufferInfo, len(buffers))
	used := make([]*allocation, len(buffers))
	for i, bd := range buffers {
		if bd.use < 0 || bd.use >= len(op.k.Res) {
			return bad("binding %d: use %d of an op with %d uses", i, bd.use, len(op.k.Res))
		}
		r := op.k.Res[bd.use]
		off, n := bd.off, bd.len
		if bd.whole {
			off, n = 0, r.Size
		}
		if n == 0 || off > r.Size || n > r.Size-off {
			return bad("binding %d: window [%d, %d) of use %d of %d bytes", i, off, storage.SatAdd(off, n), bd.use, r.Size)
		}
		at := r.Offset + off
		if align := max(lim.MinStorageBufferOffsetAlignment, 1); at%align != 0 {
			return bad("binding %d: offset %d in its allocation is not a multiple of minStorageBufferOffsetAlignment %d", i, at, align)
		}
		if n > uint64(lim.MaxStorageBufferRange) {
			return bad("binding %d: %d bytes exceed maxStorageBufferRange %d", i, n, lim.MaxStorageBufferRange)
		}
		a, err := b.lookup(r, "dispatch "+k.name)
		if err != nil {
			return err
		}
		infos[i] = vk.DescriptorBufferInfo{Buffer: a.buf, Offset: at, Range: n}
		used[i] = a
	}

	q := op.k.Q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.op == nil {
		return fmt.Errorf("vulkan: op %q: dispatch %s outside an op: %w", op.k.Name, k.name, stream.ErrInvalid)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pipeline == 0 {
		return fmt.Errorf("vulkan: op %q: dispatch %s: %w", op.k.Name, k.name, ErrClosed)
	}
	d := b.dev
	var sets []uint64
	if len(infos) > 0 {
		set, err := q.allocSetLocked(k.setLay)
		if err != nil {
			return err
		}
		q.op.sets = append(q.op.sets, set)
		writes := make([]vk.WriteDescriptorSet, len(infos))
		for i := range infos {
			writes[i] = vk.WriteDescriptorSet{SType: vk.StWriteDescriptorSet, DstSet: set.h, DstBinding: uint32(i),
				DescriptorCount: 1, DescriptorType: vk.DescriptorTypeStorageBuffer, PBufferInfo: unsafe.Pointer(&infos[i])}
		}
		vk.Call(d.fn.UpdateDescriptorSets, d.h, uintptr(len(writes)), uintptr(unsafe.Pointer(&writes[0])), 0, 0)
		sets = append(sets, set.h)
	}
	cb, err := q.commandsLocked(q.op)
	if err != nil {
		return err
	}
	for _, a := range used {
		q.op.use(a)
	}
	vk.Call(d.fn.CmdBindPipeline, cb, vk.PipelineBindPointCompute, uintptr(k.pipeline))
	if len(sets) > 0 {
		vk.Call(d.fn.CmdBindDescriptorSets, cb, vk.PipelineBindPointCompute, uintptr(k.pipeLay), 0, 1, uintptr(unsafe.Pointer(&sets[0])), 0, 0)
	}
	if len(pc) > 0 {
		vk.Call(d.fn.CmdPushConstants, cb, uintptr(k.pipeLay), vk.ShaderStageCompute, 0, uintptr(len(pc)), uintptr(unsafe.Pointer(&pc[0])))
	}
	vk.Call(d.fn.CmdDispatch, cb, uintptr(groups.X), uintptr(groups.Y), uintptr(groups.Z))
	return nil
}

// Copy records a device copy (vkCmdCopyBuffer) of src into dst, windows of
// the op's uses (Use, UseRange) of one size, in the op's order: after what
// the op recorded before it, before what it records after. In a capture
// every launch copies again. Windows of different sizes, a window past its
// use, or windows that overlap in memory are refused with an error
// wrapping stream.ErrInvalid, and nothing is recorded.
func (op *Op) Copy(dst, src Binding) error {
	if err := op.live("copy"); err != nil {
		return err
	}
	b := op.k.Q.b
	window := func(what string, bd Binding) (*allocation, uint64, uint64, error) {
		if bd.use < 0 || bd.use >= len(op.k.Res) {
			return nil, 0, 0, fmt.Errorf("vulkan: op %q: copy %s: use %d of an op with %d uses: %w", op.k.Name, what, bd.use, len(op.k.Res), stream.ErrInvalid)
		}
		r := op.k.Res[bd.use]
		off, n := bd.off, bd.len
		if bd.whole {
			off, n = 0, r.Size
		}
		if off > r.Size || n > r.Size-off {
			return nil, 0, 0, fmt.Errorf("vulkan: op %q: copy %s: window [%d, %d) of use %d of %d bytes: %w",
				op.k.Name, what, off, storage.SatAdd(off, n), bd.use, r.Size, stream.ErrInvalid)
		}
		if n == 0 {
			return nil, 0, 0, nil
		}
		a, err := b.lookup(r, "copy")
		if err != nil {
			return nil, 0, 0, err
		}
		return a, r.Offset + off, n, nil
	}
	da, doff, dn, err := window("target", dst)
	if err != nil {
		return err
	}
	sa, soff, sn, err := window("source", src)
	if err != nil {
		return err
	}
	if dn != sn {
		return fmt.Errorf("vulkan: op %q: copy of %d bytes into a window of %d: %w", op.k.Name, sn, dn, stream.ErrInvalid)
	}
	if dn == 0 {
		return nil
	}
	if da == sa && doff < soff+sn && soff < doff+dn {
		return fmt.Errorf("vulkan: op %q: copy between overlapping windows [%d, %d) and [%d, %d) of one allocation: %w",
			op.k.Name, soff, soff+sn, doff, doff+dn, stream.ErrInvalid)
	}
	q := op.k.Q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.op == nil {
		return fmt.Errorf("vulkan: op %q: copy outside an op: %w", op.k.Name, stream.ErrInvalid)
	}
	cb, err := q.commandsLocked(q.op)
	if err != nil {
		return err
	}
	q.op.use(sa)
	q.op.use(da)
	region := &vk.BufferCopy{SrcOffset: soff, DstOffset: doff, Size: dn}
	vk.Call(b.dev.fn.CmdCopyBuffer, cb, uintptr(sa.buf), uintptr(da.buf), 1, uintptr(unsafe.Pointer(region)))
	return nil
}
