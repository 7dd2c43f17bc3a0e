// The Streams interface and the five provided steps (SPEC §9.1, §9.2). The
// protocol they start is described in doc.go.
//
// A relocation moves memory any stream may still read or write, so every
// stream's work is done before a byte moves (R1); and nothing moves while a
// graph records, since the pages it touches keep their addresses until it
// seals (R2). The runtime supplies each step; the order they run in lives
// here, once. Every provided function makes its cheap refusals (recording,
// nothing outdated, no need) before Finish, so a call with nothing to do
// never waits on the device.

package relocation

import "errors"

// ErrRecording is returned by RefuseWhileRecording and Reclaim while any
// stream of the device records a graph. The caller may retry once the
// recording seals (or is abandoned).
var ErrRecording = errors.New("relocation: refused while a stream records a graph: " +
	"the pages a recording touches keep their addresses until it seals, and nothing may wait on the device under it")

// Streams is a runtime's streams, as relocating one stream's memory needs
// them. The relocating stream is the stream on whose behalf a call is made.
// The provided functions call these steps in a fixed order; an
// implementation supplies each step and never orders them itself.
type Streams interface {
	// Recording reports whether any stream is recording a graph.
	Recording() bool
	// HasOutdated reports whether a growth left pages behind in the
	// relocating stream's memory: without any, a relocation has nothing to
	// move and waits on nothing.
	HasOutdated() bool
	// RelocationNeed reports whether the relocating stream's memory wants a
	// relocation, before the bytes the device holds are known.
	RelocationNeed() Need
	// BytesAllocated returns the bytes every stream's memory holds from the
	// device.
	BytesAllocated() uint64
	// Finish gets every stream's queued and submitted work done, or leaves
	// it to the CopyQueue to wait for before its first copy.
	Finish()
	// RelocateMemory moves what the relocating stream's memory holds on
	// outdated pages.
	RelocateMemory(r Reason)
	// DeviceHasOutdated reports whether a growth left pages behind in any
	// stream's memory.
	DeviceHasOutdated() bool
	// RelocateDeviceMemory moves what every stream's memory holds on
	// outdated pages.
	RelocateDeviceMemory(r Reason)
	// CleanupMemory gives back every page the relocating stream's memory
	// holds and nothing needs.
	CleanupMemory()
}

// RefuseWhileRecording returns ErrRecording if s.Recording(), else nil: the
// pages a recording touches keep their addresses until it seals, and nothing
// may wait on the device under it. It is what Reclaim checks first, separate
// so a caller with work of its own (draining deferred frees) can refuse
// before that work.
//
// Order: Recording.
func RefuseWhileRecording(s Streams) error {
	if s.Recording() {
		return ErrRecording
	}
	return nil
}

// Reclaim gives back everything the relocating stream's memory holds and
// nothing needs: what the outdated pages still hold moves first, while the
// current pages keep the room it moves into, then every page left empty goes
// back. It returns ErrRecording while any stream records.
//
// Order: RefuseWhileRecording (Recording; error → return it); Relocate(s,
// Explicit) (Recording, HasOutdated, then Finish and RelocateMemory(Explicit)
// if anything is outdated); CleanupMemory.
func Reclaim(s Streams) error {
	if err := RefuseWhileRecording(s); err != nil {
		return err
	}
	Relocate(s, Explicit)
	s.CleanupMemory()
	return nil
}

// RelocateWhenWanted relocates when the relocating stream's memory asks for
// it: while the device still has a page to spare (MemoryPressure), or before
// the arena runs out of page sizes (ArenaFull). It is the only provided step
// that consults the trigger.
//
// Order: RelocationNeed (NeedNothing → return); Recording (true → return);
// Need.Reason, which calls BytesAllocated only for NeedUnderPressure (no
// reason → return); Finish; RelocateMemory(reason).
func RelocateWhenWanted(s Streams) {
	need := s.RelocationNeed()
	if need.Kind == NeedNothing {
		return
	}
	if s.Recording() {
		return
	}
	reason, ok := need.Reason(s.BytesAllocated)
	if !ok {
		return
	}
	s.Finish()
	s.RelocateMemory(reason)
}

// Relocate relocates the relocating stream's memory for r, unless a graph
// records or nothing is outdated. It bypasses the trigger.
//
// Order: Recording (true → return); HasOutdated (false → return); Finish;
// RelocateMemory(r).
func Relocate(s Streams, r Reason) {
	if s.Recording() {
		return
	}
	if !s.HasOutdated() {
		return
	}
	s.Finish()
	s.RelocateMemory(r)
}

// RelocateDevice relocates every stream's memory for r, unless a graph
// records or nothing is outdated anywhere. It mirrors Relocate with the
// device-wide checks. A capture runs it before its warmup: a recording may
// touch memory any stream owns, and every page it touches is guarded for the
// graph's life, where no relocation can empty it.
//
// Order: Recording (true → return); DeviceHasOutdated (false → return);
// Finish; RelocateDeviceMemory(r).
func RelocateDevice(s Streams, r Reason) {
	if s.Recording() {
		return
	}
	if !s.DeviceHasOutdated() {
		return
	}
	s.Finish()
	s.RelocateDeviceMemory(r)
}
