package backendkit

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/stream"
)

// Recording is a queue's open capture: who owns it, how many ops it
// recorded, and the first cause that invalidated it (DK2). The queue's
// lock guards it; its methods that take a *Recording accept nil (no
// capture open) where they say so.
type Recording struct {
	Owner stream.Owner
	Ops   int

	invalid error // wraps stream.ErrCaptureInvalidated once invalidated
}

// BeginOwner refuses a capture for owner 0, which owns nothing.
func BeginOwner(backend string, o stream.Owner) error {
	if o == 0 {
		return fmt.Errorf("%s: begin capture: owner 0: %w", backend, stream.ErrInvalid)
	}
	return nil
}

// Busy refuses a capture for o on stream index while r, its open
// recording, is there; nil when r is nil.
func (r *Recording) Busy(backend string, index int, o stream.Owner) error {
	if r == nil {
		return nil
	}
	return fmt.Errorf("%s: begin capture for owner %d: stream %d already records for owner %d: %w",
		backend, o, index, r.Owner, stream.ErrCaptureState)
}

// Invalidate invalidates r, keeping the first cause (DK2), and returns the
// error wrapping stream.ErrCaptureInvalidated.
func (r *Recording) Invalidate(cause string) error {
	if r.invalid == nil {
		r.invalid = fmt.Errorf("%w: %s", stream.ErrCaptureInvalidated, cause)
	}
	return r.invalid
}

// Invalid returns what invalidated r, or nil; nil too when r is nil.
func (r *Recording) Invalid() error {
	if r == nil {
		return nil
	}
	return r.invalid
}

// Refuse refuses call (`enqueue "op"`, "replay") on an invalidated
// recording; nil when r is nil or valid.
func (r *Recording) Refuse(backend, call string) error {
	if err := r.Invalid(); err != nil {
		return fmt.Errorf("%s: %s on an invalidated recording: %w", backend, call, err)
	}
	return nil
}

// RefuseWait refuses a host wait while r records, invalidating it with
// cause: the error wraps stream.ErrCaptureUnsupported and
// stream.ErrCaptureInvalidated. Nil when r is nil.
func (r *Recording) RefuseWait(backend, cause string) error {
	if r == nil {
		return nil
	}
	return fmt.Errorf("%s: wait: %w: %w", backend, stream.ErrCaptureUnsupported, r.Invalidate(cause))
}

// RefuseCrossStream invalidates r for a wait on another stream's step not
// yet complete, which a graph cannot express: the error wraps
// stream.ErrCaptureCrossStream and stream.ErrCaptureInvalidated. Nil when
// r is nil.
func (r *Recording) RefuseCrossStream(backend, cause string) error {
	if r == nil {
		return nil
	}
	return fmt.Errorf("%s: wait fence: %w: %w", backend, stream.ErrCaptureCrossStream, r.Invalidate(cause))
}

// Recorded counts op name, whose run function returned runErr, into r;
// a failed op invalidates r instead, and the error says so.
func (r *Recording) Recorded(backend, name string, runErr error) error {
	if runErr != nil {
		return fmt.Errorf("%s: recording op %q: %w", backend, name, r.Invalidate(fmt.Sprintf("op %q failed: %v", name, runErr)))
	}
	r.Ops++
	return nil
}

// Refusals returns why r, ended now by owner o, yields no graph: another
// owner than its own, an invalidation, or the device's doom (doomed).
// Empty: seal it.
func (r *Recording) Refusals(backend string, o stream.Owner, doomed error) []error {
	var errs []error
	if o != r.Owner {
		errs = append(errs, fmt.Errorf("%s: end capture: caller %d, capture owned by %d (torn down, no graph): %w",
			backend, o, r.Owner, stream.ErrWrongOwner))
	}
	if r.invalid != nil {
		errs = append(errs, fmt.Errorf("%s: end capture: %w", backend, r.invalid))
	}
	if doomed != nil {
		errs = append(errs, fmt.Errorf("%s: end capture: recording doomed: %w", backend, doomed))
	}
	return errs
}

// NotRecording is EndCapture's error on stream index, which does not
// record, with doomed joined.
func NotRecording(backend string, index int, o stream.Owner, doomed error) error {
	return errors.Join(fmt.Errorf("%s: end capture by owner %d: stream %d does not record: %w",
		backend, o, index, stream.ErrCaptureState), doomed)
}

// CopyWhileRecording refuses a device copy (a relocation's) on stream
// index while it records: a relocation never runs then.
func CopyWhileRecording(backend string, index int) error {
	return fmt.Errorf("%s: stream %d: copy on device while recording: %w", backend, index, stream.ErrCaptureState)
}
