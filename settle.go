// Waiting for the streams without holding the device lock.
//
// A user op runs on its stream's executor and may call back into the device
// (allocate scratch memory, free, enqueue, read stats). So nothing may wait
// for a stream while holding the device lock: the op it waits for could be
// waiting for that lock. Every wait for streams' work (a relocation's,
// a cleanup's, Close's) first settles the device: with the lock released it
// waits, honouring the caller's context, until no stream has work queued,
// then takes the lock back and carries on from a state it checks again. The
// waits the locked sequence then makes pass at once.
//
// An op cannot wait for streams at all: its own stream would wait for it.
// A wait from inside an op is refused with ErrCalledFromOp (asked only
// before a wait that would block: telling the caller's goroutine costs about
// a microsecond).

package gpumem

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/stream"
)

// ErrCalledFromOp is returned by a call that would wait for a stream when it
// is made from inside an op (an Enqueue's run function or a recorded op):
// the op's own stream cannot run on until it returns. Ops may allocate,
// free, clone, enqueue, write and read stats; see Stream.Enqueue.
var ErrCalledFromOp = errors.New("gpumem: called from inside an op: it would wait for the streams, whose work includes the calling op; " +
	"do it after the op, or on another goroutine")

// gateAfter is how many rounds of waiting settle makes while others keep
// enqueueing before it holds new work back (admitWorkLocked), so a steady
// flow of work cannot starve it.
const gateAfter = 4

// calledFromOp reports whether the calling goroutine runs ops of one of the
// device's queues.
func (d *Device) calledFromOpLocked() bool {
	var g stream.Goroutine
	for _, s := range d.streams {
		e, ok := s.q.(stream.Executor)
		if !ok {
			continue
		}
		if g == 0 {
			g = stream.CurrentGoroutine()
		}
		if e.RunsOpsOn(g) {
			return true
		}
	}
	return false
}

// pendingFencesLocked returns a fence of every stream with work queued (not
// of a recording stream: a host wait on it would invalidate the recording).
func (d *Device) pendingFencesLocked() []stream.Fence {
	if invariantsOn {
		d.assertLocked("pendingFencesLocked")
	}
	var fences []stream.Fence
	for _, s := range d.streams {
		if s.rec != nil && s.rec.Recording() {
			continue
		}
		f, err := s.q.Fence()
		if err == nil && f.Seq > s.q.Completed() {
			fences = append(fences, f)
		}
	}
	return fences
}

// settleLocked waits, with the device lock released, until no stream has
// work queued, or ctx ends (its error is returned, nothing changed), or the
// caller turns out to be an op (ErrCalledFromOp). It returns with the lock
// held; the caller checks the device's state again (ErrClosed is returned
// when it closed meanwhile). A nil ctx waits without limit. After gateAfter
// rounds that found new work, it holds back work enqueued by anyone but an
// op until it returns.
func (d *Device) settleLocked(ctx context.Context) error {
	if invariantsOn {
		d.assertLocked("settleLocked")
	}
	if ctx == nil {
		ctx = context.Background()
	}
	gating := false
	defer func() {
		if gating {
			d.gated--
			d.admit.Broadcast()
		}
	}()
	for round := 0; ; round++ {
		fences := d.pendingFencesLocked()
		if len(fences) == 0 {
			return nil
		}
		if d.calledFromOpLocked() {
			return ErrCalledFromOp
		}
		if round == gateAfter {
			gating = true
			d.gated++
		}
		d.mu.Unlock()
		err := waitFences(ctx, fences)
		d.mu.Lock()
		if err != nil {
			return err
		}
		if d.closed {
			return ErrClosed
		}
	}
}

// admitWorkLocked holds a caller that enqueues work back while a settle
// gates (an op is admitted: the settle waits for it). It may release and
// retake the lock.
func (d *Device) admitWorkLocked() {
	for d.gated > 0 && !d.calledFromOpLocked() {
		d.admit.Wait()
	}
}

// waitFences waits for each fence on its own queue: for completion only,
// where the queue can (a capture may begin on it meanwhile, and a host
// synchronisation would invalidate it).
func waitFences(ctx context.Context, fences []stream.Fence) error {
	for _, f := range fences {
		var err error
		if c, ok := f.Q.(stream.Completer); ok {
			err = c.WaitCompleted(ctx, f.Seq)
		} else {
			err = f.Q.Wait(ctx, f)
		}
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			return fmt.Errorf("gpumem: waiting for the streams: %w", err)
		}
	}
	return nil
}

// refuseWaitFromOpLocked returns ErrCalledFromOp when the caller is an op
// and one of the fences has not passed (a wait would block).
func (d *Device) refuseWaitFromOpLocked(fences ...stream.Fence) error {
	for _, f := range fences {
		if f.Q != nil && f.Q.Completed() < f.Seq {
			if d.calledFromOpLocked() {
				return ErrCalledFromOp
			}
			return nil
		}
	}
	return nil
}

// flushHeld runs what a held queue holds (an inline queue runs its ops at
// Flush), outside the device lock, so an op may call the device.
func (s *Stream) flushHeld() { _ = s.q.Flush() }

// Lending the lock to an op. A driver queue runs an op inside Enqueue, on
// its executor, while the enqueuing caller waits holding the device lock
// (stream.EnqueueRunner). Such an op cannot take the lock; it borrows it:
// the holder is blocked until the op returns, so the op has the bookkeeping
// to itself. A borrowing call may only do what never waits and never moves
// memory (Free, Clone, Window, Stats, Report, the accessors); the others
// return ErrCalledFromOp.

// lendLocked marks the lock as lent to ops run by s's executor until the
// returned function is called; nothing when s's queue runs ops elsewhere.
func (d *Device) lendLocked(s *Stream) (end func()) {
	if r, ok := s.q.(stream.EnqueueRunner); !ok || !r.RunsOpsAtEnqueue() {
		return func() {}
	}
	d.lentTo.Store(s)
	return func() { d.lentTo.Store(nil) }
}

// lockOrBorrow takes the device lock, or borrows it when the caller is the
// op its holder waits for (then it must not be unlocked: see unlock).
func (d *Device) lockOrBorrow() (borrowed bool) {
	if d.mu.TryLock() {
		return false
	}
	if s := d.lentTo.Load(); s != nil {
		if e, ok := s.q.(stream.Executor); ok && e.RunsOpsOn(stream.CurrentGoroutine()) {
			return true
		}
	}
	d.mu.Lock()
	return false
}

// unlock releases what lockOrBorrow took.
func (d *Device) unlock(borrowed bool) {
	if !borrowed {
		d.mu.Unlock()
	}
}

// lockUnlessBorrowed takes the device lock for a call that may wait or move
// memory, refusing an op that would have to borrow it.
func (d *Device) lockUnlessBorrowed(call string) error {
	if d.lockOrBorrow() {
		return errBorrowed(call)
	}
	return nil
}

// errBorrowed is the refusal of call from an op that borrows the device
// (lockUnlessBorrowed), which WouldFit reports for the Alloc it stands for.
func errBorrowed(call string) error {
	return fmt.Errorf("gpumem: %s: %w (this backend runs an op inside Enqueue, with the device held)", call, ErrCalledFromOp)
}
