package relocation

import "testing"

func TestStatsRecordCountsTheRunAndTheOutcomeKind(t *testing.T) {
	var s Stats
	s.Record(MemoryPressure, Outcome{Kind: Moved, Moves: 3, Bytes: 300})
	s.Record(MemoryPressure, Outcome{Kind: NothingToMove})
	s.Record(Explicit, Outcome{Kind: Abandoned, Err: errQueue})
	s.Record(Capture, Outcome{Kind: Leaked, Err: errWait})
	s.Record(ArenaFull, Outcome{Kind: Moved, Moves: 1, Bytes: 7})

	want := Stats{
		Runs:          [NumReasons]uint64{Explicit: 1, MemoryPressure: 2, ArenaFull: 1, Capture: 1},
		Moves:         4,
		BytesMoved:    307,
		NothingToMove: 1,
		Abandoned:     1,
		Leaked:        1,
	}
	if s != want {
		t.Fatalf("Stats = %+v, want %+v", s, want)
	}
}

func TestStatsRecordIgnoresMoveCountsOfFailedRelocations(t *testing.T) {
	var s Stats
	s.Record(Explicit, Outcome{Kind: Abandoned, Moves: 5, Bytes: 500, Err: errQueue})
	if s.Moves != 0 || s.BytesMoved != 0 || s.Abandoned != 1 {
		t.Fatalf("Stats = %+v, want only Abandoned and the run counted", s)
	}
}

func TestStatsAddSumsEveryCounter(t *testing.T) {
	a := Stats{Runs: [NumReasons]uint64{1, 2, 3, 4, 5}, Moves: 5, BytesMoved: 6, PagesReleased: 7, BytesReleased: 8, NothingToMove: 9, Abandoned: 10, Leaked: 11,
		CompactMoves: 12, CompactBytesMoved: 13, CompactPagesFreed: 14, CompactBytesFreed: 15, CompactPagesRepacked: 16, CompactNothingToMove: 17}
	b := Stats{Runs: [NumReasons]uint64{10, 20, 30, 40, 50}, Moves: 50, BytesMoved: 60, PagesReleased: 70, BytesReleased: 80, NothingToMove: 90, Abandoned: 100, Leaked: 110,
		CompactMoves: 120, CompactBytesMoved: 130, CompactPagesFreed: 140, CompactBytesFreed: 150, CompactPagesRepacked: 160, CompactNothingToMove: 170}
	a.Add(b)
	want := Stats{Runs: [NumReasons]uint64{11, 22, 33, 44, 55}, Moves: 55, BytesMoved: 66, PagesReleased: 77, BytesReleased: 88, NothingToMove: 99, Abandoned: 110, Leaked: 121,
		CompactMoves: 132, CompactBytesMoved: 143, CompactPagesFreed: 154, CompactBytesFreed: 165, CompactPagesRepacked: 176, CompactNothingToMove: 187}
	if a != want {
		t.Fatalf("Add = %+v, want %+v", a, want)
	}
}

func TestStatsRecordCountsACompactionsMovesApart(t *testing.T) {
	var s Stats
	s.Record(Compact, Outcome{Kind: Moved, Moves: 3, Bytes: 300})
	s.Record(MemoryPressure, Outcome{Kind: Moved, Moves: 1, Bytes: 100})
	if s.Moves != 4 || s.BytesMoved != 400 || s.CompactMoves != 3 || s.CompactBytesMoved != 300 || s.Runs[Compact] != 1 {
		t.Fatalf("Stats = %+v, want 4 moves (3 by compaction), 400 bytes (300 by compaction), one compaction run", s)
	}
}

func TestStatsRecordPanicsOnAnInternalBug(t *testing.T) {
	cases := map[string]func(s *Stats){
		"unknown reason":    func(s *Stats) { s.Record(Reason(NumReasons), Outcome{}) },
		"unknown kind":      func(s *Stats) { s.Record(Explicit, Outcome{Kind: OutcomeKind(9)}) },
		"negative moves":    func(s *Stats) { s.Record(Explicit, Outcome{Kind: Moved, Moves: -1}) },
		"unknown need kind": func(*Stats) { Need{Kind: NeedKind(9)}.Reason() },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			var s Stats
			defer func() {
				if r := recover(); r == nil {
					t.Fatal("did not panic")
				}
				if s != (Stats{}) {
					t.Fatalf("a refused record changed the stats: %+v", s)
				}
			}()
			f(&s)
		})
	}
}
