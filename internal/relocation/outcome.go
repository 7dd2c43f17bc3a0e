package relocation

import "fmt"

// OutcomeKind is how a relocation ended.
type OutcomeKind uint8

const (
	// NothingToMove: the plan was empty.
	NothingToMove OutcomeKind = iota
	// Moved: every copy landed and was committed.
	Moved
	// Abandoned: the copy failed and every clone was released; allocations
	// stayed where they were and targets are free again.
	Abandoned
	// Leaked: a copy wait failed on a device that is not poisoned, so source
	// and target slices were dropped unreleased and are never reused (R7).
	Leaked
)

func (k OutcomeKind) String() string {
	switch k {
	case NothingToMove:
		return "NothingToMove"
	case Moved:
		return "Moved"
	case Abandoned:
		return "Abandoned"
	case Leaked:
		return "Leaked"
	}
	return fmt.Sprintf("OutcomeKind(%d)", uint8(k))
}

// Outcome is what one relocation did: its kind, the moves and bytes it copied
// (Moved only) and the error that ended it (Abandoned and Leaked only).
type Outcome struct {
	Kind  OutcomeKind
	Moves int
	Bytes uint64
	Err   error
}

// Stats counts relocations of one memory, or of a device when summed with
// Add. Record fills every counter except PagesReleased and BytesReleased,
// which the pool's drain after a commit knows and adds itself.
type Stats struct {
	Runs          [NumReasons]uint64 // relocations by reason, whatever their outcome
	Moves         uint64             // allocations moved
	BytesMoved    uint64             // requested bytes copied by moves that committed
	PagesReleased uint64             // outdated pages given back after a commit
	BytesReleased uint64             // bytes of those pages
	NothingToMove uint64             // relocations whose plan was empty
	Abandoned     uint64             // relocations abandoned (clones released)
	Leaked        uint64             // relocations leaked after a failed wait
	// Compaction's share (Reason Compact): its moves and bytes are also in
	// Moves and BytesMoved; the pages it emptied are current pages, given
	// back by the cleanup that follows it, counted here and not in
	// PagesReleased.
	CompactMoves      uint64 // allocations a compaction moved
	CompactBytesMoved uint64 // requested bytes those moves copied
	CompactPagesFreed uint64 // current pages a compaction emptied and gave back
	CompactBytesFreed uint64 // bytes of those pages (mapped bytes on granular storage), net of repacks' new pages
	// CompactPagesRepacked counts the pages of CompactPagesFreed whose
	// allocations went (in part) onto a new page of their packed size
	// (pool.CompactPlan.Repacked): the pool holds as many pages after, but
	// fewer bytes.
	CompactPagesRepacked uint64
	// CompactNothingToMove counts compactions whose plan was empty (also
	// in NothingToMove), so Runs[Compact] less it is the compactions that
	// moved or tried to.
	CompactNothingToMove uint64
}

// Record counts one relocation for r that ended with o: Runs[r], and the
// counter of o's kind (Moves and BytesMoved for Moved, and for a Moved
// compaction CompactMoves and CompactBytesMoved too). An unknown reason or
// kind, or a negative move count, is an internal bug and panics.
func (s *Stats) Record(r Reason, o Outcome) {
	if r >= NumReasons {
		panic(fmt.Sprintf("relocation: Record of unknown %v", r))
	}
	switch o.Kind {
	case NothingToMove:
		s.NothingToMove++
		if r == Compact {
			s.CompactNothingToMove++
		}
	case Moved:
		if o.Moves < 0 {
			panic(fmt.Sprintf("relocation: Record of %d moves", o.Moves))
		}
		s.Moves += uint64(o.Moves)
		s.BytesMoved += o.Bytes
		if r == Compact {
			s.CompactMoves += uint64(o.Moves)
			s.CompactBytesMoved += o.Bytes
		}
	case Abandoned:
		s.Abandoned++
	case Leaked:
		s.Leaked++
	default:
		panic(fmt.Sprintf("relocation: Record of unknown %v", o.Kind))
	}
	s.Runs[r]++
}

// Add adds every counter of o to s, for device-wide totals over streams.
func (s *Stats) Add(o Stats) {
	for i := range s.Runs {
		s.Runs[i] += o.Runs[i]
	}
	s.Moves += o.Moves
	s.BytesMoved += o.BytesMoved
	s.PagesReleased += o.PagesReleased
	s.BytesReleased += o.BytesReleased
	s.NothingToMove += o.NothingToMove
	s.Abandoned += o.Abandoned
	s.Leaked += o.Leaked
	s.CompactMoves += o.CompactMoves
	s.CompactBytesMoved += o.CompactBytesMoved
	s.CompactPagesFreed += o.CompactPagesFreed
	s.CompactBytesFreed += o.CompactBytesFreed
	s.CompactPagesRepacked += o.CompactPagesRepacked
	s.CompactNothingToMove += o.CompactNothingToMove
}
