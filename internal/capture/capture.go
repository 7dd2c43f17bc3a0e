// Package capture owns the device's record of one stream's capture window
// (design §10.1): State, the capture state machine, kept apart from any
// queue so the root can check the order of calls before it touches a queue:
// a fenced wait on a queue that already records would invalidate that
// recording, so Begin must refuse first.
//
// It is internal: the root drives it under the device lock; what a user
// sees of it is the root's capture API (Stream.PrepareCapture … EndCapture,
// Stream.Capture) and the stream package's sentinels it returns.
//
// Phases and transitions (every other call returns stream.ErrCaptureState and
// changes nothing):
//
//	NoCapture --Prepare(o)--> Prepared{o} --Begin(o)--> Recording{o}
//	Prepared{o}  --Abort(o)-->  NoCapture
//	Prepared{o}  --End(any)-->  NoCapture   (stream.ErrCaptureState: never began)
//	Recording{o} --End(o)-->    NoCapture   (sealable)
//	Recording{o} --End(c≠o)-->  NoCapture   (stream.ErrWrongOwner: no graph)
//
// The first failure seen inside a window (Fail) dooms the recording; it is
// kept until TakeFailure or the next Prepare, so End can close the window
// first and the caller can still hand the failure to Queue.EndCapture.
//
// # Invariants
//
//   - (C1) A State's owner is 0 exactly in phase NoCapture; a refused call
//     changes nothing, except End, which always closes the window.
//
// # Concurrency
//
// A State is not safe for concurrent use: the device lock serialises it.
package capture

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/stream"
)

// Phase is where a State stands.
type Phase uint8

const (
	// NoCapture: no window is open; the zero Phase.
	NoCapture Phase = iota
	// Prepared: a window is open for warmup; nothing records yet.
	Prepared
	// Recording: the stream's queue records instead of running.
	Recording
)

// String returns the phase's name as the design document (docs/design.md) spells it.
func (p Phase) String() string {
	switch p {
	case NoCapture:
		return "NoCapture"
	case Prepared:
		return "Prepared"
	case Recording:
		return "Recording"
	default:
		return fmt.Sprintf("Phase(%d)", uint8(p))
	}
}

// State is the capture state machine of one stream. The zero value is in
// phase NoCapture, ready for use.
//
// State is not safe for concurrent use: the device lock serialises every
// call, as it does for all capture records.
type State struct {
	phase   Phase
	owner   stream.Owner // 0 exactly when phase == NoCapture
	failure error        // first failure of the current or last window
}

// Phase returns the current phase.
func (c *State) Phase() Phase { return c.phase }

// Owner returns the owner of the open window, or 0 when none is open.
func (c *State) Owner() stream.Owner { return c.owner }

// Recording reports whether the window is in phase Recording, which is what
// the device's Streams.Recording step asks of every stream.
func (c *State) Recording() bool { return c.phase == Recording }

// Prepare opens a window for o in phase Prepared and clears the failure of
// any earlier window. Captures do not nest: with a window open it returns
// stream.ErrCaptureState and changes nothing; owner 0 returns stream.ErrInvalid.
func (c *State) Prepare(o stream.Owner) error {
	if o == 0 {
		return fmt.Errorf("stream: prepare capture: owner 0: %w", stream.ErrInvalid)
	}
	if c.phase != NoCapture {
		return fmt.Errorf("stream: prepare capture for owner %d: a window of owner %d is already %v: %w",
			o, c.owner, c.phase, stream.ErrCaptureState)
	}
	c.phase, c.owner, c.failure = Prepared, o, nil
	c.check()
	return nil
}

// Begin moves o's Prepared window to Recording. Without a Prepared window it
// returns stream.ErrCaptureState; from another owner stream.ErrWrongOwner. Either way
// nothing changes, so the owner can still begin or abort.
func (c *State) Begin(o stream.Owner) error {
	if c.phase != Prepared {
		return fmt.Errorf("stream: begin capture for owner %d in phase %v (prepare first): %w", o, c.phase, stream.ErrCaptureState)
	}
	if o != c.owner {
		return fmt.Errorf("stream: begin capture: caller %d, window owned by %d: %w", o, c.owner, stream.ErrWrongOwner)
	}
	c.phase = Recording
	c.check()
	return nil
}

// End closes the window and returns its owner, so the caller can close the
// queue's recording under the right owner whatever happened here.
//
//   - No window: stream.ErrCaptureState, nothing changed, owner 0.
//   - A window still Prepared never recorded: it is aborted (NoCapture) and
//     End returns stream.ErrCaptureState, joined with stream.ErrWrongOwner when caller is
//     not its owner.
//   - Recording, caller is the owner: NoCapture, nil; the recording may seal
//     unless TakeFailure reports a failure.
//   - Recording, caller is not the owner: the window closes anyway (a capture
//     nobody can end would block the stream forever) and End returns
//     stream.ErrWrongOwner joined with the recording's own failure, if any.
//
// The failure stays for TakeFailure in every case.
func (c *State) End(caller stream.Owner) (owner stream.Owner, err error) {
	owner = c.owner
	switch c.phase {
	case NoCapture:
		return 0, fmt.Errorf("stream: end capture by %d: no capture window is open: %w", caller, stream.ErrCaptureState)
	case Prepared:
		c.phase, c.owner = NoCapture, 0
		err = fmt.Errorf("stream: end capture of owner %d: the window was prepared but never began (aborted): %w",
			owner, stream.ErrCaptureState)
		if caller != owner {
			err = errors.Join(err, fmt.Errorf("stream: end capture: caller %d, window owned by %d: %w", caller, owner, stream.ErrWrongOwner))
		}
	case Recording:
		c.phase, c.owner = NoCapture, 0
		if caller != owner {
			err = errors.Join(
				fmt.Errorf("stream: end capture: caller %d, window owned by %d (closed, no graph): %w", caller, owner, stream.ErrWrongOwner),
				c.failure)
		}
	default:
		panic(fmt.Sprintf("stream: capture in unknown phase %v", c.phase))
	}
	c.check()
	return owner, err
}

// Abort returns o's Prepared window to NoCapture, so prepare can be retried
// (after a refused Queue.BeginCapture, for example). Outside phase Prepared
// it returns stream.ErrCaptureState, from another owner stream.ErrWrongOwner; either way
// nothing changes. A Recording window is closed with End, never aborted: its
// queue holds a recording that must be torn down.
func (c *State) Abort(o stream.Owner) error {
	if c.phase != Prepared {
		return fmt.Errorf("stream: abort capture by %d in phase %v (only a prepared window aborts; end a recording one): %w",
			o, c.phase, stream.ErrCaptureState)
	}
	if o != c.owner {
		return fmt.Errorf("stream: abort capture: caller %d, window owned by %d: %w", o, c.owner, stream.ErrWrongOwner)
	}
	c.phase, c.owner = NoCapture, 0
	c.check()
	return nil
}

// Fail records err as the window's failure if it is the first one; it dooms
// the recording. Outside a window, or with a nil err, it does nothing: a
// failure outside a capture is the op's own business (design §11).
func (c *State) Fail(err error) {
	if err == nil || c.phase == NoCapture || c.failure != nil {
		return
	}
	c.failure = err
}

// TakeFailure returns the kept failure, if any, and forgets it.
func (c *State) TakeFailure() error {
	err := c.failure
	c.failure = nil
	return err
}

// check panics when the phase and owner disagree, which no sequence of
// exported calls can cause.
func (c *State) check() {
	if (c.phase == NoCapture) != (c.owner == 0) || c.phase > Recording {
		panic(fmt.Sprintf("stream: capture phase %v with owner %d", c.phase, c.owner))
	}
}
