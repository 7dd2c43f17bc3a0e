package pool

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

const (
	// allocAfterFree is the freeCount at which a free exclusive page goes
	// back (ALLOC_AFTER_FREE): a new page starts one below it.
	allocAfterFree = 5
	// exclusiveDecay weighs each new size in the running average of sizes.
	exclusiveDecay = 0.01
)

// exclusivePage is one exclusive allocation and its age.
type exclusivePage struct {
	slot
	freeCount uint32 // PL13, PL14
}

// Exclusive is a pool of one allocation per page (design §4.3, §5.1), sized
// by a running average of the sizes asked (PL11–PL15 in the package doc).
// The exclusive-pages dynamic memory is 24 of them; the adaptive memory's
// tiny pool is one with maxAlloc 0.
//
// Each page is a slot (PL8–PL10) plus a freeCount, the pool's estimate of
// how long the page has sat unused. Pages are sized by a decaying average of
// the sizes asked, so one page can serve a range of nearby sizes. The
// average stays ≤ maxAlloc because only accepted sizes feed it. A new page
// starts at freeCount = allocAfterFree − 1 ("suspected unused"); a
// reservation decrements the freeCount of the page it takes, so pages that
// keep being reused are kept longest. A page freed and never reused goes
// back at the first aging pass after its free; an unused page goes back
// after about deallocPeriod reservations.
//
// Example (alignment 32, maxAlloc 32 KiB): avg starts at 16,384; two 512 B
// reservations move it to 16,225.28 then 16,068.15, giving pages of 16,256
// and 16,096 bytes.
//
// Costs: TryReserve and Cleanup scan every page once (O(pages)); Alloc is
// O(1). A bucket rarely holds more than a few hundred pages, and the scan
// reads one counter per page.
type Exclusive struct {
	maxAlloc      uint64
	deallocPeriod uint64
	align         uint64
	index         uint8
	lim           Limits
	avg           float64 // PL11
	lastCheck     uint64  // allocNr at the last aging pass (PL14)
	pages         []*exclusivePage
	pagesPeak     uint64
	largest       uint64
}

var _ Pool = (*Exclusive)(nil)

// NewExclusive returns an empty exclusive pool serving sizes up to maxAlloc
// (a multiple of align), whose unused pages go back after about
// deallocPeriod reservations. An align of 0 means
// storage.DefaultAlignment.
func NewExclusive(maxAlloc, deallocPeriod, align uint64, index uint8, lim Limits) *Exclusive {
	if align == 0 {
		align = storage.DefaultAlignment
	}
	return &Exclusive{
		maxAlloc:      maxAlloc,
		deallocPeriod: deallocPeriod,
		align:         align,
		index:         index,
		lim:           lim,
		avg:           float64(maxAlloc / 2),
	}
}

// Index implements Pool.
func (p *Exclusive) Index() uint8 { return p.index }

// MaxAlloc is the largest size the pool serves.
func (p *Exclusive) MaxAlloc() uint64 { return p.maxAlloc }

// Pages is the number of pages held.
func (p *Exclusive) Pages() int { return len(p.pages) }

// Accept implements Pool: size ≤ maxAlloc.
func (p *Exclusive) Accept(size uint64) bool { return size <= p.maxAlloc }

// TryReserve implements Pool (PL11, PL13): the running average moves towards
// size, then the free page of allocSize ≥ size with the smallest freeCount
// (lowest index on ties) serves it, handed to to. A size the pool does not
// accept returns nil and leaves the average alone: the caller asks only
// accepting pools.
func (p *Exclusive) TryReserve(_ storage.Storage, size uint64, g *handle.ErrorGraph, to Bind) *handle.Handle {
	pg := p.pick(size)
	if pg == nil {
		return nil
	}
	return pg.reserve(size, p.align, to, g)
}

// pick is TryReserve's choice (PL11, PL13): avg moves, and the free page of
// allocSize ≥ size with the smallest freeCount is taken (freeCount down),
// or nil.
func (p *Exclusive) pick(size uint64) *exclusivePage {
	if !p.Accept(size) {
		return nil
	}
	p.avg = movedAvg(p.avg, size)
	var best *exclusivePage
	for _, pg := range p.pages {
		if pg.allocSize < size || (best != nil && pg.freeCount >= best.freeCount) || !pg.free() {
			continue
		}
		best = pg
		if best.freeCount == 0 {
			break
		}
	}
	if best == nil {
		return nil
	}
	if best.freeCount > 0 {
		best.freeCount--
	}
	p.largest = max(p.largest, size)
	return best
}

// Alloc implements Pool (PL12): one new page of roundUp(max(avg, size), align)
// bytes serving size. It returns ErrBufferTooBig above maxAlloc and
// handle.ErrIndexOverflow when the pool holds as many pages as a location
// (or Limits) can index; on any error the pool is unchanged.
func (p *Exclusive) Alloc(st storage.Storage, size uint64) (*handle.Handle, error) {
	n := len(p.pages)
	if err := p.refuseAlloc(size, n); err != nil {
		return nil, err
	}
	allocSize := p.pageFor(p.avg, size)
	sl, err := newSlot(st, allocSize, size, p.align, p.index, n)
	if err != nil {
		return nil, err
	}
	pg := &exclusivePage{slot: *sl, freeCount: allocAfterFree - 1}
	p.pages = append(p.pages, pg)
	p.pagesPeak = max(p.pagesPeak, uint64(len(p.pages)))
	p.largest = max(p.largest, size)
	return pg.s.h.Clone(), nil
}

// movedAvg is PL11's step: the running average after a reservation of size.
func movedAvg(avg float64, size uint64) float64 {
	return avg*(1-exclusiveDecay) + exclusiveDecay*float64(size)
}

// pageFor is PL12's page for size when the average is avg.
func (p *Exclusive) pageFor(avg float64, size uint64) uint64 {
	return storage.RoundUp(max(uint64(avg), size), p.align)
}

// refuseAlloc is Alloc's refusal of size when the pool holds n pages:
// above maxAlloc, or as many pages as a location (or Limits) can index.
func (p *Exclusive) refuseAlloc(size uint64, n int) error {
	if size > p.maxAlloc {
		return fmt.Errorf("%w: %d bytes exceed the exclusive pool's %d-byte largest allocation", ErrBufferTooBig, size, p.maxAlloc)
	}
	if n >= p.lim.maxPages() {
		return fmt.Errorf("%w: exclusive pool %d already holds %d pages, the most a location can index here", handle.ErrIndexOverflow, p.index, n)
	}
	return nil
}

// Cleanup implements Pool (PL14): it runs when kind is Explicit or when
// deallocPeriod/5 reservations passed since the last run (allocNr counts
// reservations). Each free page ages and goes back at allocAfterFree, or at
// once when Explicit; guarded pages are never free (PL15). Survivors are
// renumbered, their descriptors rewritten.
func (p *Exclusive) Cleanup(st storage.Storage, allocNr uint64, kind CleanupKind, g *handle.ErrorGraph) {
	if !p.agesAt(allocNr, kind) {
		return
	}
	p.lastCheck = allocNr
	p.pages, _, _ = sweep(p.pages, p.index, st, g, func(pg *exclusivePage) bool {
		if !pg.free() {
			return false
		}
		pg.freeCount = aged(pg.freeCount)
		return goesBack(pg.freeCount, kind)
	})
}

// agesAt reports whether a cleanup of kind at reservation allocNr runs
// (PL14): an explicit one always, a periodic one every deallocPeriod/5
// reservations.
func (p *Exclusive) agesAt(allocNr uint64, kind CleanupKind) bool {
	return kind == Explicit || storage.SatSub(allocNr, p.lastCheck) >= p.deallocPeriod/5
}

// aged is a free page's freeCount after an aging pass (PL14).
func aged(freeCount uint32) uint32 {
	if freeCount < allocAfterFree {
		freeCount++
	}
	return freeCount
}

// goesBack reports whether a free page of freeCount (aged) goes back in a
// cleanup of kind (PL14).
func goesBack(freeCount uint32, kind CleanupKind) bool {
	return kind == Explicit || freeCount >= allocAfterFree
}

// Slice implements Pool.
func (p *Exclusive) Slice(loc handle.Location) *Slice {
	if sl := slotAt(p.pages, p.index, loc); sl != nil {
		return &sl.s
	}
	return nil
}

// Guard implements Pool: an allocation guard on the page at loc (PL15).
func (p *Exclusive) Guard(loc handle.Location) (*PageGuard, bool) {
	sl := slotAt(p.pages, p.index, loc)
	if sl == nil {
		return nil, false
	}
	return sl.guard(), true
}

// Usage sums every page: reserved is Σ allocSize.
func (p *Exclusive) Usage() Usage {
	var u Usage
	for _, pg := range p.pages {
		pg.addUsage(&u)
	}
	return u
}

// Report implements Pool.
func (p *Exclusive) Report() Report {
	return Report{
		Kind:         ExclusiveKind{MaxAlloc: p.maxAlloc},
		Usage:        p.Usage(),
		Pages:        uint64(len(p.pages)),
		PagesPeak:    p.pagesPeak,
		LargestAlloc: p.largest,
	}
}

// Check verifies PL8 and PL9 on every page and panics when one is broken.
// Tests and invariant builds call it.
func (p *Exclusive) Check() {
	for i, pg := range p.pages {
		if msg := checkSlot(&pg.slot, p.index, i); msg != "" {
			panic(fmt.Sprintf("pool: exclusive pool %d page %d %s", p.index, i, msg))
		}
	}
}
