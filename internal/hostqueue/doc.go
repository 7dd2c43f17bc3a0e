// Package hostqueue owns the queues whose ops run on the host: [Host] (one
// worker goroutine, the host backend's queue) and [Inline] (each op inside
// the Enqueue that submits it, or, made by [NewInlineHeld], at the next
// Flush or Wait: the queues of WithSim, which share a [RunnerGroup]); fence
// waits between them; and the host software graph, in which a recording
// queue appends ops to an [OpList] instead of running them and imitates
// the driver's capture rules ([StorageWatcher] included).
//
// It is internal: a user reaches these queues through gpumem.Open, and a
// backend implements the public stream interfaces with its own.
//
// # Invariants
//
// The stream package's Q1–Q4, kept by the tracker both queues share
// (tracker.go).
//
// # Does not know
//
// Memory, pools, handles, storage or buffers.
//
// # Concurrency
//
// Every queue method is safe for concurrent use; each queue guards its
// state with its own small lock, never held while an op runs and never held
// together with another queue's. Completed reads an atomic and never
// blocks; Wait blocks on a completion broadcast and honours its context. A
// Host runs ops on its worker goroutine, started by NewHost and stopped by
// Close after the ops already enqueued; an Inline runs them on the
// goroutine that enqueues (a held one: on the goroutine that flushes or
// waits).
package hostqueue

import "github.com/gpumem/gpumem/stream"

var (
	_ stream.Recorder  = (*Host)(nil)
	_ stream.Recorder  = (*Inline)(nil)
	_ stream.Executor  = (*Host)(nil)
	_ stream.Executor  = (*Inline)(nil)
	_ stream.Completer = (*Host)(nil)
	_ stream.Completer = (*Inline)(nil)
	_ stream.Issuer    = (*Host)(nil)
	_ stream.Issuer    = (*Inline)(nil)
	_ StorageWatcher   = (*Host)(nil)
	_ StorageWatcher   = (*Inline)(nil)
	_ stream.Exec      = (*OpList)(nil)
)
