package pool

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// Sliced is a pool of pages of one size carved into slices, first fit within
// a page; across pages first fit too, or the tightest page (PL33). The
// adaptive memory's small pool and every arena pool are Sliced.
type Sliced struct {
	pageSize uint64
	maxSlice uint64
	nearPage bool
	align    uint64
	index    uint8
	lim      Limits
	pages    []*page
	// changed is raised when a slice of any page may have become free (the
	// pages' signals forward to it), so ReleaseEmpty skips a pool on which
	// nothing was freed since it last looked.
	changed handle.Signal
	// reserveChanged is raised, like changed, whenever a page may have
	// gained free room (the pages' signals forward to it, and it to
	// changed); a reservation lowers it when it starts a full scan.
	// noFitAbove is, when noFitKnown and reserveChanged is lowered, a bound
	// on every unguarded page's largest free slice (PL29): the last full
	// scan found none larger, and nothing was freed, unguarded or added
	// since. A reservation needing more skips the scan, which on a pool of
	// hundreds of full pages was most of what a reservation cost.
	reserveChanged handle.Signal
	noFitAbove     uint64
	noFitKnown     bool
	// spares recycles the descriptors of free slices on every page (H6).
	spares    handle.Recycler
	pagesPeak uint64
	largest   uint64
	// tightest: reservations carve from the tightest page, not the first
	// with room (PL33, tightest.go); the arena's pools, not the small pool.
	tightest bool
	// arenaServed is the served-size summary of the pool's arena (nil outside
	// one), which PL37 reads to mark a page opened for a staple size
	// (staple.go).
	arenaServed *servedSizes
	runs        *runIndex // the free runs by size, built by the first tightest reservation (runs.go)
	busy        []bool    // scratch for unmapFree
}

// NewSliced returns an empty pool of pageSize pages serving slices up to
// maxSlice bytes (capped at pageSize); with nearPage it also serves a size
// that leaves less than 20 % of a page unused.
func NewSliced(pageSize, maxSlice uint64, nearPage bool, align uint64, index uint8, lim Limits) *Sliced {
	if align == 0 {
		align = storage.DefaultAlignment
	}
	p := &Sliced{pageSize: pageSize, maxSlice: min(maxSlice, pageSize), nearPage: nearPage, align: align, index: index, lim: lim}
	p.reserveChanged.Forward(&p.changed)
	return p
}

// nothingFits reports, without visiting a page, that no page can hold need
// effective bytes (PL29).
func (p *Sliced) nothingFits(need uint64) bool {
	return p.noFitKnown && !p.reserveChanged.Raised() && need > p.noFitAbove
}

// startScan begins a full scan of the pages for a reservation: from here
// on, a page gaining room raises reserveChanged again, and the old bound
// goes (a scan that fits carves, and only a failed one sees every page).
func (p *Sliced) startScan() {
	p.reserveChanged.Lower()
	p.noFitKnown = false
}

// scanFailed records a full scan that fitted nowhere: largest bounds every
// unguarded page's largest free slice, unless a page changed meanwhile.
func (p *Sliced) scanFailed(largest uint64) {
	p.noFitAbove, p.noFitKnown = largest, !p.reserveChanged.Raised()
}

// Index implements Pool.
func (p *Sliced) Index() uint8 { return p.index }

// PageSize is the size of the pool's pages: every page has it, except the
// arena's own-size pages (PL30), which are smaller.
func (p *Sliced) PageSize() uint64 { return p.pageSize }

// Pages is the number of pages held.
func (p *Sliced) Pages() int { return len(p.pages) }

// Accept implements Pool: size ≤ maxSlice, or near-page: size ≤ pageSize
// leaving less than a fifth of the page unused.
func (p *Sliced) Accept(size uint64) bool {
	if _, need := padded(size, p.align); need > p.pageSize {
		return false // with its padding it fits no page
	}
	if size <= p.maxSlice {
		return true
	}
	return p.nearPage && size <= p.pageSize && (p.pageSize-size)*5 < p.pageSize
}

// TryReserve implements Pool: pages in index order, skipping guarded ones;
// each visited page is coalesced, then tried; the first fit wins and is
// handed to to. On granular storage the fit's granules are mapped first; a
// page whose fit the storage refuses to map is passed over (a later page
// may fit on granules already mapped), so a refusal everywhere returns nil
// with nothing changed. A slice kept apart for a clone (the zero Bind) gets
// a descriptor of its page's own (coalesceFor's renew): the clone then
// costs no heap object.
func (p *Sliced) TryReserve(st storage.Storage, size uint64, g *handle.ErrorGraph, to Bind) *handle.Handle {
	_, need := padded(size, p.align) // every page has the pool's alignment
	if p.nothingFits(need) {
		return nil
	}
	p.startScan()
	renew := to.To == nil
	if pg, at, found, ok := p.tryReserveTightest(st, size, need, g, renew); ok {
		if !found {
			return nil
		}
		return to.take(&pg.slices[at], g)
	}
	var largest uint64
	for _, pg := range p.pages {
		if pg.guarded() {
			continue
		}
		pg.coalesceFor(g, need, renew)
		at, err := pg.reserveAt(st, 0, size)
		if at >= 0 {
			p.served(size)
			return to.take(&pg.slices[at], g)
		}
		if err != nil {
			// The run coalesceFor kept apart for this reservation stays
			// split: the next visit merges it (PL4's bound counts slices).
			pg.changed.Raise()
		}
		largest = max(largest, pg.maxFree)
	}
	p.scanFailed(largest)
	return nil
}

func (p *Sliced) served(size uint64) {
	p.largest = max(p.largest, size)
}

// Alloc implements Pool: one new page of pageSize, the reservation on it.
// The page-index bound is checked first; on error nothing changes. On
// granular storage the page is a reservation and only the new slice's
// granules are mapped; a refused mapping gives the page back and returns
// the storage's error.
func (p *Sliced) Alloc(st storage.Storage, size uint64) (*handle.Handle, error) {
	return p.allocSized(st, size, p.pageSize)
}

// allocSized is Alloc on a new page of pageBytes, capped at the pool's page
// size: the arena's own-size page under pressure (arena.go, PL30). Such a
// page is an ordinary page of the pool from then on: its room serves any
// reservation it holds, and it is released, relocated off and compacted as
// every other page, each of which reads its size from its region.
func (p *Sliced) allocSized(st storage.Storage, size, pageBytes uint64) (*handle.Handle, error) {
	pageBytes = min(pageBytes, p.pageSize)
	if _, need := padded(size, p.align); need > pageBytes {
		return nil, errPageTooSmall(size, need, pageBytes)
	}
	pg, err := p.addPage(st, pageBytes)
	if err != nil {
		return nil, err
	}
	h, err := pg.tryReserve(st, 0, size, Bind{}, nil)
	if err != nil {
		p.pages = p.pages[:len(p.pages)-1]
		pg.shed(nil)
		st.Dealloc(pg.region.ID)
		return nil, err
	}
	if h == nil {
		// size does not fit a fresh page: give it back, nothing changed.
		p.pages = p.pages[:len(p.pages)-1]
		pg.shed(nil)
		st.Dealloc(pg.region.ID)
		return nil, fmt.Errorf("%w: %d bytes (with padding) exceed the %d-byte page", ErrBufferTooBig, size, pageBytes)
	}
	p.served(size)
	_, need := padded(size, p.align)
	p.markKept(pg, need)
	p.pagesPeak = max(p.pagesPeak, uint64(len(p.pages)))
	return h, nil
}

// errPageTooSmall is allocSized's refusal of a size whose effective size
// need exceeds the page of pageBytes (a reservation and its dry run).
func errPageTooSmall(size, need, pageBytes uint64) error {
	return fmt.Errorf("%w: %d bytes (%d with padding) exceed the pool's %d-byte pages", ErrBufferTooBig, size, need, pageBytes)
}

// errTooManyPages is addPage's refusal when the pool holds n pages, the
// most a location (or Limits) can index.
func (p *Sliced) errTooManyPages(n int) error {
	return fmt.Errorf("%w: pool %d already holds %d pages, the most a location can index here", handle.ErrIndexOverflow, p.index, n)
}

// dropLastEmptyPage gives back the pool's last page, which must be empty:
// a page a compaction plan added (compactScope.repack) and then placed
// nothing on.
func (p *Sliced) dropLastEmptyPage(st storage.Storage, g *handle.ErrorGraph) {
	pg := p.pages[len(p.pages)-1]
	p.pages = p.pages[:len(p.pages)-1]
	pg.shed(g)
	st.Dealloc(pg.region.ID)
}

// addPage allocates and appends one page.
func (p *Sliced) addPage(st storage.Storage, pageBytes uint64) (*page, error) {
	n := len(p.pages)
	if n >= p.lim.maxPages() {
		return nil, p.errTooManyPages(n)
	}
	granule := storage.GranuleOf(st)
	var r storage.Region
	var err error
	if granule > 0 {
		r, err = st.(storage.Granular).Reserve(pageBytes)
	} else {
		r, err = st.Alloc(pageBytes)
	}
	if err != nil {
		return nil, err
	}
	pg := newPage(r, p.align, p.index, n, granule, &p.reserveChanged, &p.spares)
	p.pages = append(p.pages, pg)
	if p.runs != nil {
		p.runs.add(pg)
	}
	p.noFitKnown = false // PL29: a new page has room no scan has seen
	return pg, nil
}

// ReleaseEmpty coalesces every page and gives back each page that is empty
// and not guarded; survivors are renumbered densely in order (PL5), their
// descriptors rewritten (PL3), so held handles follow. It returns the pages
// and bytes given back.
func (p *Sliced) ReleaseEmpty(st storage.Storage, g *handle.ErrorGraph) (pages int, bytes uint64) {
	// Most calls release nothing (every Allow reservation drains the
	// outdated pools): skip a pool on which nothing became free, look
	// before rewriting the page list.
	if !p.changed.Raised() {
		return 0, 0
	}
	p.changed.Lower()
	first := -1
	for i, pg := range p.pages {
		pg.coalesce(g)
		if !pg.guarded() && pg.isEmpty() {
			first = i
			break
		}
	}
	if first < 0 {
		return 0, 0
	}
	out := first
	for _, pg := range p.pages[first:] {
		pg.coalesce(g)
		if !pg.guarded() && pg.isEmpty() {
			pages++
			bytes += pg.size()
			pg.shed(g)
			st.Dealloc(pg.region.ID)
			continue
		}
		pg.setIndex(out)
		p.pages[out] = pg
		out++
	}
	clear(p.pages[out:])
	p.pages = p.pages[:out]
	return pages, bytes
}

// Cleanup implements Pool: Periodic does nothing, Explicit releases empty
// unguarded pages and unmaps the free granules of the others.
func (p *Sliced) Cleanup(st storage.Storage, _ uint64, kind CleanupKind, g *handle.ErrorGraph) {
	if kind == Explicit {
		p.ReleaseEmpty(st, g)
		p.UnmapFree(st)
	}
}

// UnmapFree unmaps, on every unguarded page, the granules no live slice
// touches (PL7), and returns the bytes of pages they covered. Nothing
// changes on storage that backs pages whole. Call it only where pages may
// change: never while a stream records.
func (p *Sliced) UnmapFree(st storage.Storage) uint64 {
	var bytes uint64
	for _, pg := range p.pages {
		if pg.granule == 0 {
			continue
		}
		if len(p.busy) < len(pg.mapped) {
			p.busy = make([]bool, len(pg.mapped))
		}
		bytes += pg.unmapFree(st, p.busy)
	}
	return bytes
}

// Slice implements Pool.
func (p *Sliced) Slice(loc handle.Location) *Slice {
	if loc.Pool() != p.index || int64(loc.Page()) >= int64(len(p.pages)) {
		return nil
	}
	return p.pages[loc.Page()].slice(loc.Slice())
}

// Guard implements Pool: a page guard on loc's page, holding the whole page.
func (p *Sliced) Guard(loc handle.Location) (*PageGuard, bool) {
	if loc.Pool() != p.index || int64(loc.Page()) >= int64(len(p.pages)) {
		return nil, false
	}
	return newPageGuard(p.pages[loc.Page()]), true
}

// Usage sums every page.
func (p *Sliced) Usage() Usage {
	var u Usage
	for _, pg := range p.pages {
		u = u.Combine(pg.usage())
	}
	return u
}

// Report implements Pool.
func (p *Sliced) Report() Report {
	return Report{
		Kind:         SlicedKind{PageSize: p.pageSize, MaxSlice: p.maxSlice},
		Usage:        p.Usage(),
		Pages:        uint64(len(p.pages)),
		PagesPeak:    p.pagesPeak,
		LargestAlloc: p.largest,
	}
}

// guardedPages counts guarded pages.
func (p *Sliced) guardedPages() int {
	n := 0
	for _, pg := range p.pages {
		if pg.guarded() {
			n++
		}
	}
	return n
}

// Check verifies PL5 and every page's invariants (PL1–PL4, PL6) and panics
// when one is broken. Tests and invariant builds call it.
func (p *Sliced) Check() {
	bound := p.noFitKnown && !p.reserveChanged.Raised()
	for i, pg := range p.pages {
		if pg.index != i {
			panic(fmt.Sprintf("pool: pool %d page at position %d carries index %d (PL5)", p.index, i, pg.index))
		}
		pg.check()
		if p.runs != nil && i == 0 {
			p.runs.check(p.pages)
		}
		if !bound || pg.guarded() {
			continue
		}
		for j := range pg.slices {
			if sl := &pg.slices[j]; sl.h.IsFree() && sl.EffectiveSize() > p.noFitAbove {
				panic(fmt.Sprintf("pool: pool %d page %d holds a %d-byte free slice above the no-fit bound %d (PL29)", p.index, i, sl.EffectiveSize(), p.noFitAbove))
			}
		}
	}
}
