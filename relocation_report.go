// What the device tells of its relocations: why one ran
// (RelocationReason), how it ended (RelocationOutcome), in the history's
// HistoryRelocation entries, and their counts (RelocationStats, in Stats).
// The relocation protocol itself is internal (internal/relocation); these
// are its figures as a user reads them.

package gpumem

import "github.com/gpumem/gpumem/internal/relocation"

// RelocationReason says what asked for a relocation (design §8.1), and so
// how much room its targets may take: one that gives memory back must not
// take a new page for it, one that must empty the outdated pages may.
type RelocationReason uint8

const (
	// RelocationExplicit: an explicit cleanup (Device.Cleanup,
	// Stream.Cleanup), which exists to give memory back.
	RelocationExplicit RelocationReason = iota
	// RelocationMemoryPressure: a reservation failed for want of device
	// memory and a cleanup without relocation did not make room.
	RelocationMemoryPressure
	// RelocationArenaFull: the arena took all its page sizes, so the next
	// growth would have nowhere to go.
	RelocationArenaFull
	// RelocationCapture: a capture is prepared, and every page it touches
	// will be guarded for the graph's life.
	RelocationCapture
	// RelocationCompact: current pages hold free room between live
	// allocations, and emptying the sparsest of them gives whole pages
	// back: the last stages of making room, and Device.Defragment.
	RelocationCompact
)

// String returns the reason's name as metrics and traces spell it:
// "Explicit", "MemoryPressure", "ArenaFull", "Capture", "Compact".
func (r RelocationReason) String() string { return relocation.Reason(r).String() }

// RelocationOutcome is how a relocation ended.
type RelocationOutcome uint8

const (
	// RelocationNothingToMove: the plan was empty.
	RelocationNothingToMove RelocationOutcome = iota
	// RelocationMoved: every copy landed and was committed.
	RelocationMoved
	// RelocationAbandoned: a copy failed; every allocation stayed where it
	// was and the targets are free again.
	RelocationAbandoned
	// RelocationLeaked: a copy wait failed on a device that is not
	// poisoned, so the source and target room were dropped and are never
	// reused (the copy may still be running).
	RelocationLeaked
)

// String returns the outcome's name: "NothingToMove", "Moved",
// "Abandoned", "Leaked".
func (o RelocationOutcome) String() string { return relocation.OutcomeKind(o).String() }

// RelocationStats counts a device's relocations, summed over its streams.
// Compaction is relocation for RelocationCompact: its moves and bytes are
// in Moves and BytesMoved too, and its own share is in the Compact fields.
type RelocationStats struct {
	Runs          [5]uint64 // relocations by RelocationReason, whatever their outcome
	Moves         uint64    // allocations moved
	BytesMoved    uint64    // requested bytes copied by moves that committed
	PagesReleased uint64    // outdated pages given back after a commit
	BytesReleased uint64    // bytes of those pages
	NothingToMove uint64    // relocations whose plan was empty
	Abandoned     uint64    // relocations abandoned (every allocation stayed)
	Leaked        uint64    // relocations leaked after a failed wait
	// Compaction's share (RelocationCompact): its moves and bytes are also
	// in Moves and BytesMoved; the pages it emptied are current pages,
	// given back by the cleanup that follows it, counted here and not in
	// PagesReleased.
	CompactMoves      uint64 // allocations a compaction moved
	CompactBytesMoved uint64 // requested bytes those moves copied
	CompactPagesFreed uint64 // current pages a compaction emptied and gave back
	CompactBytesFreed uint64 // bytes of those pages (mapped bytes on granular storage), net of repacks' new pages
	// CompactPagesRepacked counts the pages of CompactPagesFreed whose
	// allocations went (in part) onto a new page of their packed size:
	// the pool holds as many pages after, but fewer bytes.
	CompactPagesRepacked uint64
	// CompactNothingToMove counts compactions whose plan was empty (also
	// in NothingToMove), so Runs[RelocationCompact] less it is the
	// compactions that moved or tried to.
	CompactNothingToMove uint64
}

// relocationStats is s as a user reads it: the same fields (the conversion
// fails to compile the day they differ, and Runs has one counter per
// reason: TestPublicEnumsMatchTheInternalOnes).
func relocationStats(s relocation.Stats) RelocationStats { return RelocationStats(s) }
