package pool

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// Arena constants (design §6.6).
const (
	// ArenaSlots is the number of page sizes an arena holds at once.
	ArenaSlots = 64
	// ArenaFirstIndex is the pool index of arena slot 0; slot k is index
	// ArenaFirstIndex+k.
	ArenaFirstIndex = 2
	// MinPage is the arena's floor page size: small enough for a modest
	// workload, large enough that mid-sized allocations share pages.
	MinPage = 2 << 20
)

// PageSizing bounds the arena's page sizes.
type PageSizing struct {
	Min, Max uint64
	Align    uint64
}

// NewPageSizing derives the sizing from the device's largest page and the
// alignment: Max = the largest page rounded down to the alignment (at least
// one alignment unit), Min = the 2 MiB floor rounded up, capped at Max.
func NewPageSizing(deviceMaxPage, align uint64) PageSizing {
	if align == 0 {
		align = storage.DefaultAlignment
	}
	maxPage := max(align, deviceMaxPage/align*align)
	minPage := min(maxPage, storage.RoundUp(max(MinPage, align), align))
	return PageSizing{Min: minPage, Max: maxPage, Align: align}
}

// FitKind is the answer of Fit.
type FitKind uint8

const (
	// Fits: the allocation fits the current page size.
	Fits FitKind = iota
	// Grow: the arena must grow to a bigger page size.
	Grow
	// TooLarge: no page size the device allows holds it.
	TooLarge
)

// Fit says whether size fits pageSize, needs a growth, or is too large for
// any page. For a growth it returns the smallest page size one may take:
// the effective size rounded up to TileStep and the alignment, within [Min,
// Max]; the growth picks from there (Arena.grow, tiling.go).
func (s PageSizing) Fit(size, pageSize uint64) (FitKind, uint64) {
	_, need := padded(size, s.Align)
	switch {
	case need <= pageSize:
		return Fits, pageSize
	case need > s.Max:
		return TooLarge, 0
	}
	return Grow, s.clamp(ceilTo(need, TileStep))
}

// clamp rounds a page size up to the alignment and into [Min, Max].
func (s PageSizing) clamp(page uint64) uint64 {
	return min(max(ceilTo(page, s.Align), s.Min), s.Max)
}

// Arena is the adaptive memory's growing set of sliced pools
// (PL25–PL28 in the package doc).
//
// The arena holds up to ArenaSlots sliced pools (slots), one per page size.
// One is current: only it serves reservations. When an allocation does not
// fit the current page size the arena grows: a new pool with bigger pages
// takes the lowest empty slot and becomes current, and the previous one
// becomes outdated. Growth never releases anything.
//
// A long-lived allocation (a cache made early) can pin an outdated page for
// the life of the process. Relocation exists to move it: Plan and Commit
// (plan.go) move live allocations off outdated pages onto the current pool.
//
// Fit uses the effective size (size + padding): a request whose padded size
// exceeds the page would not fit even though its requested size does.
type Arena struct {
	sizing   PageSizing
	lim      Limits
	log      *slog.Logger
	slots    [ArenaSlots]*Sliced
	current  int
	outdated []int // slots in growth order
	growths  uint64
	// served summarises the sizes reservations took from the arena (not
	// relocation targets: a move is no new demand); a growth reads it.
	served servedSizes
	// ownSizePages counts the pages taken at a reservation's own size
	// after the storage refused the pool's page (PL30); largeOwnPages
	// those taken by PL32's rule (ownPageFor) before any refusal.
	ownSizePages  uint64
	largeOwnPages uint64
	// largest is the largest effective size recorded (LargestServed).
	largest uint64
	// refusedOwn is the effective size of the own-size page the storage
	// refused in the arena's latest reservation (0: none was refused), so
	// that a caller about to ask the storage for that same size knows the
	// answer (RefusedOwnSize).
	refusedOwn uint64
}

// NewArena returns an arena whose slot 0 is current, with page size Min and
// no pages.
func NewArena(sizing PageSizing, lim Limits, log *slog.Logger) *Arena {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Arena{sizing: sizing, lim: lim, log: log}
	a.slots[0] = a.newPool(0, sizing.Min)
	return a
}

// allocPage adds a page of p's size holding size to p, or, where pages are
// backed whole and the storage refuses that page for want of memory, a page
// of size's own effective size (at least Min) instead (PL30). A page larger
// than its reservation is room kept for later ones, worth it while the
// device has the bytes, and the one thing standing between the reservation
// and the device once it has not: there the page holds what it must, as
// PyTorch's segment of a large allocation's size does. Only a refusal
// decides, so a device with the bytes for every page runs exactly as
// without the rule (at a capacity at or above a trace's unlimited peak
// nothing changes), and the refusal is the device's own, every stream's
// storage counted. Granular storage is not asked again: it maps only the
// granules a slice uses, the same on a page of any size, so the smaller
// page would be refused for the same granules. When both pages
// are refused the own-size page's error is returned: what the device lacks
// for the smallest page that could serve size, which is what make-room's
// stages must free. Before all that, on whole pages, a reservation that
// needs more than half of p's page, or more than an eighth of it in a size
// that does not tile it, gets a page of its own size (PL32, ownPageFor); if
// the storage refuses it, the rest runs as written.
func (a *Arena) allocPage(st storage.Storage, p *Sliced, size uint64) (*handle.Handle, error) {
	var h *handle.Handle
	kind, refused, err := a.pageTries(storage.GranuleOf(st), p, size, func(bytes uint64) error {
		var err error
		h, err = p.allocSized(st, size, bytes)
		return err
	})
	if refused != 0 {
		a.refusedOwn = refused
	}
	if err != nil {
		return nil, err
	}
	switch kind {
	case ownLargePage:
		a.largeOwnPages++
	case ownRefusedPage:
		a.ownSizePages++
	}
	return h, nil
}

// pageKind is which of allocPage's pages was granted.
type pageKind uint8

const (
	poolPage       pageKind = iota // a page of the pool's size
	ownLargePage                   // PL32's page of the reservation's own size
	ownRefusedPage                 // PL30's page of its own size, after a refusal
	staplePage                     // PL36's page tiled by a staple size
)

// pageTries is allocPage's sequence of page requests for a reservation of
// size on p, on storage of mapping granule granule, written once for the
// reservation (try adds the page) and its dry run (try asks a Dry
// storage): PL32's own-size page, then the pool's page, then (whole pages,
// a refusal for want of memory) PL30's own-size page. try(bytes) asks for
// a page of bytes; the sequence stops at the first granted. It returns
// which was granted, and, when the storage refused a page of the
// reservation's exact effective size, that size (Arena.refusedOwn).
func (a *Arena) pageTries(granule uint64, p *Sliced, size uint64, try func(bytes uint64) error) (kind pageKind, refusedOwn uint64, err error) {
	if own, ok := a.ownPageFor(granule, p, size); ok {
		if try(own) == nil {
			return ownLargePage, 0, nil
		}
		// Refused: the pool's page is asked as before (and PL30 after it),
		// so a refusal here changes nothing.
	} else if tiled, ok := a.stapleTiledPage(granule, p, size); ok {
		if try(tiled) == nil {
			return staplePage, 0, nil
		}
		// Refused: as PL32's, the pool's page and PL30 are asked as before.
	}
	err = try(p.pageSize)
	if err == nil || !errors.Is(err, storage.ErrOutOfMemory) || storage.IsDevicePoisoned(err) || granule > 0 {
		return poolPage, 0, err
	}
	_, need := padded(size, a.sizing.Align)
	own := max(need, a.sizing.Min)
	if own >= p.pageSize {
		if need == p.pageSize {
			refusedOwn = need // the page refused was exactly its own size
		}
		return poolPage, refusedOwn, err
	}
	err = try(own)
	if errors.Is(err, storage.ErrOutOfMemory) {
		refusedOwn = own
	}
	return ownRefusedPage, refusedOwn, err
}

// ownPageFor is PL32: on storage that backs pages whole, the page a
// reservation of size gets instead of one of p's size: its effective size
// rounded up to TileStep (the 2 MiB a driver rounds a large allocation to
// anyway) and clamped to [Min, Max]; false when that is not smaller than
// p's page. A reservation gets one
//   - when it needs more than half of p's page: no second reservation that
//     large could share the page, so the rest of it would hold only smaller
//     ones, and hold them whether or not any come; PyTorch gives such a
//     request (above 10 MiB) a segment of its own size for the same reason;
//   - when it needs more than an eighth (ownPageShareDiv) and k reservations
//     of its size, as many as fit p's page, would leave a tail that wastes
//     more per reservation (tail/k) than the own-size page's rounding
//     (own-need: under 2 MiB above Min). Sizes that tile the page (a transformer's
//     activations, powers of two) keep sharing it; sizes that do not (the
//     random large buffers of a growing or churning workload) stop pinning
//     pages whose rest no later reservation of theirs can use.
//
// Smaller reservations always share: at eight or more to a page the tail
// spread over them is under an eighth of one, and own-size pages for all of
// them cost more than they save, since a transformer's tiling activations
// on pages of their own multiply the pages a compaction must empty
// (docs/decisions/2026-12-03-own-size-page-non-tiling.md). The own-size
// page is an ordinary page of p, as PL30's: once its reservation is freed
// it serves whatever it holds. The rule reads only the size and the page
// size, never the device's free memory, so a run below a trace's unlimited
// peak places every buffer as the unlimited run does until the first
// refusal (the do-no-harm test's first property), unlike an own-size page
// ahead of pressure, which changes placement before anything fails
// (docs/decisions/2026-12-02-own-size-page-on-refusal.md).
func (a *Arena) ownPageFor(granule uint64, p *Sliced, size uint64) (uint64, bool) {
	if granule > 0 {
		return 0, false // a page is address space: the granules cost the same on any page
	}
	_, need := padded(size, a.sizing.Align)
	own := a.sizing.clamp(ceilTo(need, TileStep))
	switch {
	case own >= p.pageSize:
		return 0, false
	case need > p.pageSize/2:
		return own, true
	case need <= p.pageSize/ownPageShareDiv:
		return 0, false
	}
	fit := p.pageSize / need
	tail := p.pageSize - fit*need
	return own, tail/fit > own-need
}

// ownPageShareDiv bounds PL32's tiling test from below: a reservation that
// needs at most 1/ownPageShareDiv of the pool's page always shares it.
// Four left more traces above the torch model and sixteen gained nothing
// (docs/decisions/2026-12-03-own-size-page-non-tiling.md).
const ownPageShareDiv = 8

// RefusedOwnSize reports that the arena's latest reservation was of size and
// the storage refused its page at size's own effective size (PL30): asking
// the storage for those bytes again, as a dedicated allocation, would be the
// same request refused. Not so when the own-size page was larger than size
// (the smallest page is Min), when none was asked (the pool's page was no
// larger, or the growth found no slot), or on granular storage.
func (a *Arena) RefusedOwnSize(size uint64) bool { return a.refusedOwnOf(a.refusedOwn, size) }

// RefusedOwnSizeIn is RefusedOwnSize after a dry run's reservation w.
func (a *Arena) RefusedOwnSizeIn(w Would, size uint64) bool {
	return a.refusedOwnOf(w.RefusedOwn, size)
}

func (a *Arena) refusedOwnOf(refused, size uint64) bool {
	_, need := padded(size, a.sizing.Align)
	return refused != 0 && refused == need
}

func (a *Arena) newPool(slot int, pageSize uint64) *Sliced {
	p := NewSliced(pageSize, pageSize, false, a.sizing.Align, uint8(ArenaFirstIndex+slot), a.lim)
	p.tightest = true         // PL33
	p.arenaServed = &a.served // PL37
	return p
}

// Sizing returns the arena's page sizing.
func (a *Arena) Sizing() PageSizing { return a.sizing }

// Current returns the current pool.
func (a *Arena) Current() *Sliced { return a.slots[a.current] }

// PageSize is the current page size.
func (a *Arena) PageSize() uint64 { return a.Current().pageSize }

// OwnSizePages counts the pages taken at a reservation's own size because
// the storage refused the pool's page (PL30).
func (a *Arena) OwnSizePages() uint64 { return a.ownSizePages }

// LargeOwnSizePages counts the pages taken at a reservation's own size by
// PL32 (ownPageFor): more than half of the pool's page, or more than an
// eighth in a size that does not tile it.
func (a *Arena) LargeOwnSizePages() uint64 { return a.largeOwnPages }

// Growths counts growths so far.
func (a *Arena) Growths() uint64 { return a.growths }

// Pool returns the pool at a pool index, or nil.
func (a *Arena) Pool(index uint8) *Sliced {
	slot := int(index) - ArenaFirstIndex
	if slot < 0 || slot >= ArenaSlots {
		return nil
	}
	return a.slots[slot]
}

// Accept reports whether some page size the device allows holds size.
func (a *Arena) Accept(size uint64) bool {
	k, _ := a.sizing.Fit(size, a.PageSize())
	return k != TooLarge
}

// Reserve serves size: from the current pool when it fits (held room
// first, handed to to; else a new page), by growing when it does not;
// TooLarge → ErrBufferTooBig, nothing changed. A new page or a growth
// returns the reservation's clone whatever to says, for the caller to bind.
func (a *Arena) Reserve(st storage.Storage, size uint64, g *handle.ErrorGraph, to Bind) (*handle.Handle, error) {
	a.refusedOwn = 0
	kind, grown := a.sizing.Fit(size, a.PageSize())
	switch kind {
	case TooLarge:
		return nil, a.errTooLarge(size)
	case Grow:
		return a.grow(st, size, grown)
	}
	cur := a.Current()
	h := cur.TryReserve(st, size, g, to)
	if h == nil {
		var err error
		if h, err = a.allocPage(st, cur, size); err != nil {
			return nil, err
		}
	}
	a.record(size)
	return h, nil
}

// record counts a reservation of size in the served-size summary.
func (a *Arena) record(size uint64) {
	_, need := padded(size, a.sizing.Align)
	a.served.record(need)
	a.largest = max(a.largest, need)
}

// LargestServed is the largest effective size a reservation took from the
// arena (relocation targets not counted): the most a next reservation is
// known to ask, which the granule-unmapping pressure rule keeps room for
// (design §6.4).
func (a *Arena) LargestServed() uint64 { return a.largest }

// TryReserve serves size from room the current pool already holds, handed
// to to, or nil.
func (a *Arena) TryReserve(st storage.Storage, size uint64, g *handle.ErrorGraph, to Bind) *handle.Handle {
	if kind, _ := a.sizing.Fit(size, a.PageSize()); kind != Fits {
		return nil
	}
	h := a.Current().TryReserve(st, size, g, to)
	if h != nil {
		a.record(size)
	}
	return h
}

// errTooLarge is Reserve's refusal of a size no page size holds.
func (a *Arena) errTooLarge(size uint64) error {
	return fmt.Errorf("%w: %d bytes exceed the largest page size of %d bytes (raise the max page size)", ErrBufferTooBig, size, a.sizing.Max)
}

// grow builds the next current pool in the lowest empty slot, with its first
// page holding size, before switching (PL28), as growth lays out.
func (a *Arena) grow(st storage.Storage, size, smallest uint64) (*handle.Handle, error) {
	var h *handle.Handle
	p, slot, err := a.growth(storage.GranuleOf(st), size, smallest,
		func() uint64 { return a.Usage().BytesOccupied() },
		func(i int) bool { return a.slots[i] == nil },
		func(p *Sliced) error {
			var err error
			h, err = a.allocPage(st, p, size)
			return err
		})
	if err != nil {
		return nil, err
	}
	a.slots[slot] = p
	a.outdated = append(a.outdated, a.current)
	a.current = slot
	a.growths++
	a.record(size)
	a.log.Info("gpumem: arena grew", "page_size", p.pageSize, "slot", slot, "outdated_pools", len(a.outdated))
	return h, nil
}

// growth is a growth's sequence, written once for the growth (try adds
// the new pool's first page, holding size) and its dry run: the page size
// (growthPageSize: the largest page on granular storage, PL31, else what
// tiles the arena's served sizes, from Fit's smallest up, for the bytes
// occupied says the arena holds, a scan skipped when the history is too
// thin to tile: growths are rare), the lowest slot empty says is empty
// (none: ErrPageSizesExhausted), a new pool there, and on granular storage
// a refused largest page asked again at the tiled size. It returns the
// pool try succeeded on and its slot.
func (a *Arena) growth(granule, size, smallest uint64, occupied func() uint64, empty func(slot int) bool, try func(p *Sliced) error) (*Sliced, int, error) {
	pageSize := a.growthPageSize(granule, size, smallest, occupied)
	slot := -1
	for i := range a.slots {
		if empty(i) {
			slot = i
			break
		}
	}
	if slot < 0 {
		return nil, -1, fmt.Errorf("%w: growing to %d-byte pages for a %d-byte allocation needs a slot, all %d hold a pool", ErrPageSizesExhausted, pageSize, size, ArenaSlots)
	}
	p := a.newPool(slot, pageSize)
	err := try(p)
	if err != nil && granule > 0 && errors.Is(err, storage.ErrOutOfMemory) && !storage.IsDevicePoisoned(err) {
		// The largest page's address space may be what was refused (a
		// host under strict overcommit counts a reservation in full): the
		// tiled size asks less of it.
		if tiled := a.tiledPageSize(size, smallest, occupied); tiled < pageSize {
			p = a.newPool(slot, tiled)
			err = try(p)
		}
	}
	if err != nil {
		return nil, -1, err
	}
	return p, slot, nil
}

// growthPageSize is the page size a growth for size takes (PL31): on
// granular storage the largest page, because a page is address space there
// and only the granules a slice uses are mapped, so a larger page costs
// nothing, while every page boundary costs a partly used granule and every
// further growth outdates a pool that must drain or be relocated off; on
// whole pages what the arena served tiles (tiling.go), from Fit's smallest
// up.
func (a *Arena) growthPageSize(granule, size, smallest uint64, occupied func() uint64) uint64 {
	if granule > 0 {
		return a.sizing.Max
	}
	return a.tiledPageSize(size, smallest, occupied)
}

// tiledPageSize is the page size that tiles what the arena served for a
// growth for size, from smallest up (tiling.go); occupied is the effective
// bytes the arena's slices take, asked only when the history is not thin.
func (a *Arena) tiledPageSize(size, smallest uint64, occupied func() uint64) uint64 {
	_, need := padded(size, a.sizing.Align)
	footprint := need
	if !a.served.thin(need) { // else tiled takes smallest: no scan
		// Effective bytes, as need and the served sizes are; slices
		// freed but still bound take room too.
		footprint = storage.SatAdd(occupied(), need)
	}
	return a.sizing.tiled(need, smallest, footprint, &a.served)
}

// Drain gives back every empty, unguarded page of the outdated pools and
// drops the pools left pageless (PL26). It returns the pages and bytes given
// back.
func (a *Arena) Drain(st storage.Storage, g *handle.ErrorGraph) (pages int, bytes uint64) {
	kept := a.outdated[:0]
	for _, slot := range a.outdated {
		p := a.slots[slot]
		n, b := p.ReleaseEmpty(st, g)
		pages += n
		bytes += b
		if len(p.pages) == 0 {
			a.slots[slot] = nil
			continue
		}
		kept = append(kept, slot)
	}
	clear(a.outdated[len(kept):])
	a.outdated = kept
	return pages, bytes
}

// Cleanup runs the current pool's cleanup, then Drain; an Explicit one
// also unmaps the free granules of the outdated pages that stay.
func (a *Arena) Cleanup(st storage.Storage, allocNr uint64, kind CleanupKind, g *handle.ErrorGraph) (pages int, bytes uint64) {
	a.Current().Cleanup(st, allocNr, kind, g)
	pages, bytes = a.Drain(st, g)
	if kind == Explicit {
		for _, slot := range a.outdated {
			a.slots[slot].UnmapFree(st)
		}
	}
	return pages, bytes
}

// UnmapFree unmaps the free granules of every unguarded page of every pool
// (PL7) and returns the bytes of pages they covered.
func (a *Arena) UnmapFree(st storage.Storage) uint64 {
	var bytes uint64
	for _, p := range a.slots {
		if p != nil {
			bytes += p.UnmapFree(st)
		}
	}
	return bytes
}

// HasOutdated reports whether an outdated pool exists.
func (a *Arena) HasOutdated() bool { return len(a.outdated) > 0 }

// Full reports whether every slot holds a pool.
func (a *Arena) Full() bool {
	for _, p := range a.slots {
		if p == nil {
			return false
		}
	}
	return true
}

// OutdatedPages counts the pages the outdated pools hold.
func (a *Arena) OutdatedPages() uint64 {
	var n uint64
	for _, slot := range a.outdated {
		n += uint64(len(a.slots[slot].pages))
	}
	return n
}

// State describes the arena for the relocation trigger.
func (a *Arena) State() relocation.ArenaState {
	shape := relocation.ArenaShape{
		CurrentPages:  uint64(len(a.Current().pages)),
		OutdatedPools: len(a.outdated),
	}
	for _, slot := range a.outdated {
		p := a.slots[slot]
		shape.OutdatedPages += uint64(len(p.pages))
		shape.OutdatedGuarded += p.guardedPages()
	}
	return relocation.ArenaState{
		HasOutdated: len(a.outdated) > 0,
		Full:        a.Full(),
		Shape:       shape,
	}
}

// Report returns the current pool as AdaptiveKind, then one SlicedKind
// report per outdated pool in growth order.
func (a *Arena) Report() []Report {
	cur := a.Current().Report()
	cur.Kind = AdaptiveKind{PageSize: a.PageSize(), OutdatedPages: a.OutdatedPages()}
	out := []Report{cur}
	for _, slot := range a.outdated {
		out = append(out, a.slots[slot].Report())
	}
	return out
}

// Usage sums every pool.
func (a *Arena) Usage() Usage {
	var u Usage
	for _, p := range a.slots {
		if p != nil {
			u = u.Combine(p.Usage())
		}
	}
	return u
}

// Check verifies PL25 and every pool's invariants (Sliced.Check); it panics
// when one is broken.
func (a *Arena) Check() {
	seen := map[int]bool{a.current: true}
	for _, slot := range a.outdated {
		if seen[slot] || a.slots[slot] == nil {
			panic(fmt.Sprintf("pool: arena slot %d listed twice or empty (PL25)", slot))
		}
		seen[slot] = true
	}
	for i, p := range a.slots {
		if p == nil {
			continue
		}
		if !seen[i] {
			panic(fmt.Sprintf("pool: arena slot %d holds a pool that is neither current nor outdated (PL25)", i))
		}
		p.Check()
	}
}
