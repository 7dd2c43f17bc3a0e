package memory

import (
	"fmt"
	"log/slog"
	"math"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// Dynamic memory serves what a workload allocates and frees as it runs (not
// persistent weights, not dedicated buffers). What every kind does is here;
// relocating and unmapping granules are capabilities of their own
// (Relocating, GranuleUnmapper), so a kind implements only what it does.
type Dynamic interface {
	// Reserve serves size, adding pages as needed. Held room is handed to
	// to (pool.Bind: the buffer bound at once, or a clone); a new page
	// returns the reservation's clone.
	Reserve(st storage.Storage, size uint64, to pool.Bind) (*handle.Handle, error)
	// TryReserve serves size from room already held, handed to to, or nil.
	// On granular storage held room may still need its granules mapped: st
	// maps them.
	TryReserve(st storage.Storage, size uint64, to pool.Bind) *handle.Handle
	// Pool returns the pool at a pool index, or nil.
	Pool(index uint8) pool.Pool
	// Cleanup gives back what the pools' policies say may go.
	Cleanup(st storage.Storage, allocNr uint64, kind pool.CleanupKind)
	// Report describes every pool, smallest first.
	Report() []pool.Report
	// WouldReserve, WouldTryReserve and WouldCleanup are Reserve,
	// TryReserve and Cleanup in a dry run's view (pool would.go): what they
	// would do, changing nothing.
	WouldReserve(v *pool.View, size uint64) pool.Would
	WouldTryReserve(v *pool.View, size uint64) pool.Would
	WouldCleanup(v *pool.View, allocNr uint64, kind pool.CleanupKind)
}

// Relocating is a dynamic memory whose growth leaves outdated pages behind
// and that relocates their survivors (adaptive memory). A memory without it
// never has anything outdated.
type Relocating interface {
	Dynamic
	// RelocationNeed says whether the memory wants a relocation, before the
	// device's byte count is known.
	RelocationNeed() relocation.Need
	// HasOutdated reports whether a growth left pages behind.
	HasOutdated() bool
	// Relocate moves what outdated pages hold onto current ones.
	Relocate(st storage.Storage, q relocation.CopyQueue, reason relocation.Reason) relocation.Outcome
	// Growths counts arena growths.
	Growths() uint64
	// RelocationStats returns the relocation counters.
	RelocationStats() relocation.Stats
	// State describes the arena for the relocation trigger.
	State() relocation.ArenaState
	// CanCompact reports, without planning, whether a compaction might
	// empty a current page (pool.Sliced.CanCompact); underPressure: one with
	// a Goal (Compact's lim), where a repack or small pages into the arena
	// may run.
	CanCompact(underPressure bool) bool
	// CanMakeHole reports, without planning, whether MakeHole might make
	// room for a reservation of size in the pool that would serve it.
	CanMakeHole(size uint64) bool
	// HasOutdatedIn, CanCompactIn and CanMakeHoleIn are HasOutdated,
	// CanCompact and CanMakeHole in a dry run's view (nil: as it is).
	HasOutdatedIn(v *pool.View) bool
	CanCompactIn(v *pool.View, underPressure bool) bool
	CanMakeHoleIn(v *pool.View, size uint64) bool
	// MakeHole moves the live allocations of the cheapest run of slices
	// that would hold a reservation of size onto other pages, so that
	// reservation finds room without a new page.
	MakeHole(st storage.Storage, q relocation.CopyQueue, size uint64, lim pool.CompactLimits) relocation.Outcome
	// Compact empties the sparsest current pages into the room of the
	// others, within lim, and gives the emptied pages back.
	Compact(st storage.Storage, q relocation.CopyQueue, lim pool.CompactLimits) relocation.Outcome
}

// GranuleUnmapper is a dynamic memory with sliced pages that can give back
// the granules no live slice touches (on granular storage).
type GranuleUnmapper interface {
	// UnmapFree unmaps the granules of unguarded sliced pages that no live
	// slice touches and returns the page bytes they covered (0 on storage
	// that backs pages whole).
	UnmapFree(st storage.Storage) uint64
}

// Adaptive-memory constants (design §6.6).
const (
	// SmallPage is the small pool's page on granular storage (where only
	// its mapped granules count): kernel-metadata churn (shapes,
	// strides, scalars) stays off the arena, so it neither fragments the
	// arena nor shapes its page size.
	SmallPage = 8 << 20
	// SmallPageWhole is the small pool's page on storage that backs pages
	// whole: there every byte of a small page is reserved, and one 2 MiB
	// granule holds a step's metadata as PyTorch's small segments do.
	SmallPageWhole = 2 << 20
	// SmallSlice is the largest allocation the small pool serves.
	SmallSlice = 64 << 10
	tinyIndex  = 0
	smallIndex = 1
)

// AdaptiveMemory is tiny + small + arena: the default dynamic memory.
type AdaptiveMemory struct {
	tiny    *pool.Exclusive
	small   *pool.Sliced
	arena   *pool.Arena
	trigger relocation.Trigger
	g       *handle.ErrorGraph
	log     *slog.Logger
	stats   relocation.Stats
	// granule is the storage's mapping granule (0: pages backed whole):
	// there a compaction for a failed reservation frees granules
	// (PlanUnmap) instead of making a hole (PlanHole).
	granule uint64
}

// NewAdaptive builds the adaptive memory for p on storage with mapping
// granule granule (0: pages backed whole). On whole pages the small pool's
// page is SmallPageWhole, since every byte of a page is reserved there; on
// granular storage only its mapped granules count.
func NewAdaptive(p Properties, granule uint64, g *handle.ErrorGraph, log *slog.Logger, lim pool.Limits) *AdaptiveMemory {
	sizing := pool.NewPageSizing(p.MaxPageSize, p.Alignment)
	small := uint64(SmallPage)
	if granule == 0 {
		small = SmallPageWhole
	}
	smallPage := min(storage.RoundUp(small, p.Alignment), sizing.Max)
	return &AdaptiveMemory{
		granule: granule,
		tiny:    pool.NewExclusive(0, math.MaxUint64, p.Alignment, tinyIndex, lim),
		small:   pool.NewSliced(smallPage, min(storage.RoundUp(SmallSlice, p.Alignment), smallPage), false, p.Alignment, smallIndex, lim),
		arena:   pool.NewArena(sizing, lim, log),
		g:       g,
		log:     log,
	}
}

// Arena returns the arena.
func (a *AdaptiveMemory) Arena() *pool.Arena { return a.arena }

// Reserve implements Dynamic: tiny for zero bytes, small up to 64 KiB,
// arena for everything else.
func (a *AdaptiveMemory) Reserve(st storage.Storage, size uint64, to pool.Bind) (*handle.Handle, error) {
	switch a.route(size) {
	case toTiny:
		if h := a.tiny.TryReserve(st, 0, a.g, to); h != nil {
			return h, nil
		}
		return a.tiny.Alloc(st, 0)
	case toSmall:
		if h := a.small.TryReserve(st, size, a.g, to); h != nil {
			return h, nil
		}
		return a.small.Alloc(st, size)
	}
	return a.arena.Reserve(st, size, a.g, to)
}

// adaptiveRoute is the pool of the adaptive memory a size goes to.
type adaptiveRoute uint8

const (
	toArena adaptiveRoute = iota
	toTiny                // zero bytes (design §5.2)
	toSmall               // up to the small pool's largest slice
)

// route is the pool a reservation of size goes to: every reservation, and
// its dry run, reads it.
func (a *AdaptiveMemory) route(size uint64) adaptiveRoute {
	switch {
	case size == 0:
		return toTiny
	case a.small.Accept(size):
		return toSmall
	}
	return toArena
}

// routesToArena reports that Reserve sends size to the arena (neither the
// tiny nor the small pool).
func (a *AdaptiveMemory) routesToArena(size uint64) bool { return a.route(size) == toArena }

// TryReserve implements Dynamic.
func (a *AdaptiveMemory) TryReserve(st storage.Storage, size uint64, to pool.Bind) *handle.Handle {
	switch a.route(size) {
	case toTiny:
		return a.tiny.TryReserve(st, 0, a.g, to)
	case toSmall:
		return a.small.TryReserve(st, size, a.g, to)
	}
	return a.arena.TryReserve(st, size, a.g, to)
}

// UnmapFree implements Dynamic: the small pool's and the arena's pages.
func (a *AdaptiveMemory) UnmapFree(st storage.Storage) uint64 {
	return a.small.UnmapFree(st) + a.arena.UnmapFree(st)
}

// Pool implements Dynamic.
func (a *AdaptiveMemory) Pool(index uint8) pool.Pool {
	switch index {
	case tinyIndex:
		return a.tiny
	case smallIndex:
		return a.small
	}
	if p := a.arena.Pool(index); p != nil {
		return p
	}
	return nil
}

// State implements Dynamic.
func (a *AdaptiveMemory) State() relocation.ArenaState { return a.arena.State() }

// RelocationNeed implements Dynamic.
func (a *AdaptiveMemory) RelocationNeed() relocation.Need {
	if !a.arena.HasOutdated() {
		return relocation.Need{} // what Need answers too, without building the state
	}
	return a.trigger.Need(a.arena.State())
}

// HasOutdated implements Dynamic.
func (a *AdaptiveMemory) HasOutdated() bool { return a.arena.HasOutdated() }

// Relocate implements Dynamic: plan with the room the reason allows, copy
// through q, commit what landed, and settle the trigger. Emptied pages go
// back before it returns (a reservation retried right after needs the room).
func (a *AdaptiveMemory) Relocate(st storage.Storage, q relocation.CopyQueue, reason relocation.Reason) relocation.Outcome {
	plan := a.arena.Plan(reason.Room(), st, a.g)
	var out relocation.Outcome
	if plan.IsEmpty() {
		a.trigger.Settled(false, a.arena.State())
		out = relocation.Outcome{Kind: relocation.NothingToMove}
		a.stats.Record(reason, out)
		return out
	}
	moves, bytes := plan.Len(), plan.Bytes()
	landed, err := plan.Copy(st, q)
	if err != nil {
		a.trigger.Settled(false, a.arena.State())
		kind := relocation.Abandoned
		if plan.Leaked() {
			kind = relocation.Leaked
			a.log.Error("gpumem: relocation wait failed; leaking its sources and targets so no copy in flight is overwritten", "moves", moves, "err", err)
		} else {
			a.log.Warn(fmt.Sprintf("gpumem: relocation off outdated pages abandoned: %v", err), "moves", moves)
		}
		out = relocation.Outcome{Kind: kind, Moves: moves, Bytes: bytes, Err: err}
		a.stats.Record(reason, out)
		return out
	}
	pages, released := a.arena.Commit(landed, st, a.g)
	a.trigger.Settled(true, a.arena.State())
	st.Flush()
	out = relocation.Outcome{Kind: relocation.Moved, Moves: moves, Bytes: bytes}
	a.stats.Record(reason, out)
	a.stats.PagesReleased += uint64(pages)
	a.stats.BytesReleased += released
	return out
}

// Cleanup implements Dynamic.
//
// Every Allow reservation runs the periodic one, so what it would find
// nothing to do in is skipped: the small pool (a sliced pool keeps its
// pages until an explicit cleanup) and an arena with no outdated pool to
// drain.
func (a *AdaptiveMemory) Cleanup(st storage.Storage, allocNr uint64, kind pool.CleanupKind) {
	a.tiny.Cleanup(st, allocNr, kind, a.g)
	if kind != pool.Explicit && !a.arena.HasOutdated() {
		return
	}
	a.small.Cleanup(st, allocNr, kind, a.g)
	pages, bytes := a.arena.Cleanup(st, allocNr, kind, a.g)
	a.stats.PagesReleased += uint64(pages)
	a.stats.BytesReleased += bytes
}

// Report implements Dynamic: tiny, small, arena current, outdated pools.
func (a *AdaptiveMemory) Report() []pool.Report {
	return append([]pool.Report{a.tiny.Report(), a.small.Report()}, a.arena.Report()...)
}

// OwnSizePages counts the arena's pages taken at a reservation's own size
// (pool PL30).
func (a *AdaptiveMemory) OwnSizePages() uint64 { return a.arena.OwnSizePages() }

// Growths implements Dynamic.
func (a *AdaptiveMemory) Growths() uint64 { return a.arena.Growths() }

// RelocationStats implements Dynamic.
func (a *AdaptiveMemory) RelocationStats() relocation.Stats { return a.stats }

// Exclusive-pages constants (design §6.6).
const (
	MaxBuckets        = 24
	MinBucketSize     = 32 << 10
	BaseDeallocPeriod = 5000
	DeallocScale      = 1 << 30
)

// ExclusivePools is 24 buckets of one allocation per page, log-uniform from
// 32 KiB to the max page: nothing is ever outdated, nothing relocates.
type ExclusivePools struct {
	buckets []*pool.Exclusive
	g       *handle.ErrorGraph
}

// BucketSizes returns the exclusive buckets' max allocations for a max page
// and alignment: s_i = roundUp(exp(ln 32768 + (ln max − ln 32768)·i/23),
// align), the last forced to max, consecutive duplicates dropped.
func BucketSizes(maxPage, align uint64) []uint64 {
	maxSize := maxPage / align * align
	lo, hi := math.Log(MinBucketSize), math.Log(float64(maxSize))
	var out []uint64
	for i := 0; i < MaxBuckets; i++ {
		s := storage.RoundUp(uint64(math.Exp(lo+(hi-lo)*float64(i)/float64(MaxBuckets-1))), align)
		if i == MaxBuckets-1 {
			s = maxSize
		}
		if len(out) > 0 && out[len(out)-1] == s {
			continue
		}
		out = append(out, s)
	}
	return out
}

// NewExclusivePools builds the exclusive-pages memory for p.
func NewExclusivePools(p Properties, g *handle.ErrorGraph, lim pool.Limits) *ExclusivePools {
	e := &ExclusivePools{g: g}
	for i, s := range BucketSizes(p.MaxPageSize, p.Alignment) {
		period := uint64(BaseDeallocPeriod * math.Round(1+float64(s)/DeallocScale))
		e.buckets = append(e.buckets, pool.NewExclusive(s, period, p.Alignment, uint8(i), lim))
	}
	return e
}

// Reserve implements Dynamic: held room in every accepting bucket, smallest
// first; else a new page in the smallest accepting bucket.
func (e *ExclusivePools) Reserve(st storage.Storage, size uint64, to pool.Bind) (*handle.Handle, error) {
	if h := e.TryReserve(st, size, to); h != nil {
		return h, nil
	}
	return e.alloc(st, size)
}

// alloc adds a page to the first bucket that accepts size.
func (e *ExclusivePools) alloc(st storage.Storage, size uint64) (*handle.Handle, error) {
	for _, b := range e.buckets {
		if b.Accept(size) {
			return b.Alloc(st, size)
		}
	}
	return nil, e.errTooBig(size)
}

// errTooBig is the refusal of a size no bucket accepts.
func (e *ExclusivePools) errTooBig(size uint64) error {
	return fmt.Errorf("%w: %d bytes exceed the largest exclusive bucket of %d bytes (raise the max page size)",
		pool.ErrBufferTooBig, size, e.buckets[len(e.buckets)-1].MaxAlloc())
}

// TryReserve implements Dynamic.
func (e *ExclusivePools) TryReserve(st storage.Storage, size uint64, to pool.Bind) *handle.Handle {
	for _, b := range e.buckets {
		if !b.Accept(size) {
			continue
		}
		if h := b.TryReserve(st, size, e.g, to); h != nil {
			return h
		}
	}
	return nil
}

// Pool implements Dynamic.
func (e *ExclusivePools) Pool(index uint8) pool.Pool {
	if int(index) < len(e.buckets) {
		return e.buckets[index]
	}
	return nil
}

// Cleanup implements Dynamic.
func (e *ExclusivePools) Cleanup(st storage.Storage, allocNr uint64, kind pool.CleanupKind) {
	for _, b := range e.buckets {
		b.Cleanup(st, allocNr, kind, e.g)
	}
}

// Report implements Dynamic: buckets ascending.
func (e *ExclusivePools) Report() []pool.Report {
	out := make([]pool.Report, len(e.buckets))
	for i, b := range e.buckets {
		out[i] = b.Report()
	}
	return out
}

var (
	_ Relocating      = (*AdaptiveMemory)(nil)
	_ GranuleUnmapper = (*AdaptiveMemory)(nil)
	_ Dynamic         = (*ExclusivePools)(nil)
)

// CanCompact implements Relocating: the arena (any of its pools) or the
// small pool might give a page back; on whole pages, also a small page
// into the arena's room (under pressure, smallIntoArenaTarget).
func (a *AdaptiveMemory) CanCompact(underPressure bool) bool {
	return a.CanCompactIn(nil, underPressure)
}

// CanCompactIn implements Relocating: CanCompact in a dry run's view.
func (a *AdaptiveMemory) CanCompactIn(v *pool.View, underPressure bool) bool {
	return a.arena.CanCompactIn(v, underPressure) || a.small.CanCompactIn(v, underPressure) || a.smallIntoArenaCan(v, underPressure)
}

// smallIntoArenaCan is smallIntoArenaTarget's can, in view v (nil: as it
// is).
func (a *AdaptiveMemory) smallIntoArenaCan(v *pool.View, underPressure bool) bool {
	return underPressure && a.granule == 0 && a.small.PagesIn(v) > 0 && a.arena.CanCompactWithIn(v, a.small)
}

// compactTarget is one place a compaction plans and lands: the arena (its
// pools together) or the small pool.
type compactTarget struct {
	can    func() bool
	plan   func(pool.CompactLimits, storage.Storage, *handle.ErrorGraph) (*relocation.Relocation, pool.CompactPlan)
	commit func(*relocation.Landed, storage.Storage, *handle.ErrorGraph)
}

func (a *AdaptiveMemory) arenaTarget(underPressure bool) compactTarget {
	return compactTarget{can: func() bool { return a.arena.CanCompact(underPressure) }, plan: a.arena.PlanCompact,
		commit: func(l *relocation.Landed, st storage.Storage, g *handle.ErrorGraph) {
			a.arena.Commit(l, st, g) // drains the outdated pools it emptied
			a.arena.Current().ReleaseEmpty(st, g)
		}}
}

// smallIntoArenaTarget empties small pages into the arena's room, under
// pressure on whole pages only (pool.Arena.PlanCompactWith): a small page
// is 2 MiB of the device's, and those bytes may be what a repack's tight
// page lacked. It comes after the arena's and the small pool's own
// compactions, so the arena's holes serve the arena's slices first (with
// the make-room path packing ahead on whole pages, its goal is never met,
// so it runs at every make-room compaction there); without a goal
// (Defragment, a refusal that named no size) it never runs, since the
// small pool exists to keep metadata off the arena.
func (a *AdaptiveMemory) smallIntoArenaTarget(underPressure bool) compactTarget {
	return compactTarget{
		can: func() bool { return a.smallIntoArenaCan(nil, underPressure) },
		plan: func(l pool.CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, pool.CompactPlan) {
			return a.arena.PlanCompactWith(a.small, l, st, g)
		},
		commit: func(l *relocation.Landed, st storage.Storage, g *handle.ErrorGraph) {
			a.arena.CommitWith(a.small, l, st, g)
			a.arena.Current().ReleaseEmpty(st, g)
			a.small.ReleaseEmpty(st, g)
		},
	}
}

func (a *AdaptiveMemory) smallTarget(underPressure bool) compactTarget {
	return compactTarget{can: func() bool { return a.small.CanCompact(underPressure) }, plan: a.small.PlanCompact,
		commit: func(l *relocation.Landed, st storage.Storage, g *handle.ErrorGraph) {
			a.small.Commit(l, g)
			a.small.ReleaseEmpty(st, g)
		}}
}

// Compact implements Relocating (design §7.7): the arena first (its pages
// are the large ones; sources and targets on its current and outdated
// pools), then the small pool, then (under pressure, on whole pages) the
// small pages into the arena's room, each one relocation (plan, copy,
// commit) for relocation.Compact within what lim leaves; the emptied pages
// go back at once (a reservation retried right after needs the room). A
// leaked one ends it: its copies may still run, and nothing more should
// move until the device answers again. The outcome sums them: Moved if
// any moved, else the first failure, else NothingToMove.
func (a *AdaptiveMemory) Compact(st storage.Storage, q relocation.CopyQueue, lim pool.CompactLimits) relocation.Outcome {
	var total relocation.Outcome
	pressure := lim.Goal > 0
	for _, t := range [...]compactTarget{a.arenaTarget(pressure), a.smallTarget(pressure), a.smallIntoArenaTarget(pressure)} {
		if !t.can() {
			continue
		}
		o, info := a.compactOne(st, q, t.plan, t.commit, lim)
		switch {
		case o.Kind == relocation.Moved:
			total.Kind = relocation.Moved
			total.Moves += o.Moves
			total.Bytes += o.Bytes
			total.Err = nil
			lim = lim.Less(uint64(o.Bytes), o.Moves, info.BytesFreed)
		case o.Kind != relocation.NothingToMove && total.Kind == relocation.NothingToMove:
			total = o
		}
		if o.Kind == relocation.Leaked || lim.Spent() {
			break
		}
	}
	return total
}

// holeTarget is where a reservation of size would be served from in room
// held today (the small pool, or the arena's current pool when size fits
// its pages), as a compaction target making a hole there; false for zero
// bytes or a growth, which no hole cures. Its can reads view v (nil: as
// it is).
func (a *AdaptiveMemory) holeTarget(v *pool.View, size uint64) (compactTarget, bool) {
	switch a.route(size) {
	case toTiny:
		return compactTarget{}, false
	case toSmall:
		t := a.smallTarget(true)
		t.can = func() bool { return a.small.CanHoleIn(v, size) }
		t.plan = func(l pool.CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, pool.CompactPlan) {
			return a.small.PlanHole(size, l, st, g)
		}
		return t, true
	}
	if kind, _ := a.arena.Sizing().Fit(size, a.arena.PageSize()); kind != pool.Fits {
		return compactTarget{}, false
	}
	t := a.arenaTarget(true)
	t.can = func() bool { return a.arena.CanHoleIn(v, size) }
	t.plan = func(l pool.CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, pool.CompactPlan) {
		return a.arena.PlanHole(size, l, st, g)
	}
	return t, true
}

// unmapTarget is the compaction target that frees mapped granules on
// granular storage, for a reservation that failed for want of budget to
// map (goal: the bytes it lacked, lim.Goal): the arena's pools and the
// small pool as one scope (pool.Arena.PlanUnmapWith), since the budget is
// the device's whichever pool gives a granule back.
func (a *AdaptiveMemory) unmapTarget(v *pool.View) compactTarget {
	return compactTarget{
		can: func() bool { return a.arena.CanUnmapWithIn(v, a.small) },
		plan: func(l pool.CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, pool.CompactPlan) {
			return a.arena.PlanUnmapWith(a.small, l.Goal, l, st, g)
		},
		commit: func(l *relocation.Landed, st storage.Storage, g *handle.ErrorGraph) {
			a.arena.CommitWith(a.small, l, st, g)
			a.arena.Current().ReleaseEmpty(st, g)
			a.small.ReleaseEmpty(st, g)
		},
	}
}

// CanMakeHole implements Relocating: the pool that would serve size might
// be compacted into a hole for it (pool.Sliced.CanHole); on granular
// storage, some mapped granule might be freed (pool.Sliced.CanUnmap).
func (a *AdaptiveMemory) CanMakeHole(size uint64) bool { return a.CanMakeHoleIn(nil, size) }

// CanMakeHoleIn implements Relocating: CanMakeHole in a dry run's view.
func (a *AdaptiveMemory) CanMakeHoleIn(v *pool.View, size uint64) bool {
	if a.granule > 0 {
		return a.unmapTarget(v).can()
	}
	t, ok := a.holeTarget(v, size)
	return ok && t.can()
}

// MakeHole implements Relocating (design §7.7): in the pool that would
// serve size, the cheapest run of slices that holds it has its live
// allocations moved onto other pages (pool.Sliced.PlanHole; for the arena,
// onto any of its pools' pages), one relocation for relocation.Compact
// within lim, so a retried reservation of size finds room without a new
// page.
func (a *AdaptiveMemory) MakeHole(st storage.Storage, q relocation.CopyQueue, size uint64, lim pool.CompactLimits) relocation.Outcome {
	if a.granule > 0 {
		t := a.unmapTarget(nil)
		if !t.can() {
			return relocation.Outcome{Kind: relocation.NothingToMove}
		}
		o, _ := a.compactOne(st, q, t.plan, t.commit, lim)
		return o
	}
	t, ok := a.holeTarget(nil, size)
	if !ok {
		return relocation.Outcome{Kind: relocation.NothingToMove}
	}
	o, _ := a.compactOne(st, q, t.plan, t.commit, lim)
	return o
}

// compactOne plans one compaction with plan, copies it through q and lands
// it with commit (which gives the emptied pages back). The plan's figures
// are returned only for a compaction that landed.
func (a *AdaptiveMemory) compactOne(st storage.Storage, q relocation.CopyQueue, plan func(pool.CompactLimits, storage.Storage, *handle.ErrorGraph) (*relocation.Relocation, pool.CompactPlan), commit func(*relocation.Landed, storage.Storage, *handle.ErrorGraph), lim pool.CompactLimits) (relocation.Outcome, pool.CompactPlan) {
	r, info := plan(lim, st, a.g)
	if r.IsEmpty() {
		out := relocation.Outcome{Kind: relocation.NothingToMove}
		a.stats.Record(relocation.Compact, out)
		return out, pool.CompactPlan{}
	}
	moves, bytes := r.Len(), r.Bytes()
	landed, err := r.Copy(st, q)
	if err != nil {
		kind := relocation.Abandoned
		if r.Leaked() {
			kind = relocation.Leaked
			a.log.Error("gpumem: compaction wait failed; leaking its sources and targets so no copy in flight is overwritten", "moves", moves, "err", err)
		} else {
			a.log.Warn(fmt.Sprintf("gpumem: compaction abandoned: %v", err), "moves", moves)
		}
		out := relocation.Outcome{Kind: kind, Moves: moves, Bytes: bytes, Err: err}
		a.stats.Record(relocation.Compact, out)
		return out, pool.CompactPlan{}
	}
	commit(landed, st, a.g)
	st.Flush()
	out := relocation.Outcome{Kind: relocation.Moved, Moves: moves, Bytes: bytes}
	a.stats.Record(relocation.Compact, out)
	a.stats.CompactPagesFreed += uint64(info.Pages)
	a.stats.CompactBytesFreed += info.BytesFreed
	a.stats.CompactPagesRepacked += uint64(info.Repacked)
	return out, info
}
