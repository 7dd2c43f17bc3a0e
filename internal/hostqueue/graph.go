// The host software graph: a recording host queue appends its ops to an
// OpList instead of running them, and a storage call seen while it records
// invalidates the recording, as a driver's capture would (design §10.5).

package hostqueue

import "github.com/gpumem/gpumem/stream"

// StorageWatcher is implemented by queues that want to hear about storage
// allocations and deallocations of their stream's storage: a driver cannot
// capture them, so the host queues invalidate a recording that sees one, as
// the driver would. The host storage calls ObserveStorage with the name of
// the operation ("Alloc", "Dealloc").
type StorageWatcher interface {
	ObserveStorage(op string)
}

// OpList is the Exec sealed by the host queues: the recorded ops in order.
// It is immutable and may be replayed any number of times, on any host queue.
type OpList struct {
	ops []stream.Op
}

// Len returns the number of recorded ops.
func (l *OpList) Len() int { return len(l.ops) }

// Ops returns a copy of the recorded ops, in recorded order.
func (l *OpList) Ops() []stream.Op { return append([]stream.Op(nil), l.ops...) }
