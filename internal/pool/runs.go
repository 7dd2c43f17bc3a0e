// The free runs of a tightest pool, in order (PL33's index).
//
// The tightest page is the page whose smallest free run holding a
// reservation is the smallest of all pages, the first on a tie. Asking
// every page for it visited every page at every reservation: on a forward
// pass of hundreds of 100 MiB pages, each holding a run large enough for
// most reservations, that walk was most of what a capacity search on whole
// pages cost. The pool instead keeps every free run of its pages in one
// list ordered by size, then by page (runIndex), so the answer is the first
// run of at least the size asked whose page is not guarded: a binary
// search, whatever the number of pages.
//
// The list follows the pages lazily. A page whose runs may have changed is
// marked stale: its signal rising (a release left a slice free, a guard
// went; handle.Signal.OnRaise tells the pool which page rose, so nothing
// looks at the others), or a carve, split or hold changing its slices
// (page.invalidate). Before each answer the stale pages are coalesced
// where their signal rose and their runs replaced in the list: a
// reservation costs the pages it or the releases before it touched, not
// the pool's.

package pool

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpumem/gpumem/internal/handle"
)

// runIndex lists the free runs (adjacent free slices, as tightestRun counts
// them) of every page of one pool, by size, then by page order: a page's
// serial is its rank among the pool's pages since its creation, so the
// order survives the renumbering of released pages (PL5). Between
// refreshes the runs of a stale page may be out of date; refresh brings
// them back. Guarded pages keep their runs listed and are passed over.
type runIndex struct {
	runs   []indexedRun
	stale  []*page
	serial uint64 // the next page's
}

// indexedRun is one free run of bytes on page pg (whose serial orders it).
type indexedRun struct {
	bytes  uint64
	serial uint64
	pg     *page
}

func compareRuns(a, b indexedRun) int {
	if c := cmp.Compare(a.bytes, b.bytes); c != 0 {
		return c
	}
	return cmp.Compare(a.serial, b.serial)
}

// runIndex returns the pool's run index, building it on first use: only an
// arena pool on whole pages asks (tryReserveTightest), so granular pools and
// the small pool never keep one.
func (p *Sliced) runIndex() *runIndex {
	if p.runs == nil {
		p.runs = &runIndex{}
		for _, pg := range p.pages {
			p.runs.add(pg)
		}
	}
	return p.runs
}

// add lists pg, whose runs are read at the next refresh.
func (ix *runIndex) add(pg *page) {
	pg.runIndex, pg.serial = ix, ix.serial
	ix.serial++
	pg.changed.OnRaise(pg.invalidate)
	pg.invalidate()
}

// markStale queues pg for the next refresh, once.
func (ix *runIndex) markStale(pg *page) {
	if !pg.runsStale {
		pg.runsStale = true
		ix.stale = append(ix.stale, pg)
	}
}

// drop removes a page going back to the storage from the list.
func (ix *runIndex) drop(pg *page) {
	ix.remove(pg)
	pg.runIndex = nil
	pg.changed.OnRaise(nil)
}

// remove takes pg's listed runs out of the list.
func (ix *runIndex) remove(pg *page) {
	for _, b := range pg.listedRuns {
		at, found := slices.BinarySearchFunc(ix.runs, indexedRun{bytes: b, serial: pg.serial}, compareRuns)
		if !found {
			panic(fmt.Sprintf("pool: page %d lists a %d-byte run its pool's run index lacks (PL33)", pg.index, b))
		}
		ix.runs = slices.Delete(ix.runs, at, at+1)
	}
	pg.listedRuns = pg.listedRuns[:0]
}

// refresh coalesces every stale unguarded page whose signal rose and lists
// its runs again; the list is then exact for every unguarded page.
func (ix *runIndex) refresh(g *handle.ErrorGraph) {
	kept := ix.stale[:0]
	for _, pg := range ix.stale {
		if pg.runIndex != ix {
			pg.runsStale = false
			continue // given back since it was queued
		}
		if pg.guarded() {
			// A reservation passes a guarded page by without coalescing
			// it; it stays queued until the guard goes.
			kept = append(kept, pg)
			continue
		}
		pg.coalesce(g) // queues nothing: the page is queued
		pg.runsStale = false
		ix.remove(pg)
		pg.listedRuns = pg.appendRuns(pg.listedRuns)
		for _, b := range pg.listedRuns {
			r := indexedRun{bytes: b, serial: pg.serial, pg: pg}
			at, _ := slices.BinarySearchFunc(ix.runs, r, compareRuns)
			ix.runs = slices.Insert(ix.runs, at, r)
		}
	}
	clear(ix.stale[len(kept):])
	ix.stale = kept
}

// tightest returns the unguarded page holding the smallest run of at least
// need bytes (the first page on a tie) that PL37 does not keep from need,
// or nil and the largest run of any unguarded page (PL29's bound, kept runs
// counted: a reservation of another size may take them). Call it after
// refresh.
func (ix *runIndex) tightest(need uint64) (best *page, largest uint64) {
	at, _ := slices.BinarySearchFunc(ix.runs, indexedRun{bytes: need}, compareRuns)
	var kept uint64
	var soft *page // the page of the smallest softly kept run
	for _, r := range ix.runs[at:] {
		if r.pg.guarded() {
			continue
		}
		if lv := r.kept(need); lv != notKept {
			kept = max(kept, r.bytes)
			if lv == keptSoft && soft == nil {
				soft = r.pg
			}
			continue
		}
		return r.pg, 0
	}
	if soft != nil {
		return soft, 0 // no other run holds need
	}
	if kept > 0 {
		return nil, kept
	}
	for i := at - 1; i >= 0; i-- {
		if r := ix.runs[i]; !r.pg.guarded() {
			return nil, r.bytes
		}
	}
	return nil, 0
}

// firmlyKept returns the unguarded page holding the smallest run of at
// least need bytes that PL37 keeps firmly from need (the first page on a
// tie), or nil. Call it after refresh.
func (ix *runIndex) firmlyKept(need uint64) *page {
	at, _ := slices.BinarySearchFunc(ix.runs, indexedRun{bytes: need}, compareRuns)
	for _, r := range ix.runs[at:] {
		if !r.pg.guarded() && r.kept(need) == keptHard {
			return r.pg
		}
	}
	return nil
}

// appendRuns appends the bytes of each of the page's free runs, in offset
// order.
func (p *page) appendRuns(runs []uint64) []uint64 {
	var run uint64
	for i := p.firstFree; i < len(p.slices); i++ {
		s := &p.slices[i]
		if !s.h.IsFree() {
			if run > 0 {
				runs = append(runs, run)
			}
			run = 0
			continue
		}
		run += s.EffectiveSize()
	}
	if run > 0 {
		runs = append(runs, run)
	}
	return runs
}

// invalidate marks the page's listed runs out of date (runIndex): its
// slices changed, or its signal rose.
func (p *page) invalidate() {
	if p.runIndex != nil {
		p.runIndex.markStale(p)
	}
}

// check verifies that every page not queued lists its runs and that the list holds
// exactly the listed runs of the pool's pages (PL33); it panics otherwise.
func (ix *runIndex) check(pages []*page) {
	n := 0
	for _, pg := range pages {
		if pg.runIndex != ix {
			panic(fmt.Sprintf("pool: page %d is not in its pool's run index (PL33)", pg.index))
		}
		n += len(pg.listedRuns)
		if pg.runsStale {
			continue
		}
		if pg.changed.Raised() {
			panic(fmt.Sprintf("pool: page %d's signal rose but its runs are not queued (PL33)", pg.index))
		}
		if got := pg.appendRuns(nil); !slices.Equal(got, pg.listedRuns) {
			panic(fmt.Sprintf("pool: page %d holds free runs %v, its pool's run index lists %v (PL33)", pg.index, got, pg.listedRuns))
		}
	}
	if n != len(ix.runs) || !slices.IsSortedFunc(ix.runs, compareRuns) {
		panic(fmt.Sprintf("pool: the run index holds %d runs (sorted %v), its pages list %d (PL33)", len(ix.runs), slices.IsSortedFunc(ix.runs, compareRuns), n))
	}
}

// kept is PL37 for the run and a reservation of need effective bytes.
func (r indexedRun) kept(need uint64) keptLevel {
	if r.pg.keptFor == 0 {
		return notKept
	}
	return r.pg.roomKept(r.bytes, need, r.pg.openRoom(r.bytes))
}
