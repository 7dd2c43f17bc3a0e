package trace

import (
	"errors"
	"io"

	"github.com/gpumem/gpumem/history"
)

// The native trace format is the library's: package history owns its
// types, their validation and the writers (a device writes its own
// history without importing the tool). These names let the tool's code
// speak of the format as trace.Event, trace.OpAlloc, …; they are the same
// types and values, so errors.Is and type switches see no difference.

// Op is the kind of a native trace event; see [history.Op].
type Op = history.Op

// The native operations; see [history.OpAlloc] and the ops after it.
const (
	OpAlloc       = history.OpAlloc
	OpFree        = history.OpFree
	OpCleanup     = history.OpCleanup
	OpWindow      = history.OpWindow
	OpCapture     = history.OpCapture
	OpRelease     = history.OpRelease
	OpHold        = history.OpHold
	OpPass        = history.OpPass
	OpAllocFailed = history.OpAllocFailed
	OpDefragment  = history.OpDefragment
)

// ParseOp returns the Op spelled s; see [history.ParseOp].
func ParseOp(s string) (Op, error) { return history.ParseOp(s) }

// Window modes and capture phases; see [history.ModePersistent] and
// [history.PhasePrepare].
const (
	ModePersistent = history.ModePersistent
	ModeDedicated  = history.ModeDedicated
	ModeAuto       = history.ModeAuto
	PhasePrepare   = history.PhasePrepare
	PhaseBegin     = history.PhaseBegin
	PhaseEnd       = history.PhaseEnd
	PhaseLaunch    = history.PhaseLaunch
	PhaseClose     = history.PhaseClose
)

// The format's bounds and identity; see [history.MaxSize],
// [history.MaxStreams] and [history.Format].
const (
	MaxSize    = history.MaxSize
	MaxStreams = history.MaxStreams
	Format     = history.Format
	Version    = history.Version
	// MinVersion is the oldest version Decode reads (version 1: before
	// alloc_failed, defragment and the header's device).
	MinVersion = 1
)

// Event, Header and Device are the format's records; see [history.Event].
type (
	Event  = history.Event
	Header = history.Header
	Device = history.Device
)

// Encoder writes native events as JSONL; see [history.Encoder].
type Encoder = history.Encoder

// NewEncoder returns an Encoder writing to w; see [history.NewEncoder].
func NewEncoder(w io.Writer) *Encoder { return history.NewEncoder(w) }

// The PyTorch snapshot, for writing; see [history.TorchSnapshot].
type (
	TorchSnapshot   = history.TorchSnapshot
	TorchSegment    = history.TorchSegment
	TorchBlock      = history.TorchBlock
	TorchTraceEntry = history.TorchTraceEntry
	TorchFrame      = history.TorchFrame
)

// WriteTorchSnapshot writes s as a pickle; see [history.WriteTorchSnapshot].
func WriteTorchSnapshot(w io.Writer, s *TorchSnapshot) error { return history.WriteTorchSnapshot(w, s) }

// Sentinel errors. Every error this package returns wraps one of them with
// the position (line, entry index) and the offending value. The first
// three are the format's own (package history's: the same values).
var (
	ErrUnknownOp    = history.ErrUnknownOp
	ErrInvalidEvent = history.ErrInvalidEvent
	ErrBadHeader    = history.ErrBadHeader
	// ErrPickle is returned by ReadSnapshot for a pickle it cannot decode:
	// truncated, corrupt, an unsupported protocol or opcode, or too deep.
	ErrPickle = errors.New("bad pickle")
	// ErrPickleGlobal is returned by ReadSnapshot for a pickle that asks for
	// a global, a class or an object construction. Snapshots hold plain data
	// only; the reader never instantiates anything.
	ErrPickleGlobal = errors.New("pickle refers to a global or constructs an object (a memory snapshot holds plain data only)")
	// ErrSnapshot is returned by ReadSnapshot for input that decodes but does
	// not follow the snapshot schema of design §13.2 (a missing action, an
	// impossible size, a missing device).
	ErrSnapshot = errors.New("bad PyTorch snapshot")
	// ErrUnknownWorkload is returned by Synth for a name it does not know.
	ErrUnknownWorkload = errors.New("unknown synthetic workload")
)
