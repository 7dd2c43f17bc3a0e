// The allocation path (design §9.4). Stream.Alloc is five steps, each a
// function of this file; the files that take part point here.
//
//  1. Admit (admitLocked): a done context, an op that would borrow the
//     device, a closed device are refused. The buffer's handle is taken
//     from the device's recycler (newBufferHandleLocked, H6): the steady
//     Alloc + Free allocates nothing. Then what the reservation must find
//     is made true: unless the stream records, the cross-stream uses
//     that passed are released, and the stream's held storage releases that
//     passed are forwarded; the page update is computed (pageUpdateLocked),
//     and a relocation the arena asked for runs (relocation.Wanted), which
//     may wait for the streams with the lock released.
//  2. Reserve (reserveLocked): a recording takes the room its rehearsal
//     placed this allocation on (capture.go); otherwise memory.Manager.Reserve
//     serves the size and, when held room serves it (the steady state),
//     binds the buffer in the same search. The fast path ends here: Alloc →
//     Manager.Reserve → the dynamic memory → its pool.
//  3. Make room (makeroom.go): only after a failure a reclaim may cure,
//     under Allow: the stages of roomStages in order (cleanup, own size,
//     relocate, own size, compact, own size, then compact again and own
//     size while the retry fails and each round frees something),
//     retrying after each. A failure is counted, recorded by the history,
//     and dooms a recording.
//  4. Bind (bindLocked): a handle that came back unbound (the recording's
//     room, storage of the buffer's own size) hands its slice to the
//     buffer; the Buffer is filled in.
//  5. Notify (notifyLocked): the capture window and the history learn of
//     the allocation.
//
// Every step runs under the device lock; the lock is released only inside
// waits (settle.go), after which each step asks again what it asked before.

package gpumem

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
)

// Alloc reserves size bytes in the stream's memory. When memory is short it
// first relocates or cleans up and retries once (design §9.4). A relocation
// waits for every stream's work without holding the device lock (other
// calls, Stats included, go on meanwhile) and gives up when ctx ends,
// returning ctx's error with nothing moved.
func (s *Stream) Alloc(ctx context.Context, size uint64) (Buffer, error) {
	if err := ctx.Err(); err != nil {
		return Buffer{}, err
	}
	if err := s.d.lockUnlessBorrowed("Stream.Alloc"); err != nil {
		return Buffer{}, err
	}
	defer s.d.mu.Unlock()
	a := allocation{s: s, size: size}
	if err := a.admitLocked(ctx); err != nil {
		return Buffer{}, err
	}
	reserved, err := a.reserveLocked()
	if err != nil {
		reserved, err = a.makeRoomLocked(ctx, err)
	}
	if err != nil {
		return Buffer{}, a.failedLocked(err)
	}
	if err := a.bindLocked(reserved); err != nil {
		return Buffer{}, err
	}
	b := Buffer{s: s, h: a.h, id: a.h.ID(), size: size}
	a.notifyLocked(b)
	return b, nil
}

// allocation is one Stream.Alloc on its way: what its steps hand on.
type allocation struct {
	s    *Stream
	size uint64
	h    *handle.Handle // the buffer's (newBufferHandleLocked), never placed until bound
	// hist is the history recording when the allocation began, and mark its
	// length then: a reservation that recorded something (a page) makes the
	// history check for a growth (history.go). A recording that a wait let
	// StartHistory replace records nothing of this allocation.
	hist *history
	mark uint64
	// u is the page update the reservation was made under.
	u memory.PageUpdate
	// roomWhy is why the recording's held room could not serve the size.
	roomWhy error
}

// admitLocked is step 1: the device open, what passed released, the
// relocation the arena wants done, and the page update.
func (a *allocation) admitLocked(ctx context.Context) error {
	s, d := a.s, a.s.d
	if d.closed {
		return ErrClosed
	}
	if a.hist = d.hist; a.hist != nil {
		a.mark = a.hist.next
	}
	a.h = d.newBufferHandleLocked()
	if !s.capture.Recording() {
		// Not while recording: a held page release forwarded now would be a
		// storage call inside the recording, which invalidates it. The
		// cross-stream uses every stream's queue has passed (a stream that
		// records keeps its own) are released before the reservation, not
		// in the middle of it: otherwise a held free's memory comes back
		// inside a failed reservation's make-room, after the first try,
		// where its history records the release before the allocation and
		// no replay of the trace can try the reservation the way the
		// device did (design §14).
		for _, t := range d.streams {
			if s.releasesPassedOf(t) {
				t.releasePassedLocked()
			}
		}
		s.st.releasePassed()
	}
	a.u = s.pageUpdateLocked()
	// Nothing outdated, nothing to relocate: the trigger is consulted only
	// after a growth left pages behind, not on every allocation.
	if a.u != memory.Allow || !s.mem.HasOutdated() {
		return nil
	}
	if _, wanted := relocation.Wanted(s.self); !wanted {
		return nil
	}
	// The relocation may wait for the streams, with the lock released
	// (settle.go): the context bounds that wait, and an op, which cannot
	// wait, allocates without relocating.
	if err := relocation.RelocateWhenWanted(streamsOf{d: d, s: s, ctx: ctx}); err != nil && !errors.Is(err, ErrCalledFromOp) {
		a.h.Release()
		return a.errorf(err)
	}
	if d.closed {
		a.h.Release()
		return ErrClosed
	}
	a.u = s.pageUpdateLocked()
	return nil
}

// reserveLocked is step 2: the recording's held room (capture.go), held
// for this allocation since its rehearsal; free room is what remains when
// the recording strays from its warmup. Otherwise the stream's memory
// serves the size, binding the buffer at once where held room serves it.
func (a *allocation) reserveLocked() (*handle.Handle, error) {
	s := a.s
	if a.u == memory.Forbidden && s.cap != nil && s.cap.room != nil {
		var h *handle.Handle
		if h, a.roomWhy = s.cap.room.Take(a.size); h != nil {
			return h, nil
		}
	}
	// The slice may be one a freed buffer's ops still use on this stream
	// (slices are reused in stream order, and coalescing zeroes cursors),
	// so the new buffer's last use is everything enqueued so far: another
	// stream's first op on it then waits for that work (X1). A retry
	// (allocRoom.reserve) reads it again: it follows a wait with the lock
	// released.
	return s.mem.Reserve(a.size, a.u, pool.Bind{To: a.h, Cursor: s.st.busyUntil()})
}

// makeRoomLocked is step 3, after the reservation failed with err: the
// make-room stages (makeroom.go), when err is one a reclaim may cure under
// Allow; err as it is otherwise.
func (a *allocation) makeRoomLocked(ctx context.Context, err error) (*handle.Handle, error) {
	if a.u != memory.Allow || !memory.MaySucceedAfterReclaim(err) {
		return nil, err
	}
	h, retried, err := makeRoom(&allocRoom{s: a.s, ctx: ctx, size: a.size, h: a.h}, a.u, err)
	if retried {
		a.s.d.counters.reserveRetries++
	}
	return h, err
}

// failedLocked ends an allocation that could not reserve: the history
// records the failure, the buffer's handle goes, the failure is counted by
// kind, and under Forbidden the recording is doomed, with the reason in
// the error chain. It returns the error Alloc returns.
func (a *allocation) failedLocked(err error) error {
	s, d := a.s, a.s.d
	if a.hist != nil && d.hist == a.hist {
		a.hist.allocFailedLocked(d, s, a.h.ID(), a.size, errors.Is(err, ErrOutOfMemory))
	}
	a.h.Release()
	d.counters.failedReserves[FailureKind(err)]++
	if a.u == memory.Forbidden {
		if s.cap != nil && s.cap.rehearsalRefused != nil && errors.Is(err, memory.ErrPageUpdateForbidden) {
			// The room is missing because the rehearsal could not
			// reserve it: that is the cause a user can act on (free
			// memory, a larger device), so the error carries both.
			err = fmt.Errorf("%w (the rehearsal before the recording could not reserve its room: %w)", err, s.cap.rehearsalRefused)
		} else if a.roomWhy != nil && errors.Is(err, memory.ErrPageUpdateForbidden) {
			// The rehearsal held room for the recording; why that
			// room could not serve this allocation is the cause.
			err = fmt.Errorf("%w (%w)", err, a.roomWhy)
		}
		s.capture.Fail(err)
	}
	return a.errorf(err)
}

// errorf is err as Alloc returns it, naming the stream and the size.
func (a *allocation) errorf(err error) error {
	return fmt.Errorf("gpumem: %s: allocating %d bytes: %w", a.s.name, a.size, err)
}

// bindLocked is step 4: a reserved handle other than the buffer's own (the
// recording's room, storage of the buffer's own size) hands its slice to
// the buffer and goes.
func (a *allocation) bindLocked(reserved *handle.Handle) error {
	s := a.s
	if reserved != a.h {
		err := s.mem.Bind(reserved, a.h, s.st.busyUntil())
		reserved.Release()
		if err != nil {
			a.h.Release()
			return err
		}
	}
	return nil
}

// notifyLocked is step 5: the capture window and the history learn of b.
func (a *allocation) notifyLocked(b Buffer) {
	s, d := a.s, a.s.d
	if s.cap != nil {
		s.cap.allocatedLocked(b)
	}
	if a.hist != nil && d.hist == a.hist { // not one StartHistory began while a wait let go of the lock
		d.recordAllocLocked(a.hist, s, a.h, a.size, a.mark)
	}
}

// pageUpdateLocked says what a reservation on s may do to pages: Forbidden
// on the recording stream, AddOnly on the others while one records, Allow
// otherwise.
func (s *Stream) pageUpdateLocked() memory.PageUpdate {
	if invariantsOn {
		s.d.assertLocked("pageUpdateLocked")
	}
	if s.capture.Recording() {
		return memory.Forbidden
	}
	if s.d.recordingLocked() != nil {
		return memory.AddOnly
	}
	return memory.Allow
}

// releasesPassedOf reports whether an Alloc on s, which does not record,
// releases t's cross-stream uses that passed before it reserves: every
// stream's but another recording one's (a stream that records keeps its
// own). WouldFit counts the same releases.
func (s *Stream) releasesPassedOf(t *Stream) bool { return t == s || !t.capture.Recording() }
