package cuda

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/cuda/internal/driver"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

var (
	// ErrNoDriver is returned (wrapped) by NewBackend, OpenDevice and Available when no usable
	// driver is present: libcuda.so.1 cannot be loaded, it lacks a required
	// symbol (the message names it), cuInit fails, or the device ordinal
	// asked for does not exist. Nothing was acquired; fall back to the host
	// backend.
	ErrNoDriver = errors.New("cuda: no usable CUDA driver")

	// ErrUnsupported is returned by an optional feature the loaded driver or
	// device lacks: virtual memory management (the eight cuMem* VMM symbols
	// or the device attribute) or cuMemsetD8Async. See Features.
	ErrUnsupported = errors.New("cuda: not supported by this driver or device")

	// ErrClosed is returned by a call on a closed Backend, or on its driver
	// context, streams or executors once closed. Nothing ran.
	ErrClosed = errors.New("cuda: closed")

	// ErrCaptureInvalidated matches driver errors 900 and 901: the stream's
	// capture was invalidated (by an operation a capture does not support,
	// or after such an operation). End the capture and discard it.
	ErrCaptureInvalidated = errors.New("cuda: stream capture invalidated")

	// ErrCaptureUnsupported matches driver error 900: an operation a capture
	// does not support. The capture concerned is invalidated, so such an
	// error also matches ErrCaptureInvalidated.
	ErrCaptureUnsupported = errors.New("cuda: operation not supported during stream capture")

	// ErrCaptureUnjoined matches driver error 904: the capture forked work
	// onto another stream that was never joined back; the capture is over
	// and yielded no graph.
	ErrCaptureUnjoined = errors.New("cuda: stream capture has an unjoined fork")

	// ErrCapturedEvent matches driver error 907: an event last recorded in a
	// capturing stream was queried or synchronised. It completes only when a
	// graph containing the record is launched.
	ErrCapturedEvent = errors.New("cuda: event was recorded in a stream capture")

	// ErrWrongOwner matches driver error 908: a thread-local capture was
	// touched from another thread than the one that began it. The capture is
	// still active; end it on its stream's executor.
	ErrWrongOwner = errors.New("cuda: stream capture touched from the wrong thread")
)

// DriverError is a failed driver call: Op is the driver symbol called, Code
// the CUresult it returned and Name the driver's name for it
// (cuGetErrorName; empty when the driver does not know the code).
//
// It matches, with errors.Is: storage.ErrOutOfMemory (2);
// storage.ErrDevicePoisoned (214, 700, 710, 714–719: sticky faults, nothing
// on the context can be trusted afterwards); ErrCaptureInvalidated (900,
// 901); ErrCaptureUnsupported (900); ErrCaptureUnjoined (904);
// ErrCapturedEvent (907); ErrWrongOwner (908). The capture classes also
// match the stream package's (and so gpumem's) sentinels of the same
// meaning: stream.ErrCaptureInvalidated (900, 901),
// stream.ErrCaptureUnsupported (900) and stream.ErrWrongOwner (908).
type DriverError struct {
	Op   string
	Code int
	Name string
}

func (e *DriverError) Error() string {
	name := e.Name
	if name == "" {
		name = "unknown CUresult"
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, name, e.Code)
}

// Is reports whether the error's code belongs to target's class; see the
// type's documentation for the table.
func (e *DriverError) Is(target error) bool {
	switch target {
	case storage.ErrOutOfMemory:
		return e.Code == driver.CodeOutOfMemory
	case storage.ErrDevicePoisoned:
		return isPoison(e.Code)
	case ErrCaptureInvalidated, stream.ErrCaptureInvalidated:
		return e.Code == driver.CodeCaptureUnsupported || e.Code == driver.CodeCaptureInvalidated
	case ErrCaptureUnsupported, stream.ErrCaptureUnsupported:
		return e.Code == driver.CodeCaptureUnsupported
	case ErrCaptureUnjoined:
		return e.Code == driver.CodeCaptureUnjoined
	case ErrCapturedEvent:
		return e.Code == driver.CodeCapturedEvent
	case ErrWrongOwner, stream.ErrWrongOwner:
		return e.Code == driver.CodeCaptureWrongThread
	}
	return false
}

// isPoison reports whether code is a sticky fault that leaves the context
// unusable.
func isPoison(code int) bool {
	return code == driver.CodeECCUncorrectable || code == driver.CodeIllegalAddress || code == driver.CodeAssert ||
		(code >= driver.CodeHardwareStackError && code <= driver.CodeLaunchFailed)
}
