package trace

import (
	"errors"
	"fmt"
)

// Op is the kind of a native trace event (design §13.1).
type Op uint8

// The native operations. The zero Op is invalid so a forgotten field is
// caught by the encoder.
const (
	OpAlloc   Op = iota + 1 // allocate Size bytes on Stream under ID
	OpFree                  // free ID
	OpCleanup               // explicit cleanup of Stream
	OpWindow                // open (Mode persistent/dedicated) or close (auto) a window on Stream
	OpCapture               // a graph-capture Phase of Graph on Stream
	OpRelease               // the memory of ID, freed with Held, is released: reusable from now on
	OpHold                  // Stream's queued work holds its storage releases from now on
	OpPass                  // Stream's oldest open hold passed: what it held goes back
)

var opNames = [...]string{OpAlloc: "alloc", OpFree: "free", OpCleanup: "cleanup", OpWindow: "window", OpCapture: "capture",
	OpRelease: "release", OpHold: "hold", OpPass: "pass"}

// String returns the op's JSONL spelling, or "op(N)" for an invalid op.
func (o Op) String() string {
	if o >= OpAlloc && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// ParseOp returns the Op spelled s, or an error wrapping [ErrUnknownOp].
func ParseOp(s string) (Op, error) {
	for o := OpAlloc; int(o) < len(opNames); o++ {
		if opNames[o] == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("%w %q", ErrUnknownOp, s)
}

// Window modes (Event.Mode of an OpWindow event).
const (
	ModePersistent = "persistent" // opens a persistent window
	ModeDedicated  = "dedicated"  // opens a dedicated window
	ModeAuto       = "auto"       // closes the innermost window
)

// Capture phases (Event.Phase of an OpCapture event).
const (
	PhasePrepare = "prepare"
	PhaseBegin   = "begin"
	PhaseEnd     = "end"
	PhaseLaunch  = "launch"
	PhaseClose   = "close"
)

// MaxSize is the largest allocation size a trace may carry: 2^62 bytes. Larger
// values are refused as impossible rather than allowed to overflow the sums a
// replay keeps.
const MaxSize = uint64(1) << 62

// MaxStreams bounds the streams a trace may use: stream numbers are 0 …
// MaxStreams−1. A replay creates a device stream per number up to the
// largest, so a larger number is refused as impossible (Validate, Decode,
// Replay); a snapshot with more distinct stream handles is refused; Synth
// generates at most MaxStreams streams.
const MaxStreams = 1024

// Event is one native trace event. Which fields are meaningful depends on Op:
//
//	OpAlloc    T, ID, Size, Stream
//	OpFree     T, ID, Held
//	OpCleanup  T, Stream
//	OpWindow   T, Stream, Mode
//	OpCapture  T, Stream, Phase, Graph
//	OpRelease  T, ID
//	OpHold     T, Stream
//	OpPass     T, Stream
//
// The other fields are zero. T is in microseconds and non-decreasing along a
// trace; ID is a logical allocation identity (not an address), unique among
// the allocs of one trace, so a trace replays against any placement policy.
// Stream is a dense stream number 0, 1, …
//
// Held releases (design §9.9, §13.1). A free with Held is a free whose
// memory something still used — another stream's queued op, a mapping, a
// graph — so it was not reusable yet: the allocation's live bytes end at
// the free, its memory stays taken until the OpRelease of its ID. An
// OpHold and its OpPass bracket a span in which the stream's queued work
// held back the storage releases (page deallocations, granule unmaps) it
// made; a stream's holds pass in the order they were opened. A trace
// without these replays as it always did.
type Event struct {
	Op     Op
	T      int64
	ID     uint64
	Size   uint64
	Stream int
	Mode   string
	Phase  string
	Graph  int
	Held   bool
}

// Validate reports whether e is a well-formed event of its op: a known op, a
// time of at least 0, a size at most [MaxSize], a stream in [0, MaxStreams),
// a non-negative graph, a known window mode or capture phase, Held only on
// a free. The error wraps [ErrInvalidEvent] or [ErrUnknownOp]. Whether a
// release follows a held free of its ID, or a pass an open hold, depends on
// the events before it: Decode and the Encoder check that too.
func (e Event) Validate() error {
	if e.T < 0 {
		// Times are microseconds from the trace's start: a negative one is
		// a corrupt or hand-made file, and spans computed from it overflow.
		return fmt.Errorf("%w: field \"t\" is %d, want microseconds >= 0", ErrInvalidEvent, e.T)
	}
	if e.Held && e.Op != OpFree {
		return fmt.Errorf("%w: field \"held\" on a %s event (only a free is held)", ErrInvalidEvent, e.Op)
	}
	switch e.Op {
	case OpAlloc:
		if e.Size > MaxSize {
			return fmt.Errorf("%w: alloc size %d exceeds %d", ErrInvalidEvent, e.Size, MaxSize)
		}
	case OpFree, OpRelease:
		return nil
	case OpCleanup, OpHold, OpPass:
	case OpWindow:
		switch e.Mode {
		case ModePersistent, ModeDedicated, ModeAuto:
		default:
			return fmt.Errorf("%w: window mode %q (want persistent, dedicated or auto)", ErrInvalidEvent, e.Mode)
		}
	case OpCapture:
		switch e.Phase {
		case PhasePrepare, PhaseBegin, PhaseEnd, PhaseLaunch, PhaseClose:
		default:
			return fmt.Errorf("%w: capture phase %q (want prepare, begin, end, launch or close)", ErrInvalidEvent, e.Phase)
		}
		if e.Graph < 0 {
			return fmt.Errorf("%w: negative graph %d", ErrInvalidEvent, e.Graph)
		}
	default:
		return fmt.Errorf("%w %s", ErrUnknownOp, e.Op)
	}
	if e.Stream < 0 || e.Stream >= MaxStreams {
		return fmt.Errorf("%w: stream %d outside [0, %d) (MaxStreams)", ErrInvalidEvent, e.Stream, MaxStreams)
	}
	return nil
}

// Header is the optional first line of a JSONL trace.
type Header struct {
	Format  string // always [Format]
	Version int    // [Version]
	Source  string // free text: where the trace came from
	Streams int    // number of streams the trace uses
}

// Format and Version identify the native trace format in its header line.
const (
	Format  = "gpumem-trace"
	Version = 1
)

// Sentinel errors. Every error this package returns wraps one of them with
// the position (line, entry index) and the offending value.
var (
	// ErrUnknownOp is returned by Decode and the Encoder for an op that is
	// not one of alloc, free, cleanup, window, capture, release, hold, pass.
	ErrUnknownOp = errors.New("unknown trace op")
	// ErrInvalidEvent is returned for a malformed event: a missing or
	// negative field, an impossible size, a bad mode or phase, a decreasing
	// time, invalid JSON, a release or pass that nothing before it opened.
	ErrInvalidEvent = errors.New("invalid trace event")
	// ErrBadHeader is returned by Decode for a header line of another format
	// or version.
	ErrBadHeader = errors.New("unsupported trace header")
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
