// Package backendkit holds what the driver backends (cuda, vulkan) do the
// same way around their drivers, written once: the op a run function sees
// and its Enqueue, the capture bookkeeping of a queue that records, the
// routing of a host wait on a fence, the backend's sticky poison, the
// errors of a closed queue or a fence past what a queue issued, and
// OpenDevice. Each was written twice, word for word but for the backend's
// name; what differs (how a step is submitted and completes, the driver's
// calls, storage) stays in each backend.
//
// # Owns
//
//   - Op and Enqueue: an op's queue, name and resolved uses while its run
//     function runs, refused after (Live).
//   - Recording: an open capture's owner, op count and first invalidation,
//     and the errors of the calls a recording refuses or that invalidate
//     it (a host wait, a cross-stream wait on an incomplete step, a failed
//     op, a second BeginCapture, an EndCapture by another owner).
//   - Wait: a host wait on a fence, routed to the queue that issued it.
//   - Poison, NilQueue, QueueOf, Closed, Beyond, RunOp, OpenDevice.
//
// # Invariants
//
//   - (DK1) A Poison keeps the first error it is noted that matches
//     storage.ErrDevicePoisoned, and never changes after.
//   - (DK2) A Recording keeps its first invalidation: every later refusal
//     and EndCapture reports that cause.
//
// # Does not know
//
// A driver, a thread or a lock of the backend: a Recording is guarded by
// its queue's lock, which the caller holds; Wait and the op's checks take
// what they need from the queue through the methods they are given.
//
// # Concurrency
//
// A Poison is safe for concurrent use; its lock is a leaf (held for no
// other call). A Recording is not: its queue's lock guards it. An Op is
// used from its run function's goroutine only.
package backendkit
