// Package stream is what a backend implements for ordered asynchronous
// work: the queues a device's streams submit ops to, the fences that order
// and synchronise them, and the optional capabilities a queue may have
// (graph capture, telling the device who runs its ops) (design §9.3, §10.1,
// §10.5).
//
// # Owns
//
// The [Queue] interface with [Op], [Fence], [OpFailure] and [Exec]; the
// optional [Recorder] (graph capture, with the capture [Owner]), [Issuer],
// [Executor] (with [Goroutine] and [CurrentGoroutine]), [Completer] and
// [EnqueueRunner]; and the sentinels [ErrCaptureState],
// [ErrCaptureInvalidated], [ErrCaptureUnsupported], [ErrWrongOwner],
// [ErrCaptureCrossStream], [ErrClosed], [ErrInvalid], [ErrWaitsOnItself]
// and [ErrOpPanicked], which every queue and the device return.
//
// The host's queues (a worker goroutine, or ops run inside Enqueue) and
// their software graph, and the device's capture state machine, are not
// here: a user reaches them through gpumem.Open (WithSim for the inline
// queues), and a backend brings its own queues (package cuda, package
// vulkan).
//
// # Invariants
//
// What every Queue keeps, and the device relies on:
//
//   - (Q1) Sequence numbers start at 1 and each step (an op, a replayed op, a
//     fence wait) takes the next one; recorded ops take none.
//   - (Q2) A queue runs its steps one at a time in sequence order; Completed
//     is the number of the last finished step and never decreases. A failed
//     or panicking op still completes, so later ops run.
//   - (Q3) A fence wait waits only on a step its queue had issued when the
//     wait was enqueued (fences beyond that are refused with ErrInvalid), so
//     waits between queues never form a cycle and every valid fence passes
//     once the ops before it return.
//   - (Q4) While a queue records, nothing enqueued on it runs; once
//     invalidated, a recording stays invalidated until EndCapture or Close,
//     and yields no Exec.
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
// Every Queue method must be safe for concurrent use. An op may call back
// into the device that enqueued it, so a device waits for a queue only
// without its own lock held; [Executor] tells it whether the caller is an op
// (which must not wait), and [Completer] lets it wait for completion without
// a host synchronisation. Completed must never block.
package stream
