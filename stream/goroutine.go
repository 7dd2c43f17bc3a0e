package stream

import (
	"context"
	"runtime"
)

// Goroutine identifies a goroutine, for one question only: is the caller
// running one of a queue's ops? An op that waits for its own queue (or for
// a device that waits for it) would wait for itself; a device asks before
// it blocks, and refuses instead.
type Goroutine uint64

// CurrentGoroutine returns the calling goroutine's identity. It reads the
// header of the runtime's stack trace (Go exposes no other way), which costs
// about a microsecond: call it before a blocking wait, not on a fast path.
func CurrentGoroutine() Goroutine {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	const prefix = "goroutine "
	if n <= len(prefix) {
		return 0
	}
	var id uint64
	for _, c := range buf[len(prefix):n] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return Goroutine(id)
}

// Executor is implemented by queues that know which goroutine runs their
// ops (Host: its worker; Inline: whoever is running them now; a driver
// queue: its executor thread).
type Executor interface {
	// RunsOpsOn reports whether g is the goroutine that runs (or is now
	// running) the queue's ops, so a wait for the queue from g could never
	// end.
	RunsOpsOn(g Goroutine) bool
}

// Completer is implemented by queues that can wait for a step to complete
// without the wait counting as a host synchronisation, which would
// invalidate a recording: a device that waits only for steps issued before
// any recording began (to settle before a relocation) uses it, since a
// capture may begin on the queue meanwhile.
type Completer interface {
	// WaitCompleted blocks until step seq (already issued) has completed,
	// or ctx is done.
	WaitCompleted(ctx context.Context, seq uint64) error
}

// EnqueueRunner is implemented by queues whose Enqueue runs the op before it
// returns, on the queue's executor, while the caller waits (a driver queue
// whose ops launch work on the driver's stream). A device lends its lock to
// such an op, which cannot take it.
type EnqueueRunner interface {
	RunsOpsAtEnqueue() bool
}
