package relocation

import (
	"math"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

// countingBytes returns a byte-count closure answering n and a pointer to how
// often it was called.
func countingBytes(n uint64) (func() uint64, *int) {
	calls := new(int)
	return func() uint64 { *calls++; return n }, calls
}

func TestNeedReasonIsHighWhenAllocatedExceedsCapacityMinusTwoPages(t *testing.T) {
	cases := []struct {
		name      string
		need      Need
		allocated uint64
		want      Reason
		wantOK    bool
		wantCalls int
	}{
		// §8.4 example 1: 24 MiB device, 4 MiB page; High ⇔ allocated > 16 MiB.
		{"example 1: 10 MiB allocated is no pressure", pressure, 10 * mib, Explicit, false, 1},
		{"example 1: 17 MiB allocated is memory pressure", pressure, 17 * mib, MemoryPressure, true, 1},
		{"example 1: exactly 16 MiB allocated is not yet pressure", pressure, 16 * mib, Explicit, false, 1},
		{"example 1: one byte past 16 MiB is pressure", pressure, 16*mib + 1, MemoryPressure, true, 1},
		// §8.4 example 4: the threshold saturates at zero instead of wrapping.
		{"example 4: 6 MiB device with 4 MiB pages is high with nothing allocated",
			Need{Kind: NeedUnderPressure, Capacity: 6 * mib, PageSize: 4 * mib}, 0, MemoryPressure, true, 1},
		{"example 4: a page larger than the device is high, never a wrapped threshold",
			Need{Kind: NeedUnderPressure, Capacity: 3 * mib, PageSize: 4 * mib}, 0, MemoryPressure, true, 1},
		{"a byte count near the top saturates instead of wrapping to low",
			Need{Kind: NeedUnderPressure, Capacity: math.MaxUint64, PageSize: 4 * mib}, math.MaxUint64 - 1, MemoryPressure, true, 1},
		// §8.4 example 6 and scenario 9: the closure is asked only under pressure.
		{"a full arena is ArenaFull with 0 bytes and never asks the byte count",
			Need{Kind: NeedArenaFull}, 0, ArenaFull, true, 0},
		{"no need gives no reason and never asks the byte count",
			Need{Kind: NeedNothing, Capacity: 1, PageSize: 1}, math.MaxUint64, Explicit, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			allocated, calls := countingBytes(tc.allocated)
			got, ok := tc.need.Reason(allocated)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("Reason = (%v, %v), want (%v, %v)", got, ok, tc.want, tc.wantOK)
			}
			if *calls != tc.wantCalls {
				t.Errorf("byte-count closure called %d times, want %d", *calls, tc.wantCalls)
			}
		})
	}
}

func TestNeedReasonMatchesExactArithmeticForEveryInput(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.Uint64().Draw(t, "capacity")
		page := rapid.Uint64().Draw(t, "page")
		allocated := rapid.Uint64().Draw(t, "allocated")
		n := Need{Kind: NeedUnderPressure, Capacity: capacity, PageSize: page}
		got, ok := n.Reason(func() uint64 { return allocated })

		// The same rule in unbounded integers, clamped as §8.2 says:
		// min(allocated+page, MaxUint64) > max(capacity−page, 0).
		maxU := new(big.Int).SetUint64(math.MaxUint64)
		lhs := new(big.Int).Add(new(big.Int).SetUint64(allocated), new(big.Int).SetUint64(page))
		if lhs.Cmp(maxU) > 0 {
			lhs = maxU
		}
		rhs := new(big.Int).Sub(new(big.Int).SetUint64(capacity), new(big.Int).SetUint64(page))
		if rhs.Sign() < 0 {
			rhs = new(big.Int)
		}
		want := lhs.Cmp(rhs) > 0
		if ok != want || (ok && got != MemoryPressure) {
			t.Fatalf("Reason = (%v, %v), want high=%v", got, ok, want)
		}
	})
}

// outdated is an arena state with one outdated page (§8.4 example 2's shape
// after the 10 MiB growth): 11 MiB next page, one current page.
var outdated = ArenaState{
	PageSize:    11 * mib,
	HasOutdated: true,
	Shape:       ArenaShape{CurrentPages: 1, OutdatedPools: 1, OutdatedPages: 1},
}

func TestTriggerNeedFollowsTheWorkedExamples(t *testing.T) {
	full := outdated
	full.Full = true
	nothingOutdated := ArenaState{PageSize: 2 * mib, Full: true, Shape: ArenaShape{CurrentPages: 1}}
	cases := []struct {
		name     string
		capacity uint64
		state    ArenaState
		want     Need
	}{
		{"nothing outdated needs nothing even when full", 24 * mib, nothingOutdated, Need{Kind: NeedNothing}},
		{"example 2: outdated on a 24 MiB device is under pressure with the next page size",
			24 * mib, outdated, Need{Kind: NeedUnderPressure, Capacity: 24 * mib, PageSize: 11 * mib}},
		{"example 6: capacity 0 and not full needs nothing", 0, outdated, Need{Kind: NeedNothing}},
		{"example 6: a full arena needs relocation with capacity 0", 0, full, Need{Kind: NeedArenaFull}},
		{"a full arena is ArenaFull whatever the capacity", 24 * mib, full, Need{Kind: NeedArenaFull}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTrigger(tc.capacity)
			if got := tr.Need(tc.state); got != tc.want {
				t.Fatalf("Need = %+v, want %+v", got, tc.want)
			}
		})
	}

	t.Run("example 6: full arena, capacity 0, 0 bytes gives ArenaFull", func(t *testing.T) {
		tr := NewTrigger(0)
		allocated, calls := countingBytes(0)
		r, ok := tr.Need(full).Reason(allocated)
		if r != ArenaFull || !ok || *calls != 0 {
			t.Fatalf("Reason = (%v, %v) after %d byte counts, want (ArenaFull, true) after none", r, ok, *calls)
		}
	})
	t.Run("example 2: 13 MiB held with an 11 MiB page is memory pressure", func(t *testing.T) {
		tr := NewTrigger(24 * mib)
		r, ok := tr.Need(outdated).Reason(func() uint64 { return 13 * mib })
		if r != MemoryPressure || !ok {
			t.Fatalf("Reason = (%v, %v), want (MemoryPressure, true)", r, ok)
		}
	})
	t.Run("example 3: the same on a 48 MiB device waits", func(t *testing.T) {
		tr := NewTrigger(48 * mib)
		if _, ok := tr.Need(outdated).Reason(func() uint64 { return 13 * mib }); ok {
			t.Fatal("a 48 MiB device holding 13 MiB relocated, want no reason")
		}
	})
}

func TestTriggerStallsOnAFruitlessShapeUntilTheShapeChanges(t *testing.T) {
	// §8.4 example 5: example 2 with the outdated page guarded.
	guarded := outdated
	guarded.Shape.OutdatedGuarded = 1
	steps := []struct {
		name    string
		settled *bool // Settled(*settled, state) before asking, if set
		state   ArenaState
		want    NeedKind
	}{
		{"before any relocation the guarded arena is under pressure", nil, guarded, NeedUnderPressure},
		{"a relocation that moved nothing stalls the unchanged shape", ptr(false), guarded, NeedNothing},
		{"the unchanged shape stays stalled", nil, guarded, NeedNothing},
		{"releasing the guard unstalls", nil, outdated, NeedUnderPressure},
		{"the guard back on the same shape is still stalled", nil, guarded, NeedNothing},
		{"a new current page unstalls", nil, withCurrentPages(guarded, 2), NeedUnderPressure},
		{"a relocation that moved clears the stall for the old shape", ptr(true), guarded, NeedUnderPressure},
	}
	tr := NewTrigger(24 * mib)
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
			tr := NewTrigger(24 * mib)
			tr.Settled(false, outdated)
			if got := tr.Need(outdated).Kind; got != NeedNothing {
				t.Fatalf("after Settled(false) Need = %v, want NeedNothing", got)
			}
			changed := outdated
			change(&changed.Shape)
			if got := tr.Need(changed).Kind; got != NeedUnderPressure {
				t.Fatalf("shape differing in %s: Need = %v, want NeedUnderPressure", name, got)
			}
		})
	}
	t.Run("page size and fullness alone do not unstall", func(t *testing.T) {
		tr := NewTrigger(24 * mib)
		tr.Settled(false, outdated)
		same := outdated
		same.PageSize *= 2
		same.Full = true
		if got := tr.Need(same).Kind; got != NeedNothing {
			t.Fatalf("Need = %v, want NeedNothing", got)
		}
	})
	t.Run("Settled(true) clears the stall", func(t *testing.T) {
		tr := NewTrigger(24 * mib)
		tr.Settled(false, outdated)
		tr.Settled(true, outdated)
		if got := tr.Need(outdated).Kind; got != NeedUnderPressure {
			t.Fatalf("Need = %v, want NeedUnderPressure", got)
		}
	})
}

func TestTriggerCapacityIsTheOneItWasMadeWith(t *testing.T) {
	tr := NewTrigger(24 * mib)
	if tr.Capacity() != 24*mib {
		t.Fatalf("Capacity = %d, want %d", tr.Capacity(), 24*mib)
	}
	var zero Trigger
	if zero.Capacity() != 0 || zero.Need(outdated).Kind != NeedNothing {
		t.Fatal("zero Trigger must have unknown capacity and never judge pressure")
	}
}

func TestReasonRoomsAreHeldWhenMemoryIsShortAndMayAllocateOtherwise(t *testing.T) {
	want := map[Reason]TargetRoom{
		Explicit:       Held,
		MemoryPressure: Held,
		ArenaFull:      MayAllocate,
		Capture:        MayAllocate,
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
		{Reason(9).String(), "Reason(9)"},
		{Held.String(), "Held"},
		{MayAllocate.String(), "MayAllocate"},
		{TargetRoom(7).String(), "TargetRoom(7)"},
		{NeedNothing.String(), "NeedNothing"},
		{NeedArenaFull.String(), "NeedArenaFull"},
		{NeedUnderPressure.String(), "NeedUnderPressure"},
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
