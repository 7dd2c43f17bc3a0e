// The tightest page: which page of an arena pool a reservation is carved
// from (PL33).
//
// First fit across pages puts a reservation on the lowest page with room,
// however loose the fit: a 5 MiB buffer takes the front of an empty 30 MiB
// page while a 6 MiB hole two pages on stays free, and the 30 MiB buffer
// that comes next needs a page of its own. PyTorch's caching allocator
// takes the smallest free block that holds the request (best fit) and on
// generated workloads laid its segments out tighter than gpumem's first fit
// did. An arena pool on whole pages therefore carves from the page whose
// smallest free run (adjacent free slices) that holds the reservation is
// the smallest of all pages (the first such page on a tie, so a pool of one
// page, or of pages with equal holes, behaves as before), and within that
// page still by first fit: the page keeps its live slices to the front, and
// the in-page layout rules (coalesceFor's kept slice, PL4's hints) are
// unchanged. A relocation's targets are placed the same way (plan.go), so a
// plan lands where the reservations it stands for would have.
//
// Against first fit it lowered more smallest capacities than it raised on
// generated traces and on held-out ones, and kept whole pages at or below
// the torch model on all of them; the alternatives tried did not win on
// both sets (docs/decisions/2026-12-03-tightest-page.md).
//
// Granular storage keeps first fit: a page there is address space, and free
// granules stay mapped until pressure or an explicit cleanup unmaps them
// (§6.4), so spreading reuse over the pages maps granules first fit would
// never have touched, raising the unlimited peak for no smaller capacity
// (the record has the figures). The small pool keeps first fit too: its
// pages hold thousands of metadata slices, and its 2 MiB pages are not what
// the device runs out of.
//
// Cost: every unguarded page with room is visited (an exact fit stops the
// walk). A page's answer is cached until its layout changes (page.tightRun),
// and a page not chosen merges at once the run coalesceFor kept apart for
// the reservation, so a page nothing touched costs a few loads
// (BenchmarkReserveAcrossPages; the record has its figures). A pool of one
// page skips the walk: first fit chooses alike there.

package pool

import (
	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// tightestFree returns the bytes of the page's smallest free run (adjacent
// free slices) of at least need bytes (0: none fits). Call it after
// coalesceFor, which left maxFree and firstFree exact (PL4) and every run
// merged but the one it kept apart for need: that run's exact first slice
// counts with the rest of its run, so the answer is the hole's size whether
// or not an earlier visit split it, and a recording that finds the room its
// rehearsal left split makes the rehearsal's choice.
func (p *page) tightestFree(need uint64) uint64 {
	if p.maxFree < need {
		return 0
	}
	if p.tightNeed != need {
		p.tightNeed, p.tightRun = need, p.tightestRun(need)
	}
	return p.tightRun
}

// tightestRun is tightestFree without the cache: a scan of the free runs.
func (p *page) tightestRun(need uint64) uint64 {
	var tightest, run uint64
	end := func() {
		if run >= need && (tightest == 0 || run < tightest) {
			tightest = run
		}
		run = 0
	}
	for i := p.firstFree; i < len(p.slices); i++ {
		s := &p.slices[i]
		if !s.h.IsFree() {
			end()
			continue
		}
		run += s.EffectiveSize()
	}
	end()
	return tightest
}

// tightestPage coalesces every unguarded page for need (coalesceFor) and
// returns the one whose smallest fitting free slice is the smallest (the
// first on a tie), or nil with the largest free slice seen when no page
// holds need (PL29's bound).
//
// coalesceFor keeps apart, on each page, the slice first fit would take when
// it has exactly need bytes; on a page not chosen that slice would stay
// free beside free room it belongs with, so the run is merged whole there
// before returning.
func (p *Sliced) tightestPage(g *handle.ErrorGraph, need uint64, renew bool) (best *page, largest uint64) {
	var tightest uint64
	kept := p.kept[:0]
	for _, pg := range p.pages {
		if pg.guarded() {
			continue
		}
		if k := pg.coalesceKeeping(g, need, renew); k >= 0 {
			kept = append(kept, keptSlice{pg, k})
		}
		largest = max(largest, pg.maxFree)
		if t := pg.tightestFree(need); t != 0 && (best == nil || t < tightest) {
			best, tightest = pg, t
			if t == need {
				break // an exact fit: no page fits tighter
			}
		}
	}
	for _, k := range kept {
		if k.pg != best {
			// Merge the run now: left to the next visit, a reservation of
			// the same size would keep the slice apart again, and every
			// page with such a run would be rescanned, and its cached
			// tightest run dropped, on every reservation.
			k.pg.changed.RaiseAt(uint32(k.at))
			k.pg.coalesceFor(g, 0, false)
		}
	}
	clear(kept)
	p.kept = kept[:0]
	return best, largest
}

// keptSlice is a slice coalesceFor kept apart on page pg, at index at.
type keptSlice struct {
	pg *page
	at int
}

// tryReserveTightest is TryReserve on the tightest page (PL33); ok false
// when the pool does not choose pages that way, or when the storage refused
// to map the chosen page's granules (the caller then scans by first fit).
// found false with ok true: no page holds need.
func (p *Sliced) tryReserveTightest(st storage.Storage, size, need uint64, g *handle.ErrorGraph, renew bool) (pg *page, at int, found, ok bool) {
	if !p.tightest || len(p.pages) < 2 || storage.GranuleOf(st) > 0 {
		return nil, -1, false, false // first fit chooses alike, or is the rule
	}
	pg, largest := p.tightestPage(g, need, renew)
	if pg == nil {
		p.scanFailed(largest)
		return nil, -1, false, true
	}
	at, err := pg.reserveAt(st, 0, size)
	if at < 0 {
		if err != nil {
			pg.changed.Raise() // as TryReserve: the next visit merges the kept run
		}
		return nil, -1, false, false
	}
	p.served(size)
	return pg, at, true, true
}
