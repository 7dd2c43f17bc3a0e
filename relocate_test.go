package gpumem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// design §12.7 scenario 51.
func TestCleanupRelocatesLiveBufferOffOutdatedPageIntoRoomTheLargeBufferLeft(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	want := pattern(4*mib+3, 51)
	b := mustAlloc(t, s, uint64(len(want)))
	mustWrite(t, b, want)
	if got := arenaPageSize(d, 0); got != 6*mib {
		t.Fatalf("arena page size after a 4 MiB + 3 allocation = %d, want 6 MiB", got)
	}
	large := mustAlloc(t, s, 7*mib)
	if got := arenaPageSize(d, 0); got != 8*mib {
		t.Fatalf("arena page size after a 7 MiB allocation = %d, want 8 MiB", got)
	}
	if got := outdatedPages(d); got != 1 {
		t.Fatalf("outdated pages after growth = %d, want 1 (the 6 MiB page holding the pattern)", got)
	}
	mustFree(t, large)
	mustCleanup(t, d)
	if got := outdatedPages(d); got != 0 {
		t.Fatalf("outdated pages after Cleanup = %d, want 0", got)
	}
	st := d.Stats()
	if st.Relocation.Moves != 1 || st.Relocation.BytesMoved != 4*mib+3 {
		t.Fatalf("relocation moved %d allocations, %d bytes; want 1 and %d (the requested size)", st.Relocation.Moves, st.Relocation.BytesMoved, 4*mib+3)
	}
	if st.BytesAllocated != 8*mib {
		t.Fatalf("BytesAllocated after Cleanup = %d, want 8 MiB (one current page, the outdated one returned)", st.BytesAllocated)
	}
	wantBytes(t, b, want)
}

// design §12.7 scenario 52.
func TestMappedBufferKeepsItsPageUntilReleasedThenCleanupMovesIt(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	ctx := context.Background()
	want := pattern(4*mib+3, 52)
	b := mustAlloc(t, s, uint64(len(want)))
	mustWrite(t, b, want)
	mustFree(t, mustAlloc(t, s, 7*mib)) // grows to 8 MiB pages, outdating the 6 MiB one
	m, err := b.Map(ctx)
	if err != nil {
		t.Fatalf("Map: %v", err)
	}
	mustCleanup(t, d)
	if got := outdatedPages(d); got != 1 {
		t.Fatalf("outdated pages after Cleanup with a mapping held = %d, want 1", got)
	}
	if d.Stats().Relocation.Moves != 0 {
		t.Fatalf("Cleanup moved a mapped buffer")
	}
	if got := m.Bytes(); string(got) != string(want) {
		t.Fatalf("mapping differs from the pattern at byte %d after Cleanup", firstDiff(got, want))
	}
	m.Release()
	m.Release() // idempotent
	// The first Cleanup released the empty 8 MiB page; make room on a
	// current page again (allocate and free a buffer of the page size).
	page := arenaPageSize(d, 0)
	mustFree(t, mustAlloc(t, s, page))
	mustCleanup(t, d)
	if got := outdatedPages(d); got != 0 {
		t.Fatalf("outdated pages after releasing the mapping and Cleanup = %d, want 0", got)
	}
	if d.Stats().Relocation.Moves != 1 {
		t.Fatalf("relocation moves = %d, want 1", d.Stats().Relocation.Moves)
	}
	wantBytes(t, b, want)
}

// scriptedAttempt is a reservation the make-room stages act on, answered
// from scripts: the reservations' answers (nil = success), with the page
// updates they were asked under; each cleanup, relocate or compact stage's
// (stage; nil: room made, the retry under Allow); the own-size stage's
// (own; nil: refused); and the failures warned of. The compact stage's
// further rounds (stageCompactAgain) free something only the first again
// times (allocRoom learns it from its compaction); after that they answer
// errNothingToMove without asking stage. The kept-room stage has no kept
// room to yield (errNothingToMove, stage not asked) unless keptYields.
type scriptedAttempt struct {
	script     []error
	asked      []memory.PageUpdate
	again      int
	asks       int // stageCompactAgain rounds asked for
	keptYields bool
	stage      func(stage roomStage, err error) (memory.PageUpdate, error)
	own        func() (*handle.Handle, error)
	warns      []error
}

// run is what Stream.Alloc runs: the reservation under u, then, when it
// failed, the make-room stages.
func (r *scriptedAttempt) run(u memory.PageUpdate) (*handle.Handle, bool, error) {
	h, err := r.reserve(u)
	if err != nil {
		return makeRoom(r, u, err)
	}
	return h, false, nil
}

func (r *scriptedAttempt) reserve(u memory.PageUpdate) (*handle.Handle, error) {
	r.asked = append(r.asked, u)
	if len(r.script) == 0 {
		panic("scriptedAttempt: reserve beyond the script")
	}
	err := r.script[0]
	r.script = r.script[1:]
	if err != nil {
		return nil, err
	}
	return handle.New(handle.Uninit), nil
}

func (r *scriptedAttempt) room(stage roomStage, err error) (memory.PageUpdate, error) {
	if stage == stageCompactAgain {
		r.asks++
		if r.again == 0 {
			return 0, errNothingToMove
		}
		r.again--
	}
	if stage == stageKeptRoom && !r.keptYields {
		return 0, errNothingToMove
	}
	if r.stage == nil {
		return memory.Allow, nil
	}
	return r.stage(stage, err)
}

func (r *scriptedAttempt) ownSize() (*handle.Handle, error) {
	if r.own == nil {
		return nil, storage.ErrOutOfMemory
	}
	return r.own()
}

func (r *scriptedAttempt) warn(err error) { r.warns = append(r.warns, err) }

// A makeRoom that cannot wait (the caller's context ended, or it is an op)
// ends the reservation without a further retry: the context's error as it
// is, another error wrapping the first failure; at any stage. A stage with
// nothing to move is skipped, the failure before it standing.
func TestReserveWithoutRoomReturnsWhyNoRetry(t *testing.T) {
	oom := fmt.Errorf("wrapped: %w", &storage.OutOfMemoryError{Requested: 1, Capacity: 1})
	nothing := map[roomStage]error{stageRelocate: errNothingToMove, stageCompact: errNothingToMove}
	for _, c := range []struct {
		name      string
		script    []error             // the reservations' answers
		room      map[roomStage]error // makeRoom's answer per stage (absent: room made)
		want      []error
		wantRetry bool
	}{
		{"stage 1, context", []error{oom}, map[roomStage]error{stageCleanup: context.DeadlineExceeded}, []error{context.DeadlineExceeded}, false},
		{"stage 1, op", []error{oom}, map[roomStage]error{stageCleanup: ErrCalledFromOp}, []error{ErrCalledFromOp, storage.ErrOutOfMemory}, false},
		{"stage 2, context", []error{oom, oom}, map[roomStage]error{stageRelocate: context.DeadlineExceeded}, []error{context.DeadlineExceeded}, true},
		{"stage 2, op", []error{oom, oom}, map[roomStage]error{stageRelocate: ErrCalledFromOp}, []error{ErrCalledFromOp, storage.ErrOutOfMemory}, true},
		{"stage 3, context", []error{oom, oom, oom}, map[roomStage]error{stageCompact: context.Canceled}, []error{context.Canceled}, true},
		{"stage 3, op", []error{oom, oom, oom}, map[roomStage]error{stageCompact: ErrCalledFromOp}, []error{ErrCalledFromOp, storage.ErrOutOfMemory}, true},
		{"nothing to relocate or compact keeps the cleanup retry's failure", []error{oom, oom}, nothing, []error{storage.ErrOutOfMemory}, true},
		{"nothing to relocate, then the compacting stage cannot wait", []error{oom, oom},
			map[roomStage]error{stageRelocate: errNothingToMove, stageCompact: context.DeadlineExceeded}, []error{context.DeadlineExceeded}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &scriptedAttempt{script: c.script, stage: func(stage roomStage, _ error) (memory.PageUpdate, error) {
				if err := c.room[stage]; err != nil {
					return 0, err
				}
				return memory.Allow, nil
			}}
			_, retried, err := r.run(memory.Allow)
			if retried != c.wantRetry || err == nil {
				t.Fatalf("retried=%v err=%v, want retried=%v and an error", retried, err, c.wantRetry)
			}
			if len(r.script) != 0 {
				t.Fatalf("%d scripted answers left unused", len(r.script))
			}
			for _, w := range c.want {
				if !errors.Is(err, w) {
					t.Errorf("error %v does not wrap %v", err, w)
				}
			}
			if errors.Is(err, errNothingToMove) {
				t.Errorf("error %v leaks the internal errNothingToMove", err)
			}
		})
	}
}

// The exact fallback (storage of the buffer's own size) is tried after the
// cleanup's retry failed and again after each moving stage's, always before
// the next moving stage, so relocation and compaction stay later resorts:
// a device without them does what one with them does up to that point.
func TestReserveTriesTheExactSizeBeforeEachMovingStage(t *testing.T) {
	oom := fmt.Errorf("wrapped: %w", storage.ErrOutOfMemory)
	for _, c := range []struct {
		name      string
		script    []error
		exactOK   []bool // the fallback's answers, in order
		wantRooms []roomStage
		wantOK    bool
	}{
		{"served by the exact size after the cleanup, no relocation", []error{oom, oom}, []bool{true}, []roomStage{stageCleanup}, true},
		{"served by the exact size after the relocation, no compaction", []error{oom, oom, oom}, []bool{false, true}, []roomStage{stageCleanup, stageRelocate}, true},
		{"refused twice, compaction makes room for the reservation", []error{oom, oom, oom, nil}, []bool{false, false}, []roomStage{stageCleanup, stageRelocate, stageCompact}, true},
		{"compaction frees pages the exact size then takes", []error{oom, oom, oom, oom}, []bool{false, false, true}, []roomStage{stageCleanup, stageRelocate, stageCompact}, true},
		{"refused every time", []error{oom, oom, oom, oom}, []bool{false, false, false}, []roomStage{stageCleanup, stageRelocate, stageCompact}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rooms []roomStage
			answers := c.exactOK
			r := &scriptedAttempt{script: c.script, stage: func(stage roomStage, _ error) (memory.PageUpdate, error) {
				rooms = append(rooms, stage)
				return memory.Allow, nil
			}}
			r.own = func() (*handle.Handle, error) {
				if len(answers) == 0 {
					t.Fatal("exact fallback tried beyond the script")
				}
				ok := answers[0]
				answers = answers[1:]
				if !ok {
					return nil, storage.ErrOutOfMemory
				}
				return handle.New(handle.Uninit), nil
			}
			h, _, err := r.run(memory.Allow)
			if (err == nil) != c.wantOK {
				t.Fatalf("error = %v, want success %v", err, c.wantOK)
			}
			if h != nil {
				h.Release()
			}
			if !slices.Equal(rooms, c.wantRooms) || len(r.script) != 0 || len(answers) != 0 {
				t.Fatalf("stages %v (want %v), %d reservations and %d fallback answers left", rooms, c.wantRooms, len(r.script), len(answers))
			}
		})
	}
}

// The kept-room stage (design §8.1) comes last: after every other stage's
// retry failed, the arena's kept room yields (pool PL37) and the retry
// takes it; a reservation an earlier stage served never gets there.
func TestMakeRoomYieldsKeptRoomOnlyAfterEveryOtherStage(t *testing.T) {
	oom := fmt.Errorf("wrapped: %w", &storage.OutOfMemoryError{Requested: 1, Capacity: 1})
	for _, c := range []struct {
		name      string
		script    []error
		wantRooms []roomStage
	}{
		{"served by the kept room", []error{oom, oom, oom, oom, nil}, []roomStage{stageCleanup, stageRelocate, stageCompact, stageKeptRoom}},
		{"served after the compaction, kept room untouched", []error{oom, oom, oom, nil}, []roomStage{stageCleanup, stageRelocate, stageCompact}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rooms []roomStage
			r := &scriptedAttempt{script: c.script, keptYields: true, stage: func(stage roomStage, _ error) (memory.PageUpdate, error) {
				rooms = append(rooms, stage)
				return memory.Allow, nil
			}}
			h, retried, err := r.run(memory.Allow)
			if err != nil || !retried {
				t.Fatalf("retried %v, error %v; want served by a retry", retried, err)
			}
			h.Release()
			if !slices.Equal(rooms, c.wantRooms) || len(r.script) != 0 {
				t.Fatalf("stages %v, want %v; %d reservations left", rooms, c.wantRooms, len(r.script))
			}
		})
	}
}

// The compact stage's rounds (design §8.1): after the compact stage's
// retry failed, stageCompactAgain runs while each round frees something
// and the reservation still fails, each followed by a retry and the
// own-size step, at most maxCompactRounds compactions in all; the first
// round that frees nothing ends them without a retry.
func TestMakeRoomCompactsAgainWhileEachRoundFreesSomething(t *testing.T) {
	oom := fmt.Errorf("wrapped: %w", &storage.OutOfMemoryError{Requested: 1, Capacity: 1})
	failing := func(n int) []error { return slices.Repeat([]error{oom}, n) }
	compactions := func(rounds int) []roomStage {
		return append([]roomStage{stageCleanup, stageRelocate, stageCompact}, slices.Repeat([]roomStage{stageCompactAgain}, rounds)...)
	}
	for _, c := range []struct {
		name      string
		script    []error
		again     int // rounds that free something
		wantRooms []roomStage
		wantAsks  int
		wantOK    bool
	}{
		{"the second round's retry fits", append(failing(5), nil), 5, compactions(2), 2, true},
		{"a round that frees nothing ends the rounds", failing(6), 2, compactions(2), 3, false},
		{"no round frees anything", failing(4), 0, compactions(0), 1, false},
		{"the rounds are bounded", failing(3 + maxCompactRounds), 100, compactions(maxCompactRounds - 1), maxCompactRounds - 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rooms []roomStage
			owns := 0
			r := &scriptedAttempt{script: c.script, again: c.again, stage: func(stage roomStage, _ error) (memory.PageUpdate, error) {
				rooms = append(rooms, stage)
				return memory.Allow, nil
			}}
			r.own = func() (*handle.Handle, error) {
				owns++
				return nil, storage.ErrOutOfMemory
			}
			h, _, err := r.run(memory.Allow)
			if (err == nil) != c.wantOK {
				t.Fatalf("error = %v, want success %v", err, c.wantOK)
			}
			if h != nil {
				h.Release()
			}
			if err != nil && !errors.Is(err, storage.ErrOutOfMemory) {
				t.Fatalf("error = %v, want the last retry's out of memory", err)
			}
			if !slices.Equal(rooms, c.wantRooms) || r.asks != c.wantAsks || len(r.script) != 0 {
				t.Fatalf("stages %v (want %v), %d rounds asked (want %d), %d reservations left", rooms, c.wantRooms, r.asks, c.wantAsks, len(r.script))
			}
			// After each stage that made room, unless its retry fitted.
			want := len(c.wantRooms)
			if c.wantOK {
				want--
			}
			if owns != want {
				t.Fatalf("own size tried %d times after %d stages that made room, want %d", owns, len(c.wantRooms), want)
			}
		})
	}
}

// room is one makeRoom call: the failure it answers and its stage.
type room struct {
	err   error
	stage roomStage
}

// design §12.7 scenario 53: the retry logic against a scripted memory. A
// reclaimable failure makes room without relocating and retries; only if
// that retry fails reclaimably too does it make room relocating and retry
// again, and only if that fails too does it compact and retry a last time:
// relocation runs only once a cleanup alone did not cure it, compaction
// only once relocation did not either.
func TestReserveRetriesAfterACleanupThenAfterARelocationOnlyForReclaimableErrors(t *testing.T) {
	oom := fmt.Errorf("wrapped: %w", &storage.OutOfMemoryError{Requested: 1, Capacity: 1})
	exhausted := fmt.Errorf("arena: %w", pool.ErrPageSizesExhausted)
	tooBig := fmt.Errorf("arena: %w", pool.ErrBufferTooBig)
	forbidden := fmt.Errorf("memory: %w", memory.ErrPageUpdateForbidden)
	poisoned := fmt.Errorf("%w (and %w)", storage.ErrOutOfMemory, storage.ErrDevicePoisoned)
	secondOOM := fmt.Errorf("second: %w", storage.ErrOutOfMemory)
	thirdOOM := fmt.Errorf("third: %w", storage.ErrOutOfMemory)
	fourthOOM := fmt.Errorf("fourth: %w", storage.ErrOutOfMemory)
	cases := []struct {
		name      string
		u         memory.PageUpdate
		script    []error
		wantErr   error // nil: success
		wantRooms []room
	}{
		{"success needs no retry", memory.Allow, []error{nil}, nil, nil},
		{"out of memory cured by a cleanup never relocates", memory.Allow, []error{oom, nil}, nil,
			[]room{{oom, stageCleanup}}},
		{"page sizes exhausted cured by a cleanup never relocates", memory.Allow, []error{exhausted, nil}, nil,
			[]room{{exhausted, stageCleanup}}},
		{"out of memory a cleanup does not cure relocates, then succeeds", memory.Allow, []error{oom, secondOOM, nil}, nil,
			[]room{{oom, stageCleanup}, {secondOOM, stageRelocate}}},
		{"the relocating stage answers the cleanup retry's failure", memory.Allow, []error{oom, exhausted, nil}, nil,
			[]room{{oom, stageCleanup}, {exhausted, stageRelocate}}},
		{"out of memory a relocation does not cure compacts, then succeeds", memory.Allow, []error{oom, secondOOM, thirdOOM, nil}, nil,
			[]room{{oom, stageCleanup}, {secondOOM, stageRelocate}, {thirdOOM, stageCompact}}},
		{"a failed last retry returns its error", memory.Allow, []error{oom, secondOOM, thirdOOM, fourthOOM}, fourthOOM,
			[]room{{oom, stageCleanup}, {secondOOM, stageRelocate}, {thirdOOM, stageCompact}}},
		{"a cleanup retry failing otherwise returns that error without relocating", memory.Allow, []error{exhausted, tooBig}, tooBig,
			[]room{{exhausted, stageCleanup}}},
		{"a relocation retry failing otherwise returns that error without compacting", memory.Allow, []error{oom, secondOOM, tooBig}, tooBig,
			[]room{{oom, stageCleanup}, {secondOOM, stageRelocate}}},
		{"buffer too big is not retried", memory.Allow, []error{tooBig}, tooBig, nil},
		{"page update forbidden is not retried", memory.Forbidden, []error{forbidden}, forbidden, nil},
		{"page update forbidden is not retried even under Allow", memory.Allow, []error{forbidden}, forbidden, nil},
		{"out of memory under AddOnly is not retried", memory.AddOnly, []error{oom}, oom, nil},
		{"poisoned device is not retried", memory.Allow, []error{poisoned}, poisoned, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var rooms []room
			r := &scriptedAttempt{script: c.script, stage: func(stage roomStage, err error) (memory.PageUpdate, error) {
				rooms = append(rooms, room{err, stage})
				return memory.Allow, nil
			}}
			h, retried, err := r.run(c.u)
			warns := r.warns
			if err != c.wantErr {
				t.Fatalf("error = %v, want %v", err, c.wantErr)
			}
			if (h != nil) != (c.wantErr == nil) {
				t.Fatalf("handle = %v with error %v", h, err)
			}
			if h != nil {
				h.Release()
			}
			if wantRetry := len(c.wantRooms) > 0; retried != wantRetry {
				t.Fatalf("retried = %v, want %v", retried, wantRetry)
			}
			if len(r.script) != 0 {
				t.Fatalf("%d scripted answers left unused", len(r.script))
			}
			if !slices.Equal(rooms, c.wantRooms) {
				t.Fatalf("makeRoom calls = %v, want %v", rooms, c.wantRooms)
			}
			if len(c.wantRooms) == 0 {
				if len(warns) != 0 || len(r.asked) != 1 || r.asked[0] != c.u {
					t.Fatalf("without a retry: %d warns, reserves under %v; want none and one under %v", len(warns), r.asked, c.u)
				}
				return
			}
			if len(warns) != 1 {
				t.Fatalf("warns = %q, want exactly one", warns)
			}
			if warns[0] != c.script[0] {
				t.Fatalf("warned of %v, want the first failure %v", warns[0], c.script[0])
			}
			if len(r.asked) != len(c.wantRooms)+1 {
				t.Fatalf("%d reserves, want %d", len(r.asked), len(c.wantRooms)+1)
			}
			for _, u := range r.asked[1:] {
				if u != memory.Allow {
					t.Fatalf("reserves asked under %v, want the retries under %v", r.asked, memory.Allow)
				}
			}
		})
	}
}

// design §9.4 step 3: make-room without relocation cleans up every stream
// and moves nothing; with relocation, page sizes exhausted makes room by
// Relocate(ArenaFull) on the failing stream, any other error by a cleanup
// of every stream relocating for MemoryPressure.
func TestMakeRoomCleansUpFirstThenRelocatesForTheFailure(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	b, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	// Each stream: a live buffer on an outdated page and a 10 MiB current
	// page (9 MiB rounded up to 2 MiB); a's is empty and cached, b's holds
	// 9 MiB and so has room held for b's 1 MiB.
	var keep []Buffer
	for i, s := range []*Stream{a, b} {
		small := mustAlloc(t, s, 1*mib)
		mustWrite(t, small, pattern(1*mib, byte(i)))
		keep = append(keep, small)
		big := mustAlloc(t, s, 9*mib)
		if s == a {
			mustFree(t, big)
		}
	}
	if outdatedPages(d) != 2 {
		t.Fatalf("outdated pages = %d, want one per stream", outdatedPages(d))
	}
	allocatedBefore := d.Stats().BytesAllocated

	for _, cause := range []error{pool.ErrPageSizesExhausted, storage.ErrOutOfMemory} {
		d.mu.Lock()
		_, _, _ = d.roomStageLocked(nil, a, 0, fmt.Errorf("x: %w", cause), stageCleanup)
		d.mu.Unlock()
		st := d.Stats()
		if st.Relocation.Runs != ([relocation.NumReasons]uint64{}) || outdatedPages(d) != 2 {
			t.Fatalf("after a cleanup-only make-room for %v: runs %v, %d outdated pages; want no relocation, both outdated pages kept", cause, st.Relocation.Runs, outdatedPages(d))
		}
	}
	if got := d.Stats().BytesAllocated; got >= allocatedBefore {
		t.Fatalf("BytesAllocated %d → %d: the cleanup released no cached page", allocatedBefore, got)
	}

	d.mu.Lock()
	_, _, _ = d.roomStageLocked(nil, a, 0, fmt.Errorf("x: %w", pool.ErrPageSizesExhausted), stageRelocate)
	d.mu.Unlock()
	st := d.Stats()
	if st.Relocation.Runs[relocation.ArenaFull] != 1 || st.Relocation.Runs[relocation.MemoryPressure] != 0 || st.Relocation.Runs[relocation.Explicit] != 0 {
		t.Fatalf("runs after exhausted = %v, want one ArenaFull only", st.Relocation.Runs)
	}
	if got := streamOutdated(d, 0); got != 0 {
		t.Fatalf("relocating stream's outdated pages after ArenaFull = %d, want 0", got)
	}
	if got := streamOutdated(d, 1); got != 1 {
		t.Fatalf("other stream's outdated pages after ArenaFull = %d, want 1 (left alone)", got)
	}
	allocatedBefore = st.BytesAllocated

	d.mu.Lock()
	_, _, _ = d.roomStageLocked(nil, a, 0, fmt.Errorf("x: %w", storage.ErrOutOfMemory), stageRelocate)
	d.mu.Unlock()
	st = d.Stats()
	if st.Relocation.Runs[relocation.MemoryPressure] != 1 || st.Relocation.Runs[relocation.Explicit] != 0 {
		t.Fatalf("runs after out of memory = %v, want one MemoryPressure (the other stream; the first has nothing outdated), no Explicit", st.Relocation.Runs)
	}
	if outdatedPages(d) != 0 {
		t.Fatalf("outdated pages after the relocating cleanup = %d, want 0", outdatedPages(d))
	}
	if st.BytesAllocated != allocatedBefore-2*mib {
		t.Fatalf("BytesAllocated %d → %d, want b's 2 MiB outdated page released", allocatedBefore, st.BytesAllocated)
	}
	for _, cause := range []error{pool.ErrPageSizesExhausted, storage.ErrOutOfMemory} {
		d.mu.Lock()
		_, _, err := d.roomStageLocked(nil, a, 0, fmt.Errorf("x: %w", cause), stageRelocate)
		d.mu.Unlock()
		if !errors.Is(err, errNothingToMove) {
			t.Fatalf("relocating make-room for %v with nothing outdated = %v, want errNothingToMove", cause, err)
		}
	}
	for i, k := range keep {
		wantBytes(t, k, pattern(1*mib, byte(i)))
	}
}

// streamOutdated returns the outdated pages of stream i.
func streamOutdated(d *Device, i int) uint64 {
	for _, p := range d.Report().Streams[i].Dynamic {
		if p.Kind == "adaptive" {
			return p.OutdatedPages
		}
	}
	return 0
}

// faultyDevice opens a host device whose every stream storage is wrapped in
// a hoststorage.Faulty; faults[i] is stream i's.
func faultyDevice(t *testing.T, opts ...Option) (*Device, *[]*hoststorage.Faulty) {
	t.Helper()
	var faults []*hoststorage.Faulty
	opts = append(opts, WithStorageWrapper(func(s storage.Storage) storage.Storage {
		f := hoststorage.NewFaulty(s)
		faults = append(faults, f)
		return f
	}))
	return openHost(t, opts...), &faults
}

// outdatedPattern leaves a (4 MiB + 3)-byte pattern alone on an outdated
// 6 MiB page, with the empty 8 MiB current page the growth left (scenario 51).
func outdatedPattern(t *testing.T, d *Device) (Buffer, []byte) {
	t.Helper()
	s := d.DefaultStream()
	want := pattern(4*mib+3, 9)
	b := mustAlloc(t, s, uint64(len(want)))
	mustWrite(t, b, want)
	mustFree(t, mustAlloc(t, s, 7*mib))
	if outdatedPages(d) != 1 {
		t.Fatalf("setup: outdated pages = %d, want 1", outdatedPages(d))
	}
	return b, want
}

func TestRefusedRelocationCopyLosesNothingAndKeepsTheBufferInPlace(t *testing.T) {
	d, faults := faultyDevice(t)
	b, want := outdatedPattern(t, d)
	loc := b.h.Location()
	(*faults)[0].RefuseCopies(func(int) bool { return true })
	mustCleanup(t, d)
	st := d.Stats().Relocation
	if st.Abandoned != 1 || st.Moves != 0 || st.Leaked != 0 {
		t.Fatalf("relocation stats %+v, want one abandoned run and no moves", st)
	}
	if got := b.h.Location(); got != loc {
		t.Fatalf("location %v → %v after an abandoned relocation", loc, got)
	}
	if outdatedPages(d) != 1 {
		t.Fatalf("outdated pages = %d, want the page still held", outdatedPages(d))
	}
	wantBytes(t, b, want)
	// With copies allowed again, the next cleanup finishes the job.
	(*faults)[0].RefuseCopies(nil)
	mustFree(t, mustAlloc(t, d.DefaultStream(), arenaPageSize(d, 0)))
	mustCleanup(t, d)
	if outdatedPages(d) != 0 || d.Stats().Relocation.Moves != 1 {
		t.Fatalf("after faults off: outdated %d, moves %d; want 0 and 1", outdatedPages(d), d.Stats().Relocation.Moves)
	}
	wantBytes(t, b, want)
}

// pressureDevice is design §8.4 example 2 on a 20.5 MiB device: a 1 MiB
// pattern alone on an outdated 2 MiB page, 9 MiB on the 10 MiB current page
// (1 MiB free), 12 MiB held. Another 9 MiB needs a 10 MiB page: 22 MiB >
// 20.5, storage of its own 9 MiB too (21 MiB), and no cleanup frees
// anything; only moving the 1 MiB into the current page's free MiB makes
// room.
func pressureDevice(t *testing.T, opts ...Option) (d *Device, small Buffer, want []byte, faults *[]*hoststorage.Faulty) {
	t.Helper()
	opts = append(opts, WithProperties(Properties{MaxPageSize: 1 << 30, Alignment: 32, MaxMemory: 20*mib + mib/2}),
		WithCapacity(20*mib+mib/2))
	d, faults = faultyDevice(t, opts...)
	s := d.DefaultStream()
	small = mustAlloc(t, s, 1*mib)
	want = pattern(1*mib, 3)
	mustWrite(t, small, want)
	_ = mustAlloc(t, s, 9*mib) // grows to 10 MiB pages: small's page is outdated
	if outdatedPages(d) != 1 || d.Stats().BytesAllocated != 12*mib {
		t.Fatalf("setup: %d outdated pages, %d bytes held; want 1 and 12 MiB", outdatedPages(d), d.Stats().BytesAllocated)
	}
	return d, small, want, faults
}

// design §8.4 example 2 through the make-room path: a reservation that a
// cleanup alone cannot cure relocates for MemoryPressure and then succeeds;
// with the copy refused, the relocation is abandoned, the reservation fails
// and the pattern stays where it was, intact.
func TestMemoryPressureRelocationRunsOnlyAfterACleanupDidNotMakeRoom(t *testing.T) {
	d, small, want, faults := pressureDevice(t)
	s := d.DefaultStream()
	if st := d.Stats().Relocation; st.Runs != ([relocation.NumReasons]uint64{}) {
		t.Fatalf("relocation runs before any reservation failed: %v, want none", st.Runs)
	}
	loc := small.h.Location()
	(*faults)[0].RefuseCopies(func(int) bool { return true })
	if _, err := s.Alloc(bg, 9*mib); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("9 MiB with the relocation's copy refused = %v, want ErrOutOfMemory", err)
	}
	st := d.Stats()
	// The relocation's copy is refused, then the compaction's (a hole for
	// the 9 MiB in the current page, the 9 MiB moved to the outdated one):
	// both abandoned.
	if st.Relocation.Runs[relocation.MemoryPressure] != 1 || st.Relocation.Runs[relocation.Compact] != 1 || st.Relocation.Abandoned != 2 || st.ReserveRetries != 1 {
		t.Fatalf("stats %+v, want one abandoned MemoryPressure run and one abandoned compaction after one retried reservation", st)
	}
	if got := small.h.Location(); got != loc {
		t.Fatalf("location %v → %v after an abandoned relocation", loc, got)
	}
	wantBytes(t, small, want)

	(*faults)[0].RefuseCopies(nil)
	x := mustAlloc(t, s, 9*mib)
	st = d.Stats()
	if st.Relocation.Runs[relocation.MemoryPressure] != 2 || st.Relocation.Moves != 1 || outdatedPages(d) != 0 {
		t.Fatalf("relocation %+v with %d outdated pages, want a second MemoryPressure run moving the pattern off its page", st.Relocation, outdatedPages(d))
	}
	if st.BytesAllocated != 20*mib {
		t.Fatalf("%d bytes held, want two 10 MiB pages", st.BytesAllocated)
	}
	wantBytes(t, small, want)
	mustFree(t, x)
}

// A relocating device whose failed reservation a cleanup alone cures moves
// nothing: up to that point it does exactly what a device without
// relocation does (design §8.1), so relocation never changes where later
// allocations land unless it is what makes room.
func TestRelocatingDeviceDoesNotRelocateWhileACleanupMakesRoom(t *testing.T) {
	d := openHost(t, WithCapacity(24*mib),
		WithProperties(Properties{MaxPageSize: 1 << 30, Alignment: 32, MaxMemory: 24 * mib}))
	s := d.DefaultStream()
	small := mustAlloc(t, s, 1*mib)
	mustWrite(t, small, pattern(1*mib, 5))
	mustFree(t, mustAlloc(t, s, 10*mib)) // small's page outdated; an empty cached 10 MiB page
	loc := small.h.Location()
	// 13 MiB grows to 14 MiB pages: 2 + 10 + 14 > 24 until the cleanup
	// releases the cached page.
	x := mustAlloc(t, s, 13*mib)
	st := d.Stats()
	if st.ReserveRetries != 1 {
		t.Fatalf("reserve retries = %d, want the one that made room", st.ReserveRetries)
	}
	if st.Relocation.Runs != ([relocation.NumReasons]uint64{}) || st.Relocation.Moves != 0 {
		t.Fatalf("relocation %+v, want no run: the cleanup alone made room", st.Relocation)
	}
	if got := small.h.Location(); got != loc || outdatedPages(d) != 1 {
		t.Fatalf("small %v → %v with %d outdated pages; want it left on its outdated page", loc, got, outdatedPages(d))
	}
	wantBytes(t, small, pattern(1*mib, 5))
	mustFree(t, x)
}

// design §7.5: a failed final wait on a device that is not poisoned leaks the
// relocation: bytes stay intact where they were, and neither source nor
// target is reused.
func TestFailedRelocationWaitLeaksSourceAndTargetButKeepsTheBytes(t *testing.T) {
	d, faults := faultyDevice(t)
	b, want := outdatedPattern(t, d)
	loc := b.h.Location()
	(*faults)[0].RefuseWaits(func(n int) bool { return n == 2 }) // WaitDevice passes, WaitCopies fails
	mustCleanup(t, d)
	st := d.Stats().Relocation
	if st.Leaked != 1 || st.Moves != 0 || st.Abandoned != 0 {
		t.Fatalf("relocation stats %+v, want one leaked run", st)
	}
	if got := b.h.Location(); got != loc {
		t.Fatalf("location %v → %v after a leaked relocation", loc, got)
	}
	wantBytes(t, b, want)
	allocated := d.Stats().BytesAllocated
	if allocated != 6*mib+8*mib {
		t.Fatalf("BytesAllocated = %d, want both pages kept (6 MiB source, 8 MiB target)", allocated)
	}
	// Even once the buffer is freed and faults are off, neither page goes back.
	(*faults)[0].RefuseWaits(nil)
	mustFree(t, b)
	mustCleanup(t, d)
	if got := d.Stats().BytesAllocated; got != allocated {
		t.Fatalf("BytesAllocated %d → %d: a leaked source or target was released", allocated, got)
	}
	if d.Stats().Relocation.Moves != 0 {
		t.Fatal("a leaked allocation was moved again")
	}
}

func TestFailedWaitBeforeAnyCopyAbandonsWithoutLeaking(t *testing.T) {
	d, faults := faultyDevice(t)
	b, want := outdatedPattern(t, d)
	(*faults)[0].RefuseWaits(func(n int) bool { return n == 1 }) // WaitDevice fails: nothing enqueued
	mustCleanup(t, d)
	if st := d.Stats().Relocation; st.Abandoned != 1 || st.Leaked != 0 {
		t.Fatalf("relocation stats %+v, want one abandoned run, nothing leaked", st)
	}
	wantBytes(t, b, want)
	mustFree(t, b)
	mustCleanup(t, d)
	if got := d.Stats().BytesAllocated; got != 0 {
		t.Fatalf("BytesAllocated after freeing everything and Cleanup = %d, want 0", got)
	}
}

func TestFailedWaitOnPoisonedDeviceAbandonsWithoutLeaking(t *testing.T) {
	d, faults := faultyDevice(t)
	b, want := outdatedPattern(t, d)
	f := (*faults)[0]
	f.FailWith(fmt.Errorf("sticky: %w", storage.ErrDevicePoisoned))
	f.RefuseWaits(func(n int) bool { return n == 2 })
	mustCleanup(t, d)
	if st := d.Stats().Relocation; st.Abandoned != 1 || st.Leaked != 0 {
		t.Fatalf("relocation stats %+v, want abandoned (poisoned), not leaked", st)
	}
	wantBytes(t, b, want)
}
