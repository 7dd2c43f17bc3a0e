// The one reclaim order: how the device gives memory back, for an explicit
// cleanup (Stream.Cleanup, Device.Cleanup), a Defragment, and each stage of
// the make-room path (makeroom.go). WouldFit's dry run of the cleanup stage
// follows the same order in its views (wouldfit.go: newDryRunLocked with
// settled, then dryRun.cleanAll over reclaimOrder).
//
//  1. Settle: when the reclaim would wait for the streams (a compaction
//     always does; a cleanup when a stream has work queued or a release
//     held behind it), wait for them with the lock released (settle.go).
//     The caller's context bounds the wait; a capture that began meanwhile
//     refuses the reclaim (ErrRecording).
//  2. Drain: every stream's deferred cross-stream uses are released (a
//     recording stream keeps its own).
//  3. Move and clean up, stream by stream in the caller's order: what
//     outdated pages hold moves (relocation.ReclaimFor), or the sparsest
//     current pages are compacted (relocation.ReclaimCompacting), or
//     nothing moves; then the stream's empty pages go back. The order of
//     the steps inside one stream lives in package relocation.
//  4. Forward: the storage releases the reclaim held behind queued work go
//     to the storage once that work passed (waiting for it when it can),
//     since an explicit reclaim means now.
//
// Which streams, in which order: the caller's (a cleanup's, in creation
// order for the device), and for make-room reclaimOrder, the failing
// stream first.

package gpumem

import (
	"context"

	"github.com/gpumem/gpumem/internal/relocation"
)

// reclaimHow says what a reclaim moves before it gives pages back: with
// relocate, what outdated pages hold (for reason); with compact, the
// sparsest current pages within that pass's limits; with neither, nothing
// (the make-room path's first stage cleans up alone).
type reclaimHow struct {
	relocate bool
	reason   relocation.Reason
	compact  *compactPass
	gave     *releaseTally // what the reclaim gave back, when counted (streamsOf.gave)
}

// reclaimLocked is the reclaim order (the file comment) for the streams of,
// in that order, moving what how says.
func (d *Device) reclaimLocked(ctx context.Context, of []*Stream, how reclaimHow) error {
	if invariantsOn {
		d.assertLocked("reclaimLocked")
	}
	if how.compact != nil || d.cleanupWaitsLocked(of...) {
		if err := d.settleLocked(ctx); err != nil {
			return err
		}
		if err := d.refuseWhileRecordingLocked(of[0]); err != nil {
			return err
		}
	}
	for _, s := range d.streams {
		s.drainDeferredLocked()
	}
	for _, s := range of {
		x := streamsOf{d: d, s: s, ctx: ctx, cleanOnly: !how.relocate && how.compact == nil, compact: how.compact, gave: how.gave}
		var err error
		if how.compact != nil {
			err = relocation.ReclaimCompacting(x)
		} else {
			err = relocation.ReclaimFor(x, how.reason)
		}
		if err != nil {
			return err
		}
	}
	// The pages the reclaim emptied go back once the work queued before
	// their frees has passed: wait for it with the lock released. A wait
	// that cannot be made (the context ended, an op) leaves them held for
	// the next reservation or sync; the reclaim itself is done.
	for _, s := range of {
		if s.st.holdsUnpassed() {
			_ = d.settleLocked(ctx)
			break
		}
	}
	for _, s := range of {
		s.st.releasePassed()
	}
	return nil
}

// reclaimOrder is the order make-room reclaims the streams in: s, whose
// reservation failed, first (its own cached pages are the likeliest to
// serve it), then every other stream in creation order (their cached
// pages count against the same device).
func (d *Device) reclaimOrder(s *Stream) []*Stream {
	order := make([]*Stream, 0, len(d.streams))
	order = append(order, s)
	for _, t := range d.streams {
		if t != s {
			order = append(order, t)
		}
	}
	return order
}
