package memory_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// Scenario 26 and design §8.4 example 2: nothing asks for the relocation
// ahead of a failed reservation; the make-room path's MemoryPressure
// relocation, once asked, moves the 1 MiB into the 10 MiB page the 9 MiB
// allocation grew.
func TestMemoryPressureRelocationMovesOneMiBIntoTenMiBPageOn24MiBDevice(t *testing.T) {
	m := newHostManager(t, adaptivePreset(24*mib), memory.Config{}, 24*mib)
	a := arena(t, m)

	small := alloc(t, m, 1*mib, memory.Allow)
	defer small.Release()
	if got := a.PageSize(); got != 2*mib {
		t.Fatalf("page size after 1 MiB = %d, want 2 MiB", got)
	}
	if got := m.BytesAllocated(); got != 2*mib {
		t.Fatalf("allocated after 1 MiB = %d, want one 2 MiB page", got)
	}
	if need := m.RelocationNeed(); need.Kind != relocation.NeedNothing {
		t.Fatalf("need with nothing outdated = %+v, want NeedNothing", need)
	}
	wantNoRelocation(t, m)

	// The 1 MiB served is less than 9 MiB: too thin a history to tile, so
	// the growth takes the smallest page that holds 9 MiB, 10 MiB (2 MiB
	// steps), and 1 MiB of it stays free.
	large := alloc(t, m, 9*mib, memory.Allow)
	defer large.Release()
	if got := a.PageSize(); got != 10*mib {
		t.Fatalf("page size after 9 MiB = %d, want 10 MiB", got)
	}
	if !m.HasOutdated() || a.OutdatedPages() != 1 {
		t.Fatalf("after growth: HasOutdated %v, outdated pages %d; want the 2 MiB page outdated", m.HasOutdated(), a.OutdatedPages())
	}
	if got := m.BytesAllocated(); got != 12*mib {
		t.Fatalf("allocated after growth = %d, want 12 MiB (2 + 10)", got)
	}
	// 12 MiB held of 24 with a 10 MiB next page (12 + 10 > 24 − 10): the
	// old rule's pressure, but memory pressure is never anticipated.
	if need := m.RelocationNeed(); need.Kind != relocation.NeedNothing {
		t.Fatalf("need = %+v, want NeedNothing", need)
	}
	wantNoRelocation(t, m)

	out := m.Relocate(relocation.HostCopies{}, relocation.MemoryPressure)
	if out.Kind != relocation.Moved || out.Moves != 1 || out.Bytes != 1*mib || out.Err != nil {
		t.Fatalf("outcome = %+v, want Moved, 1 move of 1 MiB", out)
	}
	if m.HasOutdated() || a.OutdatedPages() != 0 {
		t.Fatalf("after relocation: HasOutdated %v, outdated pages %d; want none", m.HasOutdated(), a.OutdatedPages())
	}
	if got := a.Current().Pages(); got != 1 {
		t.Fatalf("current pages = %d, want 1", got)
	}
	if got := m.BytesAllocated(); got != 10*mib {
		t.Fatalf("allocated after relocation = %d, want 10 MiB", got)
	}
	if !samePage(small.Location(), large.Location()) || small.Location().Pool() != a.Current().Index() {
		t.Fatalf("1 MiB at %v, 9 MiB at %v: want both on the current pool's one page", small.Location(), large.Location())
	}
	if r := region(t, m, small); r.Offset != 9*mib || r.Size != 1*mib {
		t.Fatalf("moved 1 MiB at offset %d size %d, want the last MiB of the page", r.Offset, r.Size)
	}
	st := m.Stats().Relocation
	if st.Runs[relocation.MemoryPressure] != 1 || st.Moves != 1 || st.BytesMoved != 1*mib || st.PagesReleased != 1 || st.BytesReleased != 2*mib {
		t.Fatalf("stats = %+v, want one MemoryPressure run moving 1 MiB and releasing one 2 MiB page", st)
	}
	wantNoRelocation(t, m)
	if need := m.RelocationNeed(); need.Kind != relocation.NeedNothing {
		t.Fatalf("need after relocation = %+v, want NeedNothing", need)
	}
}

// Scenario 26, last sentence.
func TestFourMiBDeviceWithNothingOutdatedWantsNoRelocation(t *testing.T) {
	m := newHostManager(t, adaptivePreset(4*mib), memory.Config{}, 4*mib)
	h := alloc(t, m, 1*mib, memory.Allow)
	defer h.Release()
	// 2 + 2 > 4 − 2 would be High, but nothing is outdated.
	if need := m.RelocationNeed(); need.Kind != relocation.NeedNothing {
		t.Fatalf("need = %+v, want NeedNothing", need)
	}
	wantNoRelocation(t, m)
}

// design §8.4 example 3: without a failed reservation nothing relocates,
// and the outdated page waits for its allocation's free.
func TestOutdatedPageWaitsForItsAllocationOn48MiBDevice(t *testing.T) {
	m := newHostManager(t, adaptivePreset(48*mib), memory.Config{}, 48*mib)
	a := arena(t, m)
	small := alloc(t, m, 1*mib, memory.Allow)
	large := alloc(t, m, 9*mib, memory.Allow) // a 10 MiB page, 1 MiB of it free
	defer large.Release()
	wantNoRelocation(t, m)

	before := small.Location()
	other := alloc(t, m, 512*kib, memory.Allow) // an Allow reservation: periodic cleanup runs
	defer other.Release()
	if small.Location() != before || a.OutdatedPages() != 1 {
		t.Fatalf("outdated page changed while its allocation lives: %v → %v, %d outdated pages", before, small.Location(), a.OutdatedPages())
	}
	small.Release()
	last := alloc(t, m, 256*kib, memory.Allow)
	defer last.Release()
	if m.HasOutdated() || m.BytesAllocated() != 10*mib {
		t.Fatalf("after freeing its allocation: HasOutdated %v, %d bytes allocated; want the 2 MiB page gone", m.HasOutdated(), m.BytesAllocated())
	}
}

// growWithLive reserves each of liveSizes (which land on one 2 MiB page and
// sum to less than 9 MiB), then 9 MiB, which grows the arena to 10 MiB
// pages (the smallest in 2 MiB steps that holds it: what the arena served
// is too thin a history to tile), leaves 1 MiB free on the new page and the
// 2 MiB page outdated.
func growWithLive(t *testing.T, m *memory.Manager, liveSizes ...uint64) (live []*handle.Handle, large *handle.Handle) {
	t.Helper()
	for _, s := range liveSizes {
		live = append(live, alloc(t, m, s, memory.Allow))
	}
	large = alloc(t, m, 9*mib, memory.Allow)
	if !m.HasOutdated() {
		t.Fatalf("no outdated pool after growth")
	}
	if got := arena(t, m).PageSize(); got != 10*mib {
		t.Fatalf("page size after 9 MiB = %d, want 10 MiB", got)
	}
	return live, large
}

func releaseAll(hs ...*handle.Handle) {
	for _, h := range hs {
		h.Release()
	}
}

// fullArena fills every page size of a Sim-backed adaptive memory: 2 MiB
// fills the first 2 MiB page, then 63 allocations of the current page size
// + 32 bytes each force a growth (the pages climb to a few hundred MiB,
// under the 1 GiB max page), each allocation live and alone on its page, so
// 63 slots are outdated pools with one live allocation each and the arena
// wants an ArenaFull relocation (§8.4 example 6).
func fullArena(t *testing.T) (*memory.Manager, []*handle.Handle) {
	t.Helper()
	m := newManagerOn(t, hoststorage.NewSim(32, nil), adaptivePreset(0), memory.Config{})
	a := arena(t, m)
	hs := []*handle.Handle{alloc(t, m, 2*mib, memory.Allow)}
	for k := range uint64(63) {
		before := a.PageSize()
		hs = append(hs, alloc(t, m, before+32, memory.Allow))
		if a.Growths() != k+1 || a.PageSize() <= before {
			t.Fatalf("%d bytes after %d growths: %d growths, page size %d → %d; want one more growth", before+32, k, a.Growths(), before, a.PageSize())
		}
	}
	if !a.Full() {
		t.Fatal("63 growths from a used 2 MiB pool and the arena is not full")
	}
	return m, hs
}

// Scenario 27 and design §8.4 example 5.
func TestGuardedOutdatedPagesStallRelocationUntilAGuardIsReleased(t *testing.T) {
	m, hs := fullArena(t)
	defer releaseAll(hs...)
	wantRelocation(t, m, relocation.ArenaFull)

	outdated := hs[:len(hs)-1] // the last one is on the current page
	var guards []*pool.PageGuard
	for _, h := range outdated {
		g, ok := m.Guard(h.Location())
		if !ok {
			t.Fatalf("no guard for %v", h.Location())
		}
		guards = append(guards, g)
	}
	before := outdated[0].Location()
	out := m.Relocate(relocation.HostCopies{}, relocation.ArenaFull)
	if out.Kind != relocation.NothingToMove || out.Moves != 0 {
		t.Fatalf("outcome with every outdated page guarded = %+v, want NothingToMove, 0 moves", out)
	}
	if outdated[0].Location() != before {
		t.Fatalf("guarded allocation moved: %v → %v", before, outdated[0].Location())
	}
	if need := m.RelocationNeed(); need.Kind != relocation.NeedNothing {
		t.Fatalf("need after a fruitless relocation = %+v, want stalled NeedNothing", need)
	}
	wantNoRelocation(t, m)

	guards[0].Release()
	wantRelocation(t, m, relocation.ArenaFull)
	out = m.Relocate(relocation.HostCopies{}, relocation.ArenaFull)
	if out.Kind != relocation.Moved || out.Moves != 1 {
		t.Fatalf("outcome after one guard went = %+v, want Moved, 1 move", out)
	}
	for _, g := range guards[1:] {
		g.Release()
	}
}

// Scenario 27, second sentence.
func TestStalledRelocationWantedAgainAfterNewCurrentPage(t *testing.T) {
	m, hs := fullArena(t)
	defer releaseAll(hs...)
	var guards []*pool.PageGuard
	for _, h := range hs[:len(hs)-1] {
		g, ok := m.Guard(h.Location())
		if !ok {
			t.Fatalf("no guard for %v", h.Location())
		}
		guards = append(guards, g)
	}
	defer func() {
		for _, g := range guards {
			g.Release()
		}
	}()
	if out := m.Relocate(relocation.HostCopies{}, relocation.ArenaFull); out.Kind != relocation.NothingToMove {
		t.Fatalf("outcome on guarded pages = %+v, want NothingToMove", out)
	}
	wantNoRelocation(t, m)

	a := arena(t, m)
	pagesBefore := a.Current().Pages()
	// A whole page's worth fits the page size but not beside the live
	// allocation on the current page: a second page.
	more := alloc(t, m, a.PageSize(), memory.Allow)
	defer more.Release()
	if got := a.Current().Pages(); got != pagesBefore+1 {
		t.Fatalf("current pages = %d, want %d", got, pagesBefore+1)
	}
	wantRelocation(t, m, relocation.ArenaFull)
}

// Scenario 27, last sentence.
func TestGuardReleasedAtOnceDoesNotPreventMove(t *testing.T) {
	m := newHostManager(t, adaptivePreset(24*mib), memory.Config{}, 24*mib)
	live, large := growWithLive(t, m, 1*mib)
	defer releaseAll(append(live, large)...)
	g, ok := m.Guard(live[0].Location())
	if !ok {
		t.Fatalf("no guard")
	}
	g.Release()
	out := m.Relocate(relocation.HostCopies{}, relocation.MemoryPressure)
	if out.Kind != relocation.Moved || out.Moves != 1 {
		t.Fatalf("outcome = %+v, want Moved, 1 move", out)
	}
	if m.Guards() != 0 {
		t.Fatalf("guards = %d, want 0", m.Guards())
	}
}

// Scenario 32, first half.
func TestRelocatedAllocationKeepsItsBytes(t *testing.T) {
	m := newHostManager(t, adaptivePreset(24*mib), memory.Config{}, 24*mib)
	small := alloc(t, m, 1*mib, memory.Allow)
	defer small.Release()
	fill(t, m, small, 7)
	large := alloc(t, m, 9*mib, memory.Allow) // a 10 MiB page, 1 MiB of it free
	defer large.Release()
	fill(t, m, large, 9)
	from := small.Location()

	out := m.Relocate(relocation.HostCopies{}, relocation.MemoryPressure)
	if out.Kind != relocation.Moved || out.Moves != 1 {
		t.Fatalf("outcome = %+v, want Moved, 1 move", out)
	}
	if small.Location() == from {
		t.Fatalf("allocation still at %v", from)
	}
	wantBytes(t, m, small, 1*mib, 7)
	wantBytes(t, m, large, 9*mib, 9)
	if m.HasOutdated() || m.BytesAllocated() != 10*mib {
		t.Fatalf("HasOutdated %v, %d bytes allocated; want the outdated page gone", m.HasOutdated(), m.BytesAllocated())
	}
	if !samePage(small.Location(), large.Location()) {
		t.Fatalf("moved allocation at %v, large one at %v: want one page", small.Location(), large.Location())
	}
	if u := usage(m); u.BytesInUse != 10*mib || u.Allocations != 2 || u.BytesReserved != 10*mib {
		t.Fatalf("usage = %+v, want 2 allocations, 10 MiB in use and reserved", u)
	}
}

// Scenario 32, second half.
func TestRefusedCopiesLeaveAllocationWhereItWasWithItsBytes(t *testing.T) {
	st := hoststorage.NewFaulty(hoststorage.NewHost(32, storage.NewBudget(24*mib)))
	m := newManagerOn(t, st, adaptivePreset(24*mib), memory.Config{})
	small := alloc(t, m, 1*mib, memory.Allow)
	defer small.Release()
	fill(t, m, small, 7)
	large := alloc(t, m, 9*mib, memory.Allow) // a 10 MiB page, 1 MiB of it free
	defer large.Release()
	from := small.Location()
	usageBefore := usage(m)

	st.RefuseResolve(true)
	out := m.Relocate(relocation.HostCopies{Faults: st}, relocation.MemoryPressure)
	st.RefuseResolve(false)
	if out.Kind != relocation.Abandoned || out.Err == nil {
		t.Fatalf("outcome = %+v, want Abandoned with an error", out)
	}
	wantErrIs(t, out.Err, storage.ErrUnknownRegion)
	if st.Refusals() == 0 {
		t.Fatalf("no resolve was refused")
	}
	if small.Location() != from {
		t.Fatalf("allocation moved from %v to %v although its copy was refused", from, small.Location())
	}
	wantBytes(t, m, small, 1*mib, 7)
	if !m.HasOutdated() || m.BytesAllocated() != 12*mib {
		t.Fatalf("HasOutdated %v, %d bytes allocated; want the outdated page kept", m.HasOutdated(), m.BytesAllocated())
	}
	if u := usage(m); u != usageBefore {
		t.Fatalf("usage after an abandoned relocation = %+v, want %+v (target freed again)", u, usageBefore)
	}
	if got := m.Stats().Relocation.Abandoned; got != 1 {
		t.Fatalf("abandoned count = %d, want 1", got)
	}
	// The freed target is room again: the next relocation moves.
	if out := m.Relocate(relocation.HostCopies{Faults: st}, relocation.MemoryPressure); out.Kind != relocation.Moved {
		t.Fatalf("retry outcome = %+v, want Moved", out)
	}
	wantBytes(t, m, small, 1*mib, 7)
}

// recorder keeps every log record's level and message.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) has(level slog.Level, substr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		if rec.Level == level && strings.Contains(rec.Message, substr) {
			return true
		}
	}
	return false
}

// design §6.5: an abandoned relocation always warns, even with logging
// disabled, while Info lines stay silent.
func TestAbandonedRelocationWarnsEvenWithLoggingDisabled(t *testing.T) {
	rec := &recorder{}
	st := hoststorage.NewFaulty(hoststorage.NewHost(32, nil))
	m, err := memory.New(st, adaptivePreset(24*mib), memory.Config{}, slog.New(rec), "s0", nil)
	if err != nil {
		t.Fatal(err)
	}
	live, large := growWithLive(t, m, 1*mib)
	defer releaseAll(live[0], large)
	if rec.has(slog.LevelInfo, "grew") {
		t.Fatalf("growth logged at Info with logging disabled")
	}
	st.RefuseResolve(true)
	out := m.Relocate(relocation.HostCopies{Faults: st}, relocation.MemoryPressure)
	st.RefuseResolve(false)
	if out.Kind != relocation.Abandoned {
		t.Fatalf("outcome = %+v, want Abandoned", out)
	}
	if !rec.has(slog.LevelWarn, "relocation off outdated pages abandoned") {
		t.Fatalf("no Warn for the abandoned relocation")
	}
}

// design §7.5: a failed non-poison wait leaks source and target; neither is
// reused.
func TestFailedCopyWaitLeaksSourceAndTarget(t *testing.T) {
	st := hoststorage.NewFaulty(hoststorage.NewHost(32, nil))
	m := newManagerOn(t, st, adaptivePreset(24*mib), memory.Config{})
	live, large := growWithLive(t, m, 1*mib)
	defer releaseAll(large)
	fill(t, m, live[0], 7)
	from := live[0].Location()
	st.RefuseWaits(func(n int) bool { return n == 2 }) // WaitCopies
	out := m.Relocate(relocation.HostCopies{Faults: st}, relocation.MemoryPressure)
	st.RefuseWaits(nil)
	if out.Kind != relocation.Leaked || m.Stats().Relocation.Leaked != 1 {
		t.Fatalf("outcome = %+v, leaked %d; want Leaked", out, m.Stats().Relocation.Leaked)
	}
	if live[0].Location() != from {
		t.Fatalf("allocation moved after a failed wait")
	}
	live[0].Release()
	// Both slices stay non-free: the 1 MiB left on the 10 MiB page is never
	// handed out, and the outdated page is never released.
	h := alloc(t, m, 1*mib, memory.Allow)
	defer h.Release()
	if samePage(h.Location(), large.Location()) {
		t.Fatalf("leaked target room reused at %v", h.Location())
	}
	if !m.HasOutdated() {
		t.Fatalf("outdated page with a leaked source released")
	}
}
