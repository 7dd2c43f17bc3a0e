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
// Cost: the pool lists every free run of its pages by size (runs.go), so
// the tightest page is a binary search; a reservation refreshes only the
// pages that changed since the last one. A pool of one page skips it: first
// fit chooses alike there.

package pool

import (
	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// tightestPage returns the unguarded page whose smallest free run (adjacent
// free slices) holding need is the smallest (the first on a tie), or nil
// with the largest free run of any unguarded page when none holds need
// (PL29's bound). Every page whose signal rose since the last answer is
// coalesced first (runIndex.refresh), as a visit of it would.
func (p *Sliced) tightestPage(g *handle.ErrorGraph, need uint64) (best *page, largest uint64) {
	ix := p.runIndex()
	ix.refresh(g)
	return ix.tightest(need)
}

// tryReserveTightest is TryReserve on the tightest page (PL33); ok false
// when the pool does not choose pages that way, or when the storage refused
// to map the chosen page's granules (the caller then scans by first fit).
// found false with ok true: no page holds need. With renew the carved slice
// gets a descriptor of the page's own (page.renew), so that the caller's
// clone costs no heap object.
func (p *Sliced) tryReserveTightest(st storage.Storage, size, need uint64, g *handle.ErrorGraph, renew bool) (pg *page, at int, found, ok bool) {
	if !p.tightest || len(p.pages) < 2 || storage.GranuleOf(st) > 0 {
		return nil, -1, false, false // first fit chooses alike, or is the rule
	}
	pg, largest := p.tightestPage(g, need)
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
	if renew {
		pg.renew(at, g)
	}
	p.served(size)
	return pg, at, true, true
}
