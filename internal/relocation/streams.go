// The Streams interface and the nine provided steps (design §9.1, §9.2). The
// protocol they start is described in doc.go.
//
// A relocation moves memory any stream may still read or write, so every
// stream's work is done before a byte moves (R1); and nothing moves while a
// graph records, since the pages it touches keep their addresses until it
// seals (R2). The runtime supplies each step; the order they run in lives
// here, once. Every provided function makes its cheap refusals (recording,
// nothing outdated, no need) before Finish, so a call with nothing to do
// never waits on the device. Finish may let other callers of the device in
// while it waits (a runtime must not hold its lock across a wait an op could
// need that lock to end), so the refusals are made again after it.

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
	// relocation.
	RelocationNeed() Need
	// Finish gets every stream's queued and submitted work done, or leaves
	// it to the CopyQueue to wait for before its first copy. It may release
	// the runtime's lock while it waits. An error (the caller's context
	// ended; the caller is an op, which cannot wait for its own stream)
	// abandons the call before anything moved, and is returned.
	Finish() error
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
	// CanCompact reports, without planning, whether the relocating stream's
	// memory holds current pages a compaction might empty: unguarded pages
	// whose live bytes the others' room could hold. HasOutdated says
	// nothing about it, so a compaction is not refused by it.
	CanCompact() bool
	// CompactMemory moves the live allocations of the relocating stream's
	// sparsest current pages into free room of its other current pages
	// (within the limits the runtime set for the call), so those pages can
	// go back.
	CompactMemory()
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
// back. It returns ErrRecording while any stream records, and Finish's
// error, if any, without cleaning up.
//
// Order: RefuseWhileRecording (Recording; error → return it); Relocate(s,
// Explicit) (error → return it); CleanupMemory.
func Reclaim(s Streams) error { return ReclaimFor(s, Explicit) }

// ReclaimFor is Reclaim relocating for r: MemoryPressure when a
// reservation failed and a cleanup alone did not make room.
//
// Order: as Reclaim, with RelocateMemory(r).
func ReclaimFor(s Streams, r Reason) error {
	if err := RefuseWhileRecording(s); err != nil {
		return err
	}
	if err := Relocate(s, r); err != nil {
		return err
	}
	s.CleanupMemory()
	return nil
}

// CompactPages compacts the relocating stream's current pages, unless a graph
// records or nothing could be emptied. Unlike Relocate it does not ask
// HasOutdated: fragmentation inside current pages is what it answers.
//
// Order: Recording (true → return nil); CanCompact (false → return nil);
// Finish (error → return it); Recording, CanCompact again; CompactMemory.
func CompactPages(s Streams) error {
	if s.Recording() || !s.CanCompact() {
		return nil
	}
	if err := s.Finish(); err != nil {
		return err
	}
	if s.Recording() || !s.CanCompact() {
		return nil
	}
	s.CompactMemory()
	return nil
}

// ReclaimCompacting is Reclaim by compaction: the current pages' sparsest
// move into the others' room, then every page left empty goes back. The
// make-room path's compact stage and its further rounds run it, after a
// cleanup and a relocation off outdated pages both failed to make room;
// Device.Defragment runs it at a moment the runtime chose.
//
// Order: RefuseWhileRecording (Recording; error → return it); CompactPages (error
// → return it); CleanupMemory.
func ReclaimCompacting(s Streams) error {
	if err := RefuseWhileRecording(s); err != nil {
		return err
	}
	if err := CompactPages(s); err != nil {
		return err
	}
	s.CleanupMemory()
	return nil
}

// Wanted reports whether the relocating stream's memory asks for a
// relocation now, and for which reason: before the arena runs out of page
// sizes (ArenaFull). Memory pressure is never anticipated (see trigger.go):
// the device answers it when a reservation fails. It never waits.
//
// Order: RelocationNeed (NeedNothing → false); Recording (true → false);
// Need.Reason.
func Wanted(s Streams) (Reason, bool) {
	need := s.RelocationNeed()
	if need.Kind == NeedNothing {
		return Explicit, false
	}
	if s.Recording() {
		return Explicit, false
	}
	return need.Reason()
}

// RelocateWhenWanted relocates when the relocating stream's memory asks for
// it (Wanted). It is the only provided step that consults the trigger.
//
// Order: Wanted (false → return nil); Finish (error → return it); Wanted
// again (false → return nil); RelocateMemory(reason).
func RelocateWhenWanted(s Streams) error {
	if _, ok := Wanted(s); !ok {
		return nil
	}
	if err := s.Finish(); err != nil {
		return err
	}
	reason, ok := Wanted(s)
	if !ok {
		return nil
	}
	s.RelocateMemory(reason)
	return nil
}

// Relocate relocates the relocating stream's memory for r, unless a graph
// records or nothing is outdated. It bypasses the trigger.
//
// Order: Recording (true → return nil); HasOutdated (false → return nil);
// Finish (error → return it); Recording, HasOutdated again; RelocateMemory(r).
func Relocate(s Streams, r Reason) error {
	if s.Recording() || !s.HasOutdated() {
		return nil
	}
	if err := s.Finish(); err != nil {
		return err
	}
	if s.Recording() || !s.HasOutdated() {
		return nil
	}
	s.RelocateMemory(r)
	return nil
}

// RelocateDevice relocates every stream's memory for r, unless a graph
// records or nothing is outdated anywhere. It mirrors Relocate with the
// device-wide checks. A capture runs it before its warmup: a recording may
// touch memory any stream owns, and every page it touches is guarded for the
// graph's life, where no relocation can empty it.
//
// Order: Recording (true → return nil); DeviceHasOutdated (false → return
// nil); Finish (error → return it); Recording, DeviceHasOutdated again;
// RelocateDeviceMemory(r).
func RelocateDevice(s Streams, r Reason) error {
	if s.Recording() || !s.DeviceHasOutdated() {
		return nil
	}
	if err := s.Finish(); err != nil {
		return err
	}
	if s.Recording() || !s.DeviceHasOutdated() {
		return nil
	}
	s.RelocateDeviceMemory(r)
	return nil
}
