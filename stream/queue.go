package stream

import "context"

// Op is one unit of work on a queue. Run executes on the queue's executor,
// after every op enqueued on that queue before it; its error (or a recovered
// panic) becomes an OpFailure. Run must not block on work queued behind it on
// the same queue, which could never run.
type Op struct {
	Name string       // names the op in failures and logs
	Run  func() error // required
}

// Fence names a point in a queue's order: it is passed once Q has completed
// the op with sequence number Seq. The zero Fence is always passed.
type Fence struct {
	Q   Queue
	Seq uint64
}

// OpFailure reports an op whose Run failed. The device collects them with
// TakeFailures and marks the op's outputs (design §11).
type OpFailure struct {
	Seq  uint64 // the op's sequence number
	Name string // the op's Name
	Err  error  // what Run returned, or an error wrapping ErrOpPanicked
}

// Exec is a sealed capture: what Queue.EndCapture returns and Queue.Replay
// launches. It is an interface because each backend seals its own kind (the
// host queues an [*OpList], a driver backend an instantiated graph); a queue
// replays only the kind it recorded. Len is the number of recorded ops.
type Exec interface {
	Len() int
}

// Queue is an ordered asynchronous work queue (design §9.3): the executor of
// one stream. Ops run one at a time in the order Enqueue returned their
// sequence numbers; two queues may overlap unless a WaitFence orders them.
//
// Every method is safe for concurrent use.
type Queue interface {
	// Enqueue submits op and returns its sequence number: from 1, increasing
	// (not necessarily by one: fence waits and replays take numbers too).
	// While the queue records, op is appended to the recording instead and
	// the returned number is 0. A failed Run is reported by TakeFailures, not
	// here; Enqueue fails only when op cannot be accepted.
	Enqueue(op Op) (seq uint64, err error)

	// Flush submits work the queue holds back. The host queues submit at
	// Enqueue and hold none.
	Flush() error

	// Fence returns a fence covering every op enqueued so far (ops recorded
	// into a capture are not enqueued and are not covered).
	Fence() (Fence, error)

	// Completed returns the sequence number of the last completed op. It
	// never blocks.
	Completed() uint64

	// Wait blocks the calling goroutine until f is passed or ctx is done
	// (host synchronisation). On a recording queue it returns
	// ErrCaptureInvalidated at once and invalidates the capture.
	Wait(ctx context.Context, f Fence) error

	// WaitFence makes every op enqueued later on this queue start only after
	// f is passed, without blocking the caller (a device-side wait). A fence
	// of this queue, or one already passed, adds nothing.
	WaitFence(f Fence) error

	// TakeFailures returns the failures recorded since the last call, in
	// sequence order, and forgets them.
	TakeFailures() []OpFailure

	// Close runs the ops already enqueued, then stops the executor. It is
	// idempotent; see ErrClosed for what works afterwards.
	Close() error
}

// Issuer is a queue that reports without locking the sequence number of
// the last step it issued: Fence's Seq, for a caller that only compares it
// with Completed on a hot path (an allocation asking whether its stream is
// busy) and can do without a fence's lock and closed check.
type Issuer interface {
	Issued() uint64
}

// Recorder is a queue that can record its work into a graph and replay it
// (design §10): the capability graph capture needs. A backend whose queues
// cannot record implements Queue alone, and a device refuses captures on
// it (ErrNotSupported).
type Recorder interface {
	Queue

	// BeginCapture starts recording for owner o: later ops are recorded, not
	// run, until EndCapture.
	BeginCapture(o Owner) error

	// EndCapture stops recording. It closes the recording in every case and
	// returns the sealed Exec only when o owns the capture, doomed is nil and
	// nothing invalidated it.
	EndCapture(o Owner, doomed error) (Exec, error)

	// Replay enqueues the ops of e in their recorded order.
	Replay(e Exec) error

	// Recording reports whether a capture is open on the queue.
	Recording() bool
}

// Owner identifies who holds a capture window: the device mints one per
// capture token and passes it to Recorder.BeginCapture and EndCapture. It
// is opaque; 0 is never an owner.
type Owner uint64
