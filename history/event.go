package history

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
	// OpAllocFailed is an allocation of Size bytes on Stream that the
	// recording device refused (PyTorch's "oom" action): never live, so
	// nothing frees it (version 2).
	OpAllocFailed
	// OpDefragment is a Device.Defragment within Size requested bytes
	// moved and MaxMoves moves (0: no bound) (version 2).
	OpDefragment
)

var opNames = [...]string{OpAlloc: "alloc", OpFree: "free", OpCleanup: "cleanup", OpWindow: "window", OpCapture: "capture",
	OpRelease: "release", OpHold: "hold", OpPass: "pass", OpAllocFailed: "alloc_failed", OpDefragment: "defragment"}

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
//	OpAllocFailed  T, ID, Size, Stream
//	OpDefragment   T, Size (the most requested bytes it may move; 0: no bound), MaxMoves (0: no bound)
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
//
// Failed allocations and compaction (version 2). An OpAllocFailed is an
// allocation the recording device refused: the program asked for it, so a
// replay tries it, but it was never live, so no free follows and its bytes
// never count as live. An OpDefragment is a Device.Defragment the program
// called, which a replay performs at the same point.
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
	// MaxMoves bounds an OpDefragment's moves (0: no bound). An int32
	// after Held keeps Event at 88 bytes: traces hold millions.
	MaxMoves int32
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
	if e.MaxMoves != 0 && e.Op != OpDefragment {
		return fmt.Errorf("%w: field \"max_moves\" on a %s event (only a defragment has it)", ErrInvalidEvent, e.Op)
	}
	switch e.Op {
	case OpAlloc, OpAllocFailed:
		if e.Size > MaxSize {
			return fmt.Errorf("%w: %s size %d exceeds %d", ErrInvalidEvent, e.Op, e.Size, MaxSize)
		}
	case OpDefragment:
		if e.MaxMoves < 0 {
			return fmt.Errorf("%w: field \"max_moves\" is %d, want 0 (no bound) or more", ErrInvalidEvent, e.MaxMoves)
		}
		return nil
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
	Version int    // [Version] when the Encoder writes it; a reader may accept older ones
	Source  string // free text: where the trace came from
	Streams int    // number of streams the trace uses
	// Device, when set, is how the device that recorded the trace ran
	// (version 2; gpumem's Device.WriteTrace writes it).
	Device *Device
}

// Device is how the device that recorded a trace ran: what a replay needs
// to run the trace as that device did. A replay that picks its own page
// size or capacity replays another device: a 2 GiB device's largest page
// is 512 MiB, and its trace replayed with 1 GiB pages peaks higher. Zero
// numbers are unknown (or, for Capacity, none set).
type Device struct {
	Backend   string // where it ran: "host", "sim", "cuda", "vulkan"
	Capacity  uint64 // its capacity (gpumem.WithCapacity); 0: none
	MaxPage   uint64 // the largest page its pools made (gpumem.Properties.MaxPageSize)
	Alignment uint64 // the base alignment of every allocation
	// MaxMemory is the memory figure its granule unmap under pressure
	// judged against (gpumem.Properties.MaxMemory; 0: none).
	MaxMemory uint64
	// Granule is the granule its pages mapped by; 0: pages backed whole.
	Granule uint64
	// Dynamic, Persistent and BaseMode are its gpumem.MemoryConfig, as
	// the dynamic memory, the persistent memory's use and gpumem.Mode are
	// spelled ("adaptive", "size-match", "persistent"; "" for BaseMode:
	// the default).
	Dynamic    string
	Persistent string
	BaseMode   string
	// NoRelocate and NoCompact say it was opened WithoutRelocation or
	// WithoutCompaction.
	NoRelocate bool
	NoCompact  bool
}

// Validate reports whether d's numbers are possible: sizes at most
// [MaxSize], an alignment that is 0 or a power of two, a largest page of
// at least the alignment. The error wraps [ErrBadHeader]. Whether the
// device's settings open a device is the opener's to say.
func (d *Device) Validate() error {
	for _, f := range []struct {
		name string
		v    uint64
	}{{"capacity", d.Capacity}, {"max_page", d.MaxPage}, {"alignment", d.Alignment}, {"max_memory", d.MaxMemory}, {"granule", d.Granule}} {
		if f.v > MaxSize {
			return fmt.Errorf("%w: device field %q is %d, above %d", ErrBadHeader, f.name, f.v, MaxSize)
		}
	}
	if d.Alignment&(d.Alignment-1) != 0 {
		return fmt.Errorf("%w: device field \"alignment\" is %d, not a power of two", ErrBadHeader, d.Alignment)
	}
	if d.MaxPage == 0 || d.MaxPage < d.Alignment {
		return fmt.Errorf("%w: device field \"max_page\" is %d, want at least the alignment (%d) and more than 0", ErrBadHeader, d.MaxPage, d.Alignment)
	}
	return nil
}

// Format and Version identify the native trace format in its header line:
// the Encoder writes Version. Version 2 added OpAllocFailed, OpDefragment
// and Header.Device. Which versions a reader accepts is the reader's
// choice (the tool's Decode reads 1 to Version and refuses a newer one by
// name; a reader of version 1 refuses a version-2 header the same way).
const (
	Format  = "gpumem-trace"
	Version = 2
)

// Sentinel errors. Every error this package returns wraps one of them with
// the position (event index) and the offending value; the tool's reader
// (internal/analysis/trace) returns the same sentinels for what it decodes.
var (
	// ErrUnknownOp is returned by the Encoder (and the tool's Decode) for an op that is
	// not one of alloc, free, cleanup, window, capture, release, hold, pass,
	// alloc_failed, defragment.
	ErrUnknownOp = errors.New("unknown trace op")
	// ErrInvalidEvent is returned for a malformed event: a missing or
	// negative field, an impossible size, a bad mode or phase, a decreasing
	// time, invalid JSON, a release or pass that nothing before it opened.
	ErrInvalidEvent = errors.New("invalid trace event")
	// ErrBadHeader is returned by the Encoder (and the tool's Decode) for a header line of another format,
	// of a version newer than Version, or with impossible device figures.
	ErrBadHeader = errors.New("unsupported trace header")
)
