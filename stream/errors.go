package stream

import "errors"

// The capture sentinels are modelled on the CUDA driver's codes so that a
// driver-backed queue and the host queues fail the same way: an upper layer
// that is wrong about capture rules sees the same error on a laptop as on a
// GPU, and tests written against the host queues keep their meaning.
var (
	// ErrCaptureState is returned by a capture call made out of order: the
	// device's PrepareCapture or BeginCapture while a window is open,
	// BeginCapture without PrepareCapture, EndCapture or AbortCapture with
	// no window; Queue.BeginCapture on a queue that already records,
	// Queue.EndCapture on one that does not. Nothing changed (except that
	// EndCapture aborts a window still prepared); fix the call order.
	ErrCaptureState = errors.New("stream: capture call out of order")

	// ErrCaptureInvalidated (CUDA 901, cudaErrorStreamCaptureInvalidated) is
	// returned once a recording queue has seen something a graph cannot
	// represent: a host wait on it, a storage Alloc or Dealloc reported by
	// ObserveStorage, a cross-stream wait on incomplete work. The call that
	// invalidated it, every later Enqueue and the closing EndCapture return
	// it, and EndCapture gives no executable. End the capture, then prepare
	// and record again without the offending call.
	ErrCaptureInvalidated = errors.New("stream: capture invalidated")

	// ErrCaptureUnsupported (CUDA 900, cudaErrorStreamCaptureUnsupported)
	// marks an operation not permitted while a queue records, such as a host
	// wait. The host queues return it joined with ErrCaptureInvalidated,
	// since the operation also invalidates the capture.
	ErrCaptureUnsupported = errors.New("stream: operation not permitted while capturing")

	// ErrWrongOwner (CUDA 908, cudaErrorStreamCaptureWrongThread) is
	// returned when a capture is ended, begun or aborted by someone other
	// than its owner. The device's EndCapture and Queue.EndCapture tear the
	// window down anyway and give no executable; BeginCapture and
	// AbortCapture change nothing.
	ErrWrongOwner = errors.New("stream: capture owned by another caller")

	// ErrCaptureCrossStream is returned when an op on a recording queue would
	// have to wait on incomplete work of another queue: the graph could not
	// express that dependency. The capture is invalidated; synchronise the
	// other queue before beginning the capture.
	ErrCaptureCrossStream = errors.New("stream: recording queue would wait on incomplete work of another queue")

	// ErrClosed is returned by Enqueue, Replay, Fence, WaitFence, Flush and
	// BeginCapture after Close. Completed, Wait and TakeFailures keep working,
	// so work submitted before Close can still be observed.
	ErrClosed = errors.New("stream: queue closed")

	// ErrInvalid is returned for an argument no call could accept: an Op
	// without Run, capture owner 0, a fence with a nil queue or a sequence
	// number its queue never issued (waiting on it would never end), an
	// executable recorded by another kind of queue. Nothing changed.
	ErrInvalid = errors.New("stream: invalid argument")

	// ErrWaitsOnItself is returned by a wait on a queue that holds its steps
	// until a flush or wait (the simulation's, gpumem.WithSim) from a
	// goroutine that is running an earlier step of that queue, so the step waited for could only run after the wait returned:
	// an op that waits for a later step of its own queue, or for another
	// queue whose steps wait on it. A fence wait step that meets it fails
	// with it (an OpFailure) instead of blocking. Fence waits alone never
	// cause it (Q3); wait after the op returns, or on another goroutine.
	ErrWaitsOnItself = errors.New("stream: the calling goroutine runs an earlier step of the queue it waits for, so the wait could never end " +
		"(wait after the op returns, or on another goroutine)")

	// ErrOpPanicked is wrapped by the OpFailure error of an op whose Run
	// panicked. The queue recovered and kept running later ops; the op's
	// outputs are as unreliable as those of an op that returned an error.
	ErrOpPanicked = errors.New("stream: op panicked")
)
