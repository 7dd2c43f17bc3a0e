// Package stream owns ordered asynchronous work: the queues a device's
// streams submit ops to, the fences that order and synchronise them, the host
// software graph, and the capture state machine (design §9.3, §10.1, §10.5).
//
// # Owns
//
// The [Queue] interface with [Op], [Fence], [OpFailure] and [Exec]; the [Host]
// queue (one worker goroutine) and the [Inline] queue (runs each op inside
// Enqueue, or, made by [NewInlineHeld], at the next Flush or Wait); fence waits between queues ([Queue.WaitFence]); the host software
// graph, in which a recording queue appends ops to an [OpList] instead of
// running them and imitates the driver's capture rules ([StorageWatcher]
// included); the [Capture] state machine ([Phase], [Owner], first failure);
// and the sentinels [ErrCaptureState], [ErrCaptureInvalidated],
// [ErrCaptureUnsupported], [ErrWrongOwner], [ErrCaptureCrossStream],
// [ErrClosed], [ErrInvalid], [ErrWaitsOnItself] and [ErrOpPanicked].
//
// # Invariants
//
//   - (Q1) Sequence numbers start at 1 and each step (an op, a replayed op, a
//     fence wait) takes the next one; recorded ops take none.
//   - (Q2) A queue runs its steps one at a time in sequence order; Completed
//     is the number of the last finished step and never decreases. A failed
//     or panicking op still completes, so later ops run.
//   - (Q3) A fence wait of these queues waits only on a step its queue had
//     issued when the wait was enqueued (fences beyond that are refused with
//     ErrInvalid), so waits between them never form a cycle and every valid
//     fence passes once the ops before it return.
//   - (Q4) While a queue records, nothing enqueued on it runs; once
//     invalidated, a recording stays invalidated until EndCapture or Close,
//     and yields no Exec.
//   - (C1) A Capture's owner is 0 exactly in phase NoCapture; a refused call
//     changes nothing, except End, which always closes the window.
//
// # Does not know
//
// Memory, pools, handles, storage or buffers: an op is a closure over
// resources the device resolved at enqueue, under its lock. Which bytes a
// failed op left unwritten, which pages a graph touched and whether an upper
// layer may allocate while recording are decided by the root package (gpumem),
// which also mints the capture owners. This package imports nothing of gpumem.
//
// # Concurrency
//
// Every Queue method is safe for concurrent use; each queue guards its state
// with its own small lock, never held while an op runs and never held
// together with another queue's. An op may call back into the device that
// enqueued it, so a device waits for a queue only without its own lock held;
// [Executor] tells it whether the caller is an op (which must not wait), and
// [Completer] lets it wait for completion without a host synchronisation.
// Completed reads an atomic and never blocks; Wait blocks on a completion
// broadcast and honours its context. A Host runs ops on its worker goroutine,
// started by NewHost and stopped by Close after the ops already enqueued; an
// Inline runs them on the goroutine that enqueues (a held one: on the
// goroutine that flushes or waits). [Capture] is not safe for
// concurrent use: the device lock serialises it.
package stream
