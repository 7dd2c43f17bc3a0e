package gpumem

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/memory"
	"github.com/gpumem/gpumem/relocation"
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

// scriptedReserver answers Reserve from a script of errors (nil = success)
// and records the page updates it was asked under.
type scriptedReserver struct {
	script []error
	asked  []memory.PageUpdate
}

// at is the reservation reserveWithRetry runs: size bytes, under the page
// update it is given.
func (r *scriptedReserver) at(size uint64) func(memory.PageUpdate) (*handle.Handle, error) {
	return func(u memory.PageUpdate) (*handle.Handle, error) { return r.Reserve(size, u) }
}

func (r *scriptedReserver) Reserve(size uint64, u memory.PageUpdate) (*handle.Handle, error) {
	r.asked = append(r.asked, u)
	if len(r.script) == 0 {
		panic("scriptedReserver: reserve beyond the script")
	}
	err := r.script[0]
	r.script = r.script[1:]
	if err != nil {
		return nil, err
	}
	return handle.New(handle.Uninit), nil
}

// A makeRoom that cannot wait (the caller's context ended, or it is an op)
// ends the reservation without a retry: the context's error as it is,
// another error wrapping the first failure.
func TestReserveWithoutRoomReturnsWhyNoRetry(t *testing.T) {
	oom := fmt.Errorf("wrapped: %w", &storage.OutOfMemoryError{Requested: 1, Capacity: 1})
	for _, c := range []struct {
		room error
		want []error
	}{
		{context.DeadlineExceeded, []error{context.DeadlineExceeded}},
		{ErrCalledFromOp, []error{ErrCalledFromOp, storage.ErrOutOfMemory}},
	} {
		r := &scriptedReserver{script: []error{oom}}
		_, retried, err := reserveWithRetry(r.at(4096), 4096, memory.Allow,
			func(error) (memory.PageUpdate, error) { return 0, c.room },
			func(string) {})
		if retried || err == nil {
			t.Fatalf("makeRoom failing with %v: retried=%v err=%v", c.room, retried, err)
		}
		for _, w := range c.want {
			if !errors.Is(err, w) {
				t.Errorf("makeRoom failing with %v: error %v does not wrap %v", c.room, err, w)
			}
		}
	}
}

// design §12.7 scenario 53: the retry logic against a scripted memory.
func TestReserveRetriesOnceAfterMakingRoomOnlyForReclaimableErrors(t *testing.T) {
	oom := fmt.Errorf("wrapped: %w", &storage.OutOfMemoryError{Requested: 1, Capacity: 1})
	exhausted := fmt.Errorf("arena: %w", pool.ErrPageSizesExhausted)
	tooBig := fmt.Errorf("arena: %w", pool.ErrBufferTooBig)
	forbidden := fmt.Errorf("memory: %w", memory.ErrPageUpdateForbidden)
	poisoned := fmt.Errorf("%w (and %w)", storage.ErrOutOfMemory, storage.ErrDevicePoisoned)
	secondOOM := fmt.Errorf("second: %w", storage.ErrOutOfMemory)
	cases := []struct {
		name      string
		u         memory.PageUpdate
		script    []error
		wantErr   error // nil: success
		wantRetry bool
	}{
		{"success needs no retry", memory.Allow, []error{nil}, nil, false},
		{"out of memory retries once and succeeds", memory.Allow, []error{oom, nil}, nil, true},
		{"page sizes exhausted retries once and succeeds", memory.Allow, []error{exhausted, nil}, nil, true},
		{"buffer too big is not retried", memory.Allow, []error{tooBig}, tooBig, false},
		{"page update forbidden is not retried", memory.Forbidden, []error{forbidden}, forbidden, false},
		{"page update forbidden is not retried even under Allow", memory.Allow, []error{forbidden}, forbidden, false},
		{"out of memory under AddOnly is not retried", memory.AddOnly, []error{oom}, oom, false},
		{"poisoned device is not retried", memory.Allow, []error{poisoned}, poisoned, false},
		{"a failed retry returns the retry's error", memory.Allow, []error{oom, secondOOM}, secondOOM, true},
		{"a retry failing otherwise returns that error", memory.Allow, []error{exhausted, tooBig}, tooBig, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &scriptedReserver{script: c.script}
			var rooms []error
			var warns []string
			h, retried, err := reserveWithRetry(r.at(4096), 4096, c.u,
				func(err error) (memory.PageUpdate, error) { rooms = append(rooms, err); return memory.Allow, nil },
				func(msg string) { warns = append(warns, msg) })
			if err != c.wantErr {
				t.Fatalf("error = %v, want %v", err, c.wantErr)
			}
			if (h != nil) != (c.wantErr == nil) {
				t.Fatalf("handle = %v with error %v", h, err)
			}
			if h != nil {
				h.Release()
			}
			if retried != c.wantRetry {
				t.Fatalf("retried = %v, want %v", retried, c.wantRetry)
			}
			if len(r.script) != 0 {
				t.Fatalf("%d scripted answers left unused", len(r.script))
			}
			if !c.wantRetry {
				if len(rooms) != 0 || len(warns) != 0 || len(r.asked) != 1 {
					t.Fatalf("without a retry: %d makeRoom, %d warns, %d reserves; want 0, 0, 1", len(rooms), len(warns), len(r.asked))
				}
				if r.asked[0] != c.u {
					t.Fatalf("reserved under %v, want %v", r.asked[0], c.u)
				}
				return
			}
			if len(rooms) != 1 || rooms[0] != c.script[0] {
				t.Fatalf("makeRoom calls = %v, want one with the first error %v", rooms, c.script[0])
			}
			if len(warns) != 1 {
				t.Fatalf("warns = %q, want exactly one", warns)
			}
			if want := c.script[0].Error(); !contains(warns[0], "4096") || !contains(warns[0], want) {
				t.Fatalf("warn %q names neither the size nor the first error %q", warns[0], want)
			}
			if len(r.asked) != 2 || r.asked[1] != memory.Allow {
				t.Fatalf("reserves asked under %v, want [%v %v]", r.asked, c.u, memory.Allow)
			}
		})
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// design §9.4 step 4: page sizes exhausted makes room by Relocate(ArenaFull);
// any other error by an explicit cleanup of every stream.
func TestMakeRoomRelocatesArenaFullForExhaustedPageSizesAndCleansUpOtherwise(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	b, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	// Each stream: a live buffer on an outdated page and an empty cached page.
	var keep []*Buffer
	for i, s := range []*Stream{a, b} {
		small := mustAlloc(t, s, 1*mib)
		mustWrite(t, small, pattern(1*mib, byte(i)))
		keep = append(keep, small)
		mustFree(t, mustAlloc(t, s, 10*mib))
	}
	if outdatedPages(d) != 2 {
		t.Fatalf("outdated pages = %d, want one per stream", outdatedPages(d))
	}

	d.mu.Lock()
	_, _ = d.makeRoomLocked(nil, a, fmt.Errorf("x: %w", pool.ErrPageSizesExhausted))
	d.mu.Unlock()
	st := d.Stats()
	if st.Relocation.Runs[relocation.ArenaFull] != 1 || st.Relocation.Runs[relocation.Explicit] != 0 {
		t.Fatalf("runs after exhausted = %v, want one ArenaFull, no Explicit", st.Relocation.Runs)
	}
	if got := streamOutdated(d, 0); got != 0 {
		t.Fatalf("relocating stream's outdated pages after ArenaFull = %d, want 0", got)
	}
	if got := streamOutdated(d, 1); got != 1 {
		t.Fatalf("other stream's outdated pages after ArenaFull = %d, want 1 (left alone)", got)
	}
	allocatedBefore := st.BytesAllocated

	d.mu.Lock()
	_, _ = d.makeRoomLocked(nil, a, fmt.Errorf("x: %w", storage.ErrOutOfMemory))
	d.mu.Unlock()
	st = d.Stats()
	if st.Relocation.Runs[relocation.Explicit] != 1 {
		t.Fatalf("Explicit relocation runs after out of memory = %d, want 1 (the other stream; the first has nothing outdated)", st.Relocation.Runs[relocation.Explicit])
	}
	if outdatedPages(d) != 0 {
		t.Fatalf("outdated pages after the explicit cleanup = %d, want 0", outdatedPages(d))
	}
	if st.BytesAllocated >= allocatedBefore {
		t.Fatalf("BytesAllocated %d → %d: the explicit cleanup released nothing", allocatedBefore, st.BytesAllocated)
	}
	for i, k := range keep {
		wantBytes(t, k, pattern(1*mib, byte(i)))
	}
}

// streamOutdated returns the outdated pages of stream i.
func streamOutdated(d *Device, i int) uint64 {
	for _, p := range d.Report().Streams[i].Pools.Dynamic {
		if k, ok := p.Kind.(pool.AdaptiveKind); ok {
			return k.OutdatedPages
		}
	}
	return 0
}

// faultyDevice opens a host device whose every stream storage is wrapped in
// a storage.Faulty; faults[i] is stream i's.
func faultyDevice(t *testing.T, opts ...Option) (*Device, *[]*storage.Faulty) {
	t.Helper()
	var faults []*storage.Faulty
	opts = append(opts, WithStorageWrapper(func(s storage.Storage) storage.Storage {
		f := storage.NewFaulty(s)
		faults = append(faults, f)
		return f
	}))
	return openHost(t, opts...), &faults
}

// outdatedPattern leaves a (4 MiB + 3)-byte pattern alone on an outdated
// 6 MiB page, with the empty 8 MiB current page the growth left (scenario 51).
func outdatedPattern(t *testing.T, d *Device) (*Buffer, []byte) {
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

// design §8.4 example 2 with the copy refused: the pressure relocation an
// allocation triggers is abandoned, and the trigger stalls on the unchanged
// shape instead of retrying on every allocation.
func TestRefusedPressureRelocationStallsTheTriggerUntilTheShapeChanges(t *testing.T) {
	d, faults := faultyDevice(t,
		WithProperties(memory.Properties{MaxPageSize: 1 << 30, Alignment: 32, MaxMemory: 24 * mib}),
		WithCapacity(24*mib))
	s := d.DefaultStream()
	small := mustAlloc(t, s, 1*mib)
	want := pattern(1*mib, 3)
	mustWrite(t, small, want)
	big := mustAlloc(t, s, 10*mib) // grows to 11 MiB pages; 13 MiB held: pressure is high
	loc := small.h.Location()
	(*faults)[0].RefuseCopies(func(int) bool { return true })
	x := mustAlloc(t, s, 512*kib) // triggers the pressure relocation, which is refused
	st := d.Stats().Relocation
	if st.Runs[relocation.MemoryPressure] != 1 || st.Abandoned != 1 {
		t.Fatalf("relocation stats %+v, want one abandoned MemoryPressure run", st)
	}
	if got := small.h.Location(); got != loc {
		t.Fatalf("location %v → %v after an abandoned relocation", loc, got)
	}
	y := mustAlloc(t, s, 256*kib) // same arena shape: stalled, no new run
	if got := d.Stats().Relocation.Runs[relocation.MemoryPressure]; got != 1 {
		t.Fatalf("MemoryPressure runs = %d after an allocation on the unchanged shape, want 1 (stalled)", got)
	}
	if got := (*faults)[0].Refusals(); got != 1 {
		t.Fatalf("copies refused = %d, want 1", got)
	}
	wantBytes(t, small, want)
	(*faults)[0].RefuseCopies(nil)
	for _, b := range []*Buffer{x, y} {
		mustFree(t, b)
	}
	mustCleanup(t, d)
	if outdatedPages(d) != 0 {
		t.Fatalf("outdated pages after Cleanup with copies allowed = %d, want 0", outdatedPages(d))
	}
	wantBytes(t, small, want)
	mustFree(t, big)
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
