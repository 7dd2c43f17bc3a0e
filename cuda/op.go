// Ops that launch device work: the bridge between a gpumem op and the
// driver.
//
// A gpumem op's run function runs on its queue's executor, in stream
// order, after the device resolved every use to its current address (after
// any relocation) and ordered the op after the other streams' writers of
// what it reads. What the function enqueues on the op's driver stream is
// therefore ordered exactly as a host op's work would be: before the
// event that gives the op its sequence number, after every cross-stream
// wait the device placed, and, while the stream records, captured into
// the graph. A failed launch fails the op, and gpumem marks what it writes
// as failed, as for any op.
//
// Op is that view for device code: the uses' device addresses, the
// CUstream, and Launch, which takes the uses as arguments so no address is
// copied out of the op by hand. It is valid only while the run function
// runs; afterwards every method fails with ErrOpEnded, because the
// addresses may move (relocation) and the stream runs other ops.

package cuda

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/backendkit"
	"github.com/gpumem/gpumem/stream"
)

// ErrOpEnded is returned by an Op's methods called after its run function
// returned: its addresses may have moved and its stream runs other work.
// Take what a later call needs inside the run function, or enqueue another
// op.
var ErrOpEnded = errors.New("cuda: op has returned; its addresses and stream are no longer its own")

// Op is one running op on a cuda stream, as its run function sees it (see
// Enqueue). Call its methods only from the run function's goroutine and
// before the function returns.
type Op struct{ k *backendkit.Op[*queue] }

// Enqueue submits an op on s, a stream of a device on the cuda backend, as
// gpumem's Stream.Enqueue does, with an *Op for run: its uses' device
// addresses (Op.DevicePtr), its stream's CUstream (Op.StreamHandle) and
// kernel launches on that stream (Op.Launch). Ordering across streams,
// capture into graphs and failure marks hold as for any op. A stream of
// another backend is refused with an error wrapping stream.ErrInvalid.
//
// run runs on the stream's executor thread, with the device held: like
// any op under cuda it may call Free, Clone, Window, Stats and Report on
// the device and gets gpumem.ErrCalledFromOp for the rest.
func Enqueue(s *gpumem.Stream, name string, uses []gpumem.Use, run func(op *Op) error) error {
	var k func(*backendkit.Op[*queue]) error
	if run != nil {
		k = func(op *backendkit.Op[*queue]) error { return run(&Op{op}) }
	}
	return backendkit.Enqueue("cuda", s, name, uses, k)
}

// live refuses a call after the op returned or from another goroutine
// than the run function's: the stream's executor runs the op, so a call
// handed to it from elsewhere would wait for the op to return, forever if
// the op waits for that call.
func (op *Op) live(call string) error {
	return op.k.Live("cuda", call, op.k.Q.s.exec.onWorker(), ErrOpEnded, " (it would deadlock)")
}

// DevicePtr returns the device address and size of the op's i-th use: the
// range it declared, at the buffer's current address. Pass them to other
// libraries within the run function only: after it returns the buffer may
// be relocated and the address reused.
func (op *Op) DevicePtr(i int) (ptr uintptr, size uint64, err error) {
	if err := op.live("device pointer"); err != nil {
		return 0, 0, err
	}
	r, err := op.k.Use("cuda", i)
	return r.Ptr, r.Size, err
}

// StreamHandle returns the op's CUstream, for libraries that take one
// (cuBLAS's cublasSetStream, cuDNN's cudnnSetStream, NCCL's collectives,
// through the caller's own bindings). Within the run function such a
// library:
//
//   - MAY enqueue work on this stream, over the op's uses (DevicePtr); that
//     work is ordered, captured and fenced as the op's own;
//   - MUST NOT synchronize (cuStreamSynchronize, cuCtxSynchronize,
//     cudaDeviceSynchronize: a capture would be invalidated and the device
//     may be waiting on this op), allocate or free device memory through
//     the driver (gpumem owns it; a free during a capture invalidates it),
//     or touch memory outside the op's uses;
//   - MUST NOT keep the handle or any address past the run function's
//     return: the stream runs other ops next and relocation may move the
//     buffers. Set the library back to its own stream, or set it again in
//     every op.
//
// The calls must be made from the run function's goroutine (it runs on the
// stream's executor thread, where the context is current).
func (op *Op) StreamHandle() (uintptr, error) {
	if err := op.live("stream handle"); err != nil {
		return 0, err
	}
	return op.k.Q.s.Handle(), nil
}

// Launch enqueues f on the op's stream (cuLaunchKernel) with the launch
// shape cfg and args: Use(i) and UseAt(i, off) for device addresses of the
// op's uses, Val(v) for scalars. Every argument is checked before the
// driver sees it: a use the op does not have, an offset past its end, or,
// where the kernel's parameters are known (Function.Params), a count or
// width that differs, is an *ArgError matching ErrArgs and nothing is
// launched. A driver refusal is a *DriverError; either fails the op.
//
// While the stream records, the launch is captured with the argument
// values of this run: a graph replays with the addresses the recording
// resolved, which the device keeps in place (guarded pages) until the
// graph closes.
func (op *Op) Launch(f *Function, cfg LaunchConfig, args ...Arg) error {
	if f == nil {
		return fmt.Errorf("cuda: op %q: launch of a nil *Function: %w", op.k.Name, stream.ErrInvalid)
	}
	if err := op.live("launch " + f.name); err != nil {
		return err
	}
	if f.m.c != op.k.Q.b.ctx {
		return fmt.Errorf("cuda: op %q: launch %s: the kernel's module was loaded into another context: %w", op.k.Name, f.name, stream.ErrInvalid)
	}
	vals := make([]any, len(args))
	for i, a := range args {
		v, err := op.resolve(f.name, i, a)
		if err != nil {
			return err
		}
		vals[i] = v
	}
	err := op.k.Q.s.Launch(f, cfg, vals...)
	op.k.Q.b.notePoison(err)
	return err
}

// resolve turns argument i into the value driverStream.Launch takes.
func (op *Op) resolve(kernel string, i int, a Arg) (any, error) {
	switch a.kind {
	case argScalar:
		return a.val, nil
	case argUse:
	default:
		return nil, &ArgError{Kernel: kernel, Index: i, Reason: "a zero Arg; make one with Val, Use or UseAt"}
	}
	if a.use < 0 || a.use >= len(op.k.Res) {
		return nil, &ArgError{Kernel: kernel, Index: i, Reason: fmt.Sprintf("use %d of an op with %d uses", a.use, len(op.k.Res))}
	}
	r := op.k.Res[a.use]
	if a.off > 0 && a.off >= r.Size {
		return nil, &ArgError{Kernel: kernel, Index: i,
			Reason: fmt.Sprintf("offset %d is past the end of use %d (%d bytes)", a.off, a.use, r.Size)}
	}
	return r.Ptr + uintptr(a.off), nil
}
