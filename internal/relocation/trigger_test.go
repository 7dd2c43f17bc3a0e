package relocation

import "testing"

func TestNeedReasonNamesTheRelocationTheNeedAsksFor(t *testing.T) {
	cases := []struct {
		name   string
		need   Need
		want   Reason
		wantOK bool
	}{
		{"no need gives no reason", Need{Kind: NeedNothing}, Explicit, false},
		// §8.4 example 6: a full arena relocates whatever the device holds.
		{"a full arena gives ArenaFull", Need{Kind: NeedArenaFull}, ArenaFull, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.need.Reason()
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Reason = (%v, %v), want (%v, %v)", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// outdated is an arena state with one outdated page (§8.4 example 2's shape
// after the 10 MiB growth): one current page, slots to spare.
var outdated = ArenaState{
	HasOutdated: true,
	Shape:       ArenaShape{CurrentPages: 1, OutdatedPools: 1, OutdatedPages: 1},
}

// full is outdated with every page size taken: the one state that asks for
// a relocation before a reservation fails.
var full = ArenaState{
	HasOutdated: true,
	Full:        true,
	Shape:       outdated.Shape,
}

func TestTriggerNeedFollowsTheWorkedExamples(t *testing.T) {
	nothingOutdated := ArenaState{Full: true, Shape: ArenaShape{CurrentPages: 1}}
	cases := []struct {
		name  string
		state ArenaState
		want  Need
	}{
		{"nothing outdated needs nothing even when full", nothingOutdated, Need{Kind: NeedNothing}},
		// §8.4 example 2: memory pressure is never anticipated; the
		// make-room path answers it once a reservation fails.
		{"example 2: outdated pages with slots to spare need nothing", outdated, Need{Kind: NeedNothing}},
		{"example 6: a full arena with outdated pages needs ArenaFull", full, Need{Kind: NeedArenaFull}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tr Trigger
			if got := tr.Need(tc.state); got != tc.want {
				t.Fatalf("Need = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTriggerStallsOnAFruitlessShapeUntilTheShapeChanges(t *testing.T) {
	// §8.4 example 5: a full arena whose outdated page is guarded.
	guarded := full
	guarded.Shape.OutdatedGuarded = 1
	steps := []struct {
		name    string
		settled *bool // Settled(*settled, state) before asking, if set
		state   ArenaState
		want    NeedKind
	}{
		{"before any relocation the guarded full arena wants one", nil, guarded, NeedArenaFull},
		{"a relocation that moved nothing stalls the unchanged shape", ptr(false), guarded, NeedNothing},
		{"the unchanged shape stays stalled", nil, guarded, NeedNothing},
		{"releasing the guard unstalls", nil, full, NeedArenaFull},
		{"the guard back on the same shape is still stalled", nil, guarded, NeedNothing},
		{"a new current page unstalls", nil, withCurrentPages(guarded, 2), NeedArenaFull},
		{"a relocation that moved clears the stall for the old shape", ptr(true), guarded, NeedArenaFull},
	}
	var tr Trigger
	for _, st := range steps {
		if st.settled != nil {
			tr.Settled(*st.settled, st.state)
		}
		if got := tr.Need(st.state).Kind; got != st.want {
			t.Fatalf("%s: Need = %v, want %v", st.name, got, st.want)
		}
	}
}

func TestTriggerUnstallsWhenAnyOneShapeCounterChanges(t *testing.T) {
	changes := map[string]func(*ArenaShape){
		"CurrentPages":    func(s *ArenaShape) { s.CurrentPages++ },
		"OutdatedPools":   func(s *ArenaShape) { s.OutdatedPools++ },
		"OutdatedPages":   func(s *ArenaShape) { s.OutdatedPages-- },
		"OutdatedGuarded": func(s *ArenaShape) { s.OutdatedGuarded++ },
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			var tr Trigger
			tr.Settled(false, full)
			if got := tr.Need(full).Kind; got != NeedNothing {
				t.Fatalf("after Settled(false) Need = %v, want NeedNothing", got)
			}
			changed := full
			change(&changed.Shape)
			if got := tr.Need(changed).Kind; got != NeedArenaFull {
				t.Fatalf("shape differing in %s: Need = %v, want NeedArenaFull", name, got)
			}
		})
	}
	t.Run("Settled(true) clears the stall", func(t *testing.T) {
		var tr Trigger
		tr.Settled(false, full)
		tr.Settled(true, full)
		if got := tr.Need(full).Kind; got != NeedArenaFull {
			t.Fatalf("Need = %v, want NeedArenaFull", got)
		}
	})
}

func TestReasonRoomsAreHeldWhenMemoryIsShortAndMayAllocateOtherwise(t *testing.T) {
	want := map[Reason]TargetRoom{
		Explicit:       Held,
		MemoryPressure: Held,
		ArenaFull:      MayAllocate,
		Capture:        MayAllocate,
		Compact:        Held,
	}
	if len(want) != NumReasons {
		t.Fatalf("table covers %d reasons, NumReasons = %d", len(want), NumReasons)
	}
	for r, room := range want {
		if got := r.Room(); got != room {
			t.Errorf("%v.Room() = %v, want %v", r, got, room)
		}
	}
}

func TestRoomOfAnUnknownReasonPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("Room of Reason(NumReasons) did not panic")
		}
	}()
	Reason(NumReasons).Room()
}

func TestEnumsPrintTheirNames(t *testing.T) {
	cases := []struct {
		got, want string
	}{
		{Explicit.String(), "Explicit"},
		{MemoryPressure.String(), "MemoryPressure"},
		{ArenaFull.String(), "ArenaFull"},
		{Capture.String(), "Capture"},
		{Compact.String(), "Compact"},
		{Reason(9).String(), "Reason(9)"},
		{Held.String(), "Held"},
		{MayAllocate.String(), "MayAllocate"},
		{TargetRoom(7).String(), "TargetRoom(7)"},
		{NeedNothing.String(), "NeedNothing"},
		{NeedArenaFull.String(), "NeedArenaFull"},
		{NeedKind(5).String(), "NeedKind(5)"},
		{NothingToMove.String(), "NothingToMove"},
		{Moved.String(), "Moved"},
		{Abandoned.String(), "Abandoned"},
		{Leaked.String(), "Leaked"},
		{OutcomeKind(8).String(), "OutcomeKind(8)"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("String() = %q, want %q", c.got, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func withCurrentPages(s ArenaState, n uint64) ArenaState {
	s.Shape.CurrentPages = n
	return s
}
