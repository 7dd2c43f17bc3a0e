// The per-stream memory manager.
//
// Reserve paths, in order (design §6.3):
//
//	Allow     → Cleanup(Periodic), then as AddOnly
//	AddOnly   → the adding routes (never releases or renumbers)
//	Forbidden → reserveHeld, else ErrPageUpdateForbidden
//
// The adding routes count the reservation (allocNr, which drives periodic
// cleanup), then: Dedicated → the direct pool; Persistent (or SizeMatch) →
// held persistent room; Persistent, or SizeMatch with a bucket of that size →
// a new persistent slice; otherwise the dynamic memory. Reserve takes them
// in one function, so a reservation reaches its pool in two calls.
//
// Reserve-then-bind: the root creates the buffer's handle first and
// reserves for it (pool.Bind). Held room is bound to the buffer in the
// search that finds it: the steady allocation makes no clone and no lookup.
// A new page (or slot, or storage) returns a clone of the slice's own
// handle, and Bind hands that slice to the buffer's descriptor. The
// reserved descriptor is stale from then on, so lookups are
// identity-checked (M3).

package memory

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

var (
	// ErrPageUpdateForbidden is returned by a Forbidden reservation that
	// needs a page: a recording may only use room already held. Warm up the
	// capture with the same workload so the pools hold what it needs.
	ErrPageUpdateForbidden = errors.New("memory: reservation needs a new page while page updates are forbidden")

	// ErrAlreadyPlaced is returned by Bind when the assigned handle already
	// has a location.
	ErrAlreadyPlaced = errors.New("memory: handle already placed")
)

// Pool sentinels (design §3.2).
const (
	PersistentIndex = 255
	DedicatedIndex  = 254
)

// PageUpdate says what a reservation may do to pages.
type PageUpdate uint8

const (
	// Allow runs the periodic cleanup first (may release and renumber) and
	// may add pages.
	Allow PageUpdate = iota
	// AddOnly never releases or renumbers (every page keeps its number and
	// address) and may add a page: other streams while one records.
	AddOnly
	// Forbidden uses only room already held: the recording stream.
	Forbidden
)

func (u PageUpdate) String() string {
	switch u {
	case Allow:
		return "allow"
	case AddOnly:
		return "add-only"
	case Forbidden:
		return "forbidden"
	}
	return fmt.Sprintf("PageUpdate(%d)", uint8(u))
}

// MaySucceedAfterReclaim reports whether a failed reservation may succeed
// after the device gives memory back: out of memory or page sizes exhausted,
// and the device is not poisoned.
func MaySucceedAfterReclaim(err error) bool {
	if err == nil || storage.IsDevicePoisoned(err) {
		return false
	}
	return errors.Is(err, storage.ErrOutOfMemory) || errors.Is(err, pool.ErrPageSizesExhausted)
}

// Stats counts a manager's work.
type Stats struct {
	Growths    uint64
	AllocNr    uint64
	Relocation relocation.Stats
	// BytesUnmapped counts the page bytes whose granules cleanups unmapped
	// (granular storage only).
	BytesUnmapped uint64
	// OwnSizePages counts the arena pages taken at a reservation's own
	// size because the storage refused a page of the current size (pool
	// PL30; whole pages only).
	OwnSizePages uint64
}

// PoolsReport describes every pool of a manager.
type PoolsReport struct {
	Dynamic    []PoolReport
	Persistent PoolReport
	Dedicated  PoolReport
}

// PoolReport describes one pool: its kind, pages, peak and usage.
type PoolReport = pool.Report

// Usage is what a pool holds: bytes reserved, in use, lost to padding and
// held back for freed allocations still bound (pending free), and the
// number of live allocations.
type Usage = pool.Usage

// Usage sums every pool.
func (r PoolsReport) Usage() Usage {
	u := r.Persistent.Usage.Combine(r.Dedicated.Usage)
	for _, d := range r.Dynamic {
		u = u.Combine(d.Usage)
	}
	return u
}

// Manager is one stream's memory.
type Manager struct {
	st         storage.Storage
	props      Properties
	cfg        Config
	log        *slog.Logger
	name       string
	g          *handle.ErrorGraph
	persistent *pool.Persistent
	dedicated  *pool.Direct
	dynamic    Dynamic
	// relocating is dynamic when it relocates (adaptive memory), nil when
	// nothing is ever outdated (exclusive pages).
	relocating Relocating
	reclaimAt  uint64 // the dedicated pool's watermark: 0
	allocNr    uint64
	windows    []Mode
	guards     int
	base       Mode
	granule    uint64 // the storage's mapping granule; 0: pages backed whole
	// largestPage is the max page size rounded down to the alignment
	// (aboveLargestPage): read on every reservation, so not divided anew.
	largestPage uint64
	unmapped    uint64           // Stats.BytesUnmapped
	inv         invariantSampler // the invariants build's check schedule; empty otherwise
}

// New builds a stream's memory on st. g is the device-wide error graph
// (nil: a private one); log may be nil.
func New(st storage.Storage, p Properties, c Config, log *slog.Logger, name string, g *handle.ErrorGraph) (*Manager, error) {
	return newWithLimits(st, p, c, log, name, g, pool.Limits{})
}

// newWithLimits is New with page-count limits on every pool (tests reach
// the index bound cheaply).
func newWithLimits(st storage.Storage, p Properties, c Config, log *slog.Logger, name string, g *handle.ErrorGraph, lim pool.Limits) (*Manager, error) {
	if err := c.Validate(p); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if g == nil {
		g = handle.NewErrorGraph()
	}
	if c.PageGranular == GranulesOff && storage.GranuleOf(st) > 0 {
		st = hoststorage.Plain(st)
	}
	m := &Manager{st: st, props: p, cfg: c, log: log, name: name, g: g, granule: storage.GranuleOf(st),
		largestPage: p.MaxPageSize / p.Alignment * p.Alignment}
	m.persistent = pool.NewPersistent(p.MaxPageSize/p.Alignment*p.Alignment, p.Alignment, lim)
	m.dedicated = pool.NewDirect(p.Alignment, DedicatedIndex, &m.reclaimAt, lim)
	switch c.Dynamic {
	case ExclusivePages:
		m.dynamic = NewExclusivePools(p, g, lim)
	default:
		a := NewAdaptive(p, m.granule, g, m.infoLog(), lim)
		m.dynamic, m.relocating = a, a
	}
	m.base = Auto
	if c.Persistent == Enforced {
		m.base = Persistent
	}
	if c.BaseMode != nil {
		m.base = *c.BaseMode
	}
	if c.LogLevel >= LogBasic {
		m.log.Info("gpumem: memory created", "stream", name, "dynamic", c.Dynamic.String(), "persistent", c.Persistent.String(),
			"max_page", p.MaxPageSize, "alignment", p.Alignment, "max_memory", p.MaxMemory)
	}
	return m, nil
}

// infoLog is the logger Info lines go to: discarded below LogBasic.
func (m *Manager) infoLog() *slog.Logger {
	if m.cfg.LogLevel >= LogBasic {
		return m.log.With("stream", m.name)
	}
	return slog.New(warnOnly{m.log.Handler()})
}

// Storage returns the manager's storage.
func (m *Manager) Storage() storage.Storage { return m.st }

// ErrorGraph returns the error graph the manager marks failures in.
func (m *Manager) ErrorGraph() *handle.ErrorGraph { return m.g }

// Dynamic returns the dynamic memory.
func (m *Manager) Dynamic() Dynamic { return m.dynamic }

// Properties returns the properties the manager was built with.
func (m *Manager) Properties() Properties { return m.props }

// Mode returns the effective mode: the innermost window, else the base mode
// (M4).
func (m *Manager) Mode() Mode {
	if n := len(m.windows); n > 0 {
		return m.windows[n-1]
	}
	return m.base
}

// SetMode opens or closes a window: Auto pops the innermost (no-op when
// none); Persistent pushes Persistent when the config is Enabled or
// SizeMatch, else the base mode; Dedicated always pushes Dedicated.
func (m *Manager) SetMode(mode Mode) {
	switch mode {
	case Auto:
		if n := len(m.windows); n > 0 {
			m.windows = m.windows[:n-1]
		}
	case Persistent:
		if m.cfg.Persistent == Enabled || m.cfg.Persistent == SizeMatch {
			m.windows = append(m.windows, Persistent)
		} else {
			m.windows = append(m.windows, m.base)
		}
	default:
		m.windows = append(m.windows, Dedicated)
	}
	if m.cfg.LogLevel >= LogBasic {
		m.log.Info("gpumem: mode changed", "stream", m.name, "requested", mode.String(), "effective", m.Mode().String())
	}
}

// Reserve reserves size bytes under u (the routes in the file comment) and
// hands the slice to to: the handle returned holds it for the caller. With
// to.To set (a buffer's handle, never placed) that is to.To, bound to the
// slice with to.Cursor, in the reservation itself when held room serves it
// (no clone, no lookup: the steady allocation), else through Bind; with the
// zero Bind it is a clone of the slice's handle, to Bind and release. On
// error nothing changed (M2).
func (m *Manager) Reserve(size uint64, u PageUpdate, to pool.Bind) (h *handle.Handle, err error) {
	if to.To != nil && to.To.Location().Placed() {
		return nil, fmt.Errorf("%w: allocation %d is already at %v", ErrAlreadyPlaced, to.To.ID(), to.To.Location())
	}
	switch u {
	case Forbidden:
		if h = m.reserveHeld(size, to); h == nil {
			err = m.errForbidden(size)
		}
	case Allow:
		m.Cleanup(pool.Periodic)
		fallthrough
	default:
		m.allocNr++
		r := m.addRoute(size, m.cfg.Persistent == SizeMatch && m.persistent.HasSize(size))
		if r.dedicated {
			m.debug("dedicated", size)
			h, err = m.dedicated.AllocMayRelease(m.st, size, u == Allow, m.g)
			break
		}
		if r.persistentHeld {
			if h = m.persistent.TryReserve(m.st, size, m.g, to); h != nil {
				m.debug("persistent (held)", size)
				break
			}
		}
		if r.persistentNew {
			h, err = m.newPersistent(size)
			break
		}
		m.debug("dynamic", size)
		h, err = m.dynamic.Reserve(m.st, size, to)
		if err == nil && m.cfg.LogLevel >= LogFull {
			m.log.Debug("gpumem: dynamic usage", "stream", m.name, "usage", m.Report().Usage().String())
		}
	}
	if err == nil && to.To != nil && h != to.To {
		// A new page, slot or storage: bound through the clone it returned.
		if err = m.Bind(h, to.To, to.Cursor); err != nil {
			h.Release()
			h = nil
		} else {
			h.Release()
			h = to.To
		}
	}
	if invariantsOn {
		m.checkInvariants("Reserve")
	}
	return h, err
}

// newPersistent is Reserve's route to a new persistent slot.
func (m *Manager) newPersistent(size uint64) (*handle.Handle, error) {
	m.debug("persistent (new slice)", size)
	if m.cfg.LogLevel >= LogBasic {
		m.log.Info("gpumem: new persistent page", "stream", m.name, "size", size)
	}
	return m.persistent.Alloc(m.st, size)
}

// errForbidden is a Forbidden reservation's refusal of size (and its dry
// run's): no held room serves it.
func (m *Manager) errForbidden(size uint64) error {
	return fmt.Errorf("%w: %d bytes in %s mode, no held room fits (a recording finds room for what its warmup allocated, in the warmup's order: warm up with the same allocations and frees)", ErrPageUpdateForbidden, size, m.Mode())
}

// addRoute is where reserveAdding serves a size (design §6.3): the
// dedicated pool (a Dedicated window, or a size above the largest page);
// else held persistent room first (a Persistent window, or SizeMatch);
// then a new persistent slot (a Persistent window, or SizeMatch with a
// bucket of the size); else the dynamic memory. A reservation and its dry
// run (WouldReserve) both read it.
type addRoute struct {
	dedicated, persistentHeld, persistentNew bool
}

// addRoute is the route of a reservation of size under the current mode;
// sizeMatched: the config is SizeMatch and the persistent pool has a bucket
// of size (Persistent.HasSize, or in a dry run its view's).
func (m *Manager) addRoute(size uint64, sizeMatched bool) addRoute {
	mode := m.Mode()
	if mode == Dedicated || m.aboveLargestPage(size) {
		return addRoute{dedicated: true}
	}
	return addRoute{
		persistentHeld: mode == Persistent || m.cfg.Persistent == SizeMatch,
		persistentNew:  mode == Persistent || sizeMatched,
	}
}

// ErrOwnSizeTried is ReserveExact's answer for a size whose latest
// reservation already asked the storage for a page of exactly its own
// effective size and was refused (the adaptive arena on whole pages, pool
// PL30): a dedicated allocation of that size would be the same request
// refused again.
var ErrOwnSizeTried = errors.New("memory: own-size storage already tried")

// ownSizeTried reports that the latest reservation of size, in the current
// mode, already asked the storage for exactly size's effective bytes and
// was refused: the adaptive arena's route on whole pages, where a refused
// page is asked again at the request's size (Arena.RefusedOwnSize). A size
// whose own-size page would be the larger smallest page, or that found the
// arena's page sizes exhausted, never asked those bytes: it gets its
// dedicated try.
func (m *Manager) ownSizeTried(size uint64) bool { return m.ownSizeTriedIn(nil, nil, size) }

// ownSizeTriedIn is ownSizeTried in a dry run's view v, after its latest
// reservation last (nil, nil: as it is).
func (m *Manager) ownSizeTriedIn(v *pool.View, last *pool.Would, size uint64) bool {
	mode := m.Mode()
	if mode == Dedicated || mode == Persistent || m.aboveLargestPage(size) || m.granule > 0 {
		return false
	}
	if m.cfg.Persistent == SizeMatch && m.persistent.HasSizeIn(v, size) {
		return false
	}
	a, ok := m.dynamic.(*AdaptiveMemory)
	if !ok || !a.routesToArena(size) {
		return false
	}
	if last != nil {
		return a.arena.RefusedOwnSizeIn(*last, size)
	}
	return a.arena.RefusedOwnSize(size)
}

// ReserveExact serves size from storage of its own size (the direct pool,
// as a dedicated buffer), for a reservation the device's make-room stages
// could not serve: the page the dynamic memory needed does not fit what
// the device has left, the exact size may. The storage's refusal is
// returned as it is. On error nothing changed (M2).
func (m *Manager) ReserveExact(size uint64) (*handle.Handle, error) {
	if m.ownSizeTried(size) {
		return nil, errOwnSizeTried(size)
	}
	m.debug("dedicated (fallback)", size)
	h, err := m.dedicated.AllocMayRelease(m.st, size, true, m.g)
	if invariantsOn {
		m.checkInvariants("ReserveExact")
	}
	return h, err
}

// errOwnSizeTried is ReserveExact's refusal of size (and its dry run's).
func errOwnSizeTried(size uint64) error {
	return fmt.Errorf("%w: the arena already asked for a page of the %d bytes' own size", ErrOwnSizeTried, size)
}

// aboveLargestPage reports whether size is larger than any page the
// memory makes (Properties.MaxPageSize): such an allocation gets storage of
// its own, as a dedicated buffer does, instead of ErrBufferTooBig. The max
// page is a pooling choice (a quarter of the host's capacity, say), not a
// bound on what the device can hold, and a runtime that needs one buffer
// larger than a page must get it whenever the device has the bytes, as
// PyTorch serves any size that fits. The storage still refuses what it
// cannot allocate (storage.ErrOutOfMemory, naming the capacity).
func (m *Manager) aboveLargestPage(size uint64) bool { return size > m.largestPage }

// reserveHeld is a Forbidden reservation: room already held, handed to
// to, or nil.
func (m *Manager) reserveHeld(size uint64, to pool.Bind) *handle.Handle {
	switch m.heldRoute(size) {
	case heldDedicated:
		return m.dedicated.TryReserve(m.st, size, m.g, to)
	case heldPersistent:
		return m.persistent.TryReserve(m.st, size, m.g, to)
	case heldSizeMatch:
		if h := m.persistent.TryReserve(m.st, size, m.g, to); h != nil {
			return h
		}
	}
	return m.dynamic.TryReserve(m.st, size, to)
}

// heldRoute is where reserveHeld looks for room (design §6.3): the
// dedicated pool (a Dedicated window, or a size above the largest page),
// the persistent pool (a Persistent window), the persistent pool then the
// dynamic memory (SizeMatch), or the dynamic memory. A reservation and its
// dry run both read it.
type heldRoute uint8

const (
	heldDynamic heldRoute = iota
	heldDedicated
	heldPersistent
	heldSizeMatch
)

func (m *Manager) heldRoute(size uint64) heldRoute {
	if m.aboveLargestPage(size) {
		return heldDedicated
	}
	switch m.Mode() {
	case Dedicated:
		return heldDedicated
	case Persistent:
		return heldPersistent
	}
	if m.cfg.Persistent == SizeMatch {
		return heldSizeMatch
	}
	return heldDynamic
}

func (m *Manager) debug(route string, size uint64) {
	if m.cfg.LogLevel >= LogFull {
		m.log.Debug("gpumem: reservation", "stream", m.name, "route", route, "size", size)
	}
}

// Bind hands the slice reserved (a handle Reserve returned) to the
// allocation of assigned: assigned takes the slice's location, the slice's
// taint is cleared, the slice holds a clone of assigned, and its cursor is
// set. The caller releases reserved afterwards; its descriptor is stale.
func (m *Manager) Bind(reserved, assigned *handle.Handle, cursor uint64) error {
	if assigned.Location().Placed() {
		return fmt.Errorf("%w: allocation %d is already at %v", ErrAlreadyPlaced, assigned.ID(), assigned.Location())
	}
	s, err := m.FindAt(reserved.Location(), reserved)
	if err != nil {
		return err
	}
	s.Rebind(assigned, cursor, m.g)
	if invariantsOn {
		m.checkInvariants("Bind")
	}
	return nil
}

// pool routes a pool index.
func (m *Manager) pool(index uint8) pool.Pool {
	switch index {
	case PersistentIndex:
		return m.persistent
	case DedicatedIndex:
		return m.dedicated
	}
	return m.dynamic.Pool(index)
}

// Find returns the slice ref's allocation lives on, or ErrNotFound: never
// placed, no slice at its location, or the slice belongs to another
// allocation (M3).
func (m *Manager) Find(ref handle.Ref) (*pool.Slice, error) {
	return m.FindAt(ref.Descriptor().Location(), ref)
}

// FindAt is Find at an explicit location (guard lookup, tests).
func (m *Manager) FindAt(loc handle.Location, ref handle.Ref) (*pool.Slice, error) {
	d := ref.Descriptor()
	if !loc.Placed() {
		return nil, fmt.Errorf("%w: allocation %d was never placed", handle.ErrNotFound, d.ID())
	}
	p := m.pool(loc.Pool())
	if p == nil {
		return nil, fmt.Errorf("%w: allocation %d: no pool %d at %v", handle.ErrNotFound, d.ID(), loc.Pool(), loc)
	}
	s := p.Slice(loc)
	if s == nil {
		return nil, fmt.Errorf("%w: allocation %d: no slice at %v", handle.ErrNotFound, d.ID(), loc)
	}
	if s.Handle().Descriptor() != d {
		return nil, fmt.Errorf("%w: allocation %d: %v points to a different allocation", handle.ErrNotFound, d.ID(), loc)
	}
	return s, nil
}

// Resolve returns the bytes (or device address) ref's allocation occupies.
func (m *Manager) Resolve(ref handle.Ref) (storage.Resource, error) {
	s, err := m.Find(ref)
	if err != nil {
		return storage.Resource{}, err
	}
	return m.st.Resolve(s.Region)
}

// Cursor returns the cursor stored with ref's allocation.
func (m *Manager) Cursor(ref handle.Ref) (uint64, error) {
	s, err := m.Find(ref)
	if err != nil {
		return 0, err
	}
	return s.Cursor, nil
}

// SetCursor stores a cursor with ref's allocation.
func (m *Manager) SetCursor(ref handle.Ref, c uint64) error {
	s, err := m.Find(ref)
	if err != nil {
		return err
	}
	s.Cursor = c
	return nil
}

// Guard freezes the page (or allocation) at loc; false when there is none.
func (m *Manager) Guard(loc handle.Location) (*pool.PageGuard, bool) {
	if !loc.Placed() {
		return nil, false
	}
	p := m.pool(loc.Pool())
	if p == nil {
		return nil, false
	}
	g, ok := p.Guard(loc)
	if !ok {
		return nil, false
	}
	m.guards++
	g.OnRelease(func() { m.guards-- })
	return g, true
}

// GuardsWholePage reports whether a guard at loc holds loc's whole page
// (the pools that carve pages into slices) rather than one allocation (the
// dedicated, exclusive and persistent pools, whose guard binds the
// allocation itself): only then can room freed on the page be kept from
// new use by guarding the page.
func (m *Manager) GuardsWholePage(loc handle.Location) bool {
	if !loc.Placed() {
		return false
	}
	_, ok := m.pool(loc.Pool()).(*pool.Sliced)
	return ok
}

// HoldFree binds the free parts of region on the page at loc (a sliced
// pool's), carving them into slices of their own (pool.Sliced.HoldFree):
// room a sealed graph writes though no buffer owns it.
func (m *Manager) HoldFree(loc handle.Location, region storage.Region) ([]*handle.Binding, error) {
	p, ok := m.pool(loc.Pool()).(*pool.Sliced)
	if !ok {
		return nil, fmt.Errorf("memory: pool %d does not carve pages", loc.Pool())
	}
	held, err := p.HoldFree(m.st, loc.Page(), region)
	if invariantsOn {
		m.checkInvariants("HoldFree")
	}
	return held, err
}

// Guards counts the live guards this memory handed out.
func (m *Manager) Guards() int { return m.guards }

// BytesAllocated is the bytes the storage holds from the device.
func (m *Manager) BytesAllocated() uint64 { return m.st.BytesAllocated() }

// RelocationNeed says whether the dynamic memory wants a relocation.
func (m *Manager) RelocationNeed() relocation.Need {
	if m.relocating == nil {
		return relocation.Need{}
	}
	return m.relocating.RelocationNeed()
}

// HasOutdated reports whether a growth left pages behind.
func (m *Manager) HasOutdated() bool { return m.relocating != nil && m.relocating.HasOutdated() }

// Relocate moves what outdated pages hold, through q.
func (m *Manager) Relocate(q relocation.CopyQueue, reason relocation.Reason) relocation.Outcome {
	if m.relocating == nil {
		return relocation.Outcome{Kind: relocation.NothingToMove}
	}
	out := m.relocating.Relocate(m.st, q, reason)
	if invariantsOn {
		m.checkInvariants("Relocate")
	}
	return out
}

// CanCompact reports whether a compaction might give a current page back;
// underPressure: one with a goal (make-room), where a page may be repacked.
func (m *Manager) CanCompact(underPressure bool) bool {
	return m.relocating != nil && m.relocating.CanCompact(underPressure)
}

// Compact empties the sparsest current pages into the room of the others,
// within lim, through q, and gives the emptied pages back (design §7.7).
func (m *Manager) Compact(q relocation.CopyQueue, lim pool.CompactLimits) relocation.Outcome {
	if m.relocating == nil {
		return relocation.Outcome{Kind: relocation.NothingToMove}
	}
	out := m.relocating.Compact(m.st, q, lim)
	if invariantsOn {
		m.checkInvariants("Compact")
	}
	return out
}

// CanMakeHole reports whether a compaction might make room for a
// reservation of size without a new page.
func (m *Manager) CanMakeHole(size uint64) bool {
	return m.relocating != nil && m.relocating.CanMakeHole(size)
}

// MakeHole moves allocations so that a reservation of size finds room
// without a new page, within lim, through q (design §7.7).
func (m *Manager) MakeHole(q relocation.CopyQueue, size uint64, lim pool.CompactLimits) relocation.Outcome {
	if m.relocating == nil {
		return relocation.Outcome{Kind: relocation.NothingToMove}
	}
	out := m.relocating.MakeHole(m.st, q, size, lim)
	if invariantsOn {
		m.checkInvariants("MakeHole")
	}
	return out
}

// YieldKeptRoom lets a reservation of size that nothing else made room for
// take room the arena keeps for a staple size (pool PL37's last step,
// Arena.YieldKeptRoom): true when a page yielded its room, so that the
// reservation retried takes it. Only where size would be served by the
// adaptive memory's arena.
func (m *Manager) YieldKeptRoom(size uint64) bool {
	a, ok := m.keptRoomArena(size, nil)
	return ok && a.arena.YieldKeptRoom(size, m.g)
}

// keptRoomArena is the adaptive memory whose arena a reservation of size
// would be carved from (nil v: as it is), if any, on storage that backs
// pages whole: granular pages keep no room (PL37), and their pools keep no
// run index to look in.
func (m *Manager) keptRoomArena(size uint64, v *pool.View) (*AdaptiveMemory, bool) {
	a, ok := m.dynamic.(*AdaptiveMemory)
	if !ok || a.granule > 0 || !a.routesToArena(size) {
		return nil, false
	}
	r := m.addRoute(size, m.cfg.Persistent == SizeMatch && m.persistent.HasSizeIn(v, size))
	return a, !r.dedicated && !r.persistentNew
}

// Cleanup gives back what each pool's policy allows (design §6.4): persistent,
// then dedicated (every free dedicated buffer goes back at once), then the
// dynamic memory; Explicit flushes the storage. Renumbering rewrites
// descriptors, so held handles and bindings survive it.
func (m *Manager) Cleanup(kind pool.CleanupKind) {
	m.cleanup(kind)
	if invariantsOn {
		if kind == pool.Periodic {
			m.checkInvariants("Periodic cleanup") // one per Allow reservation: routine
		} else {
			m.checkInvariants("Cleanup")
		}
	}
}

func (m *Manager) cleanup(kind pool.CleanupKind) {
	if kind == pool.Explicit && m.cfg.LogLevel >= LogBasic {
		m.log.Info("gpumem: explicit cleanup", "stream", m.name)
	}
	if kind == pool.Explicit { // a periodic one gives nothing back (PL23): skipped on every Allow reservation
		m.persistent.Cleanup(m.st, m.allocNr, kind, m.g)
	}
	if m.dedicated.Reclaim(m.st, m.g) {
		m.st.Flush()
	}
	m.dynamic.Cleanup(m.st, m.allocNr, kind)
	if kind == pool.Explicit {
		// The sliced pools' explicit cleanup unmapped their free granules.
		m.st.Flush()
		return
	}
	if m.granule > 0 && m.underPressure() {
		if u, ok := m.dynamic.(GranuleUnmapper); ok {
			if n := u.UnmapFree(m.st); n > 0 {
				m.unmapped += n
				m.st.Flush()
			}
		}
	}
}

// underPressure judges this memory's mapped bytes (design §6.4): the
// granules of the largest reservation the arena served, mapped once more,
// would leave the device less than that again, so a periodic cleanup
// unmaps free granules. The margin is what a next reservation is known to
// ask, not the arena's page: on granular storage the page is the largest
// (pool PL31), a quarter of the device on the cuda backend, and a margin
// that large would unmap on every reservation once the device is half
// full, leaving nothing cached. Unmapping moves no slice, so
// anticipating pressure here cannot change where a later allocation lands;
// relocation, which would, never anticipates it (design §8.1). A
// memory without a MaxMemory figure is never under pressure. The rule
// judges this stream's storage only; the device's other streams are not
// seen from here.
func (m *Manager) underPressure() bool { return m.underPressureAt(m.st.BytesAllocated()) }

// underPressureAt is underPressure for a storage holding allocated bytes
// (a dry run's figure, pool.Dry.Allocated).
func (m *Manager) underPressureAt(allocated uint64) bool {
	capacity := m.props.MaxMemory
	if capacity == 0 {
		return false
	}
	page := m.granule
	if a, ok := m.dynamic.(*AdaptiveMemory); ok {
		page = max(page, storage.RoundUp(a.arena.LargestServed(), m.granule))
	}
	return storage.SatAdd(allocated, page) > storage.SatSub(capacity, page)
}

// Granule is the mapping granule of the storage the pools use: 0 when pages
// are backed whole (a plain storage, or Config.PageGranular off).
func (m *Manager) Granule() uint64 { return m.granule }

// Report describes every pool.
func (m *Manager) Report() PoolsReport {
	return PoolsReport{Dynamic: m.dynamic.Report(), Persistent: m.persistent.Report(), Dedicated: m.dedicated.Report()}
}

// Growths counts the arena's growths (0 for a memory without an arena):
// cheap, for a caller that compares it around one reservation.
func (m *Manager) Growths() uint64 {
	if m.relocating == nil {
		return 0
	}
	return m.relocating.Growths()
}

// Stats returns the manager's counters.
func (m *Manager) Stats() Stats {
	st := Stats{AllocNr: m.allocNr, BytesUnmapped: m.unmapped}
	if a, ok := m.dynamic.(*AdaptiveMemory); ok {
		st.OwnSizePages = a.OwnSizePages()
	}
	if m.relocating != nil {
		st.Growths, st.Relocation = m.relocating.Growths(), m.relocating.RelocationStats()
	}
	return st
}

// Taint returns the failure marks of ref's bytes (nil: none), or an error
// when ref does not resolve.
func (m *Manager) Taint(ref handle.Ref) (*handle.Taint, error) {
	s, err := m.Find(ref)
	if err != nil {
		return nil, err
	}
	return s.Taint(), nil
}

// MarkFailure marks [off, off+size) of ref's bytes as left unwritten by f.
func (m *Manager) MarkFailure(ref handle.Ref, f handle.FailureID, off, size uint64) error {
	s, err := m.Find(ref)
	if err != nil {
		return err
	}
	t := s.Taint()
	if t == nil {
		t = &handle.Taint{}
	}
	t.Mark(m.g, f, off, size)
	if t.Empty() {
		t = nil
	}
	s.SetTaint(t)
	return nil
}

// ReleaseMarks clears the marks on [off, off+size) of ref's bytes: a
// successful write covered them.
func (m *Manager) ReleaseMarks(ref handle.Ref, off, size uint64) error {
	s, err := m.Find(ref)
	if err != nil {
		return err
	}
	if t := s.Taint(); t != nil {
		t.Release(m.g, off, size)
		if t.Empty() {
			s.SetTaint(nil)
		}
	}
	return nil
}

// FindFailure returns the first failure marking [off, off+size) of ref's
// bytes.
func (m *Manager) FindFailure(ref handle.Ref, off, size uint64) (handle.FailureID, bool, error) {
	s, err := m.Find(ref)
	if err != nil {
		return 0, false, err
	}
	f, ok := s.Taint().Find(off, size)
	return f, ok, nil
}
