package gpumem

import (
	"errors"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// Errors of the layers below, re-exported so callers need one import. They
// are the same values: errors.Is works at any layer.
var (
	ErrOutOfMemory         = storage.ErrOutOfMemory
	ErrDevicePoisoned      = storage.ErrDevicePoisoned
	ErrBufferTooBig        = pool.ErrBufferTooBig
	ErrPageSizesExhausted  = pool.ErrPageSizesExhausted
	ErrPageUpdateForbidden = memory.ErrPageUpdateForbidden
	ErrInvalidConfig       = memory.ErrInvalidConfig
	ErrRecording           = relocation.ErrRecording
	ErrNotFound            = handle.ErrNotFound
	ErrUnwritten           = handle.ErrUnwritten
	ErrCaptureState        = stream.ErrCaptureState
	ErrCaptureInvalidated  = stream.ErrCaptureInvalidated
	ErrCaptureUnsupported  = stream.ErrCaptureUnsupported
	ErrWrongOwner          = stream.ErrWrongOwner
	ErrCaptureCrossStream  = stream.ErrCaptureCrossStream
)

// ErrIndexOverflow is returned when a pool already holds as many pages or
// allocations as a location can index (FailureKind "index_overflow"): free
// buffers, or give the device larger pages (WithProperties).
var ErrIndexOverflow = handle.ErrIndexOverflow

var (
	// ErrNotSupported is returned when a backend cannot do what was asked:
	// no driver on this machine (fall back to Open), or Map on a device
	// whose memory the host cannot read.
	ErrNotSupported = errors.New("gpumem: not supported")

	// ErrClosed is returned by every call on a closed device, or on a stream,
	// buffer or graph of one.
	ErrClosed = errors.New("gpumem: device closed")

	// ErrAlreadyFreed is returned by a second Free of a buffer, and by any use
	// of a freed buffer.
	ErrAlreadyFreed = errors.New("gpumem: buffer already freed")

	// ErrForeignBuffer is returned when a buffer of another device is used.
	ErrForeignBuffer = errors.New("gpumem: buffer belongs to another device")

	// ErrInvalidUse is returned for a Use outside its buffer, or the zero
	// Buffer.
	ErrInvalidUse = errors.New("gpumem: invalid buffer use")

	// ErrInvalidName is returned for a name the call cannot use, such as an
	// empty one for Device.Publish.
	ErrInvalidName = errors.New("gpumem: invalid name")
)
