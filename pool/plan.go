// Relocation planning and commit in the arena. The protocol as a whole
// (plan → copy → land → commit, and its invariants R1–R7) is described in
// package relocation; this file holds the arena's two halves of it.
//
// Plan, in order:
//  1. Analysis: outdated pools in growth order, pages in index order. A page
//     enters the plan only if it is not guarded, holds a live slice, and no
//     live slice on it is bound (a host mapping, a pending cross-stream use, a
//     touched-page record): moving the rest would free nothing.
//  2. Order: stable sort by live bytes ascending — cheapest first, so that
//     when room runs out as many pages as possible are already emptied.
//  3. All or nothing per page: if an allocation finds no target, the moves
//     already planned for its page are abandoned and the next page is tried.
//  4. A move reserves its target on the current pool only: held room first
//     (first fit on unguarded pages), then, with MayAllocate room, a new page.
//
// Cost: the target search keeps a cursor (page, slice) across the whole plan
// and coalesces each current page once, when the cursor first enters it; so a
// plan of n moves onto pages filling front to back costs O(n + slices), not
// O(n · slices). Room freed behind the cursor during the plan is left for the
// next one.
//
// Commit re-reads both locations (the plan's coalescing may have renumbered
// slices), then hands the allocation's descriptor to the target slice: every
// user handle and binding follows, unchanged. Cursor and failure marks move
// with the bytes; the source slice becomes free with a fresh handle. Finally
// Drain gives back the emptied pages.

package pool

import (
	"fmt"
	"slices"

	"github.com/gpumem/gpumem/handle"
	"github.com/gpumem/gpumem/relocation"
	"github.com/gpumem/gpumem/storage"
)

// planPage is one outdated page's live allocations.
type planPage struct {
	live   uint64
	allocs []*handle.Handle // clones of the live slices' handles
}

// fitCursor is where the plan's target search resumes on the current pool.
type fitCursor struct {
	page      int
	slice     int
	coalesced int // pages [0, coalesced) were coalesced in this plan
}

// Plan chooses, for every movable outdated page, a target on the current
// pool for each of its live allocations, and returns the moves. Nothing is
// copied; the targets are reserved (non-free) until the relocation lands or
// is abandoned. The result may be empty.
func (a *Arena) Plan(room relocation.TargetRoom, st storage.Storage, g *handle.ErrorGraph) *relocation.Relocation {
	var candidates []planPage
	for _, slot := range a.outdated {
		for _, pg := range a.slots[slot].pages {
			if c, ok := analyse(pg); ok {
				candidates = append(candidates, c)
			}
		}
	}
	slices.SortStableFunc(candidates, func(x, y planPage) int {
		switch {
		case x.live < y.live:
			return -1
		case x.live > y.live:
			return 1
		}
		return 0
	})

	cur := a.Current()
	var cursor fitCursor
	var moves []relocation.Move
	for _, c := range candidates {
		mark := len(moves)
		rewind := cursor
		ok := true
		for _, h := range c.allocs {
			src := a.sliceAt(h.Location())
			if src == nil {
				ok = false
				break
			}
			target := a.reserveTarget(cur, &cursor, src.Region.Size, room, st, g)
			if target == nil {
				ok = false
				break
			}
			dst := cur.Slice(target.Location())
			moves = append(moves, relocation.NewMove(h, target, relocation.StorageCopy{Source: src.Region, Target: dst.Region}))
		}
		if ok {
			continue
		}
		// All or nothing per page: undo this page's moves; the targets
		// become free again and the search resumes where the page began.
		for _, m := range moves[mark:] {
			m.Target().Release()
			m.Allocation().Release()
		}
		for _, h := range c.allocs[len(moves)-mark:] {
			h.Release()
		}
		moves = moves[:mark]
		cursor = rewind
	}
	return relocation.New(moves)
}

// analyse collects a page's live allocations, or reports that the page must
// stay: guarded, empty, or holding a bound allocation.
func analyse(pg *page) (planPage, bool) {
	if pg.guarded() {
		return planPage{}, false
	}
	var c planPage
	for i := range pg.slices {
		s := &pg.slices[i]
		if s.h.IsFree() {
			continue
		}
		if s.h.IsBound() {
			return planPage{}, false
		}
		c.live += s.Region.Size
		c.allocs = append(c.allocs, s.h)
	}
	if len(c.allocs) == 0 {
		return planPage{}, false
	}
	for i, h := range c.allocs {
		c.allocs[i] = h.Clone()
	}
	return c, true
}

// reserveTarget reserves size bytes on the current pool from the cursor on;
// with MayAllocate it adds a page when held room runs out. nil: no target.
func (a *Arena) reserveTarget(cur *Sliced, c *fitCursor, size uint64, room relocation.TargetRoom, st storage.Storage, g *handle.ErrorGraph) *handle.Handle {
	for c.page < len(cur.pages) {
		pg := cur.pages[c.page]
		if !pg.guarded() {
			if c.coalesced <= c.page {
				pg.coalesce(g)
				c.coalesced = c.page + 1
				c.slice = 0
			}
			if h := pg.tryReserveFrom(c.slice, size); h != nil {
				c.slice = int(h.Location().Slice())
				cur.served(size)
				return h
			}
		}
		c.page++
		c.slice = 0
	}
	if room != relocation.MayAllocate {
		return nil
	}
	h, err := cur.Alloc(st, size)
	if err != nil {
		return nil
	}
	c.page = len(cur.pages) - 1
	c.coalesced = len(cur.pages)
	c.slice = int(h.Location().Slice())
	return h
}

// sliceAt returns the arena slice at loc, or nil.
func (a *Arena) sliceAt(loc handle.Location) *Slice {
	p := a.Pool(loc.Pool())
	if p == nil {
		return nil
	}
	return p.Slice(loc)
}

// Commit lands a copied relocation: for every move the target slice takes
// the allocation's handle (its descriptor now names the target, so every
// owner follows), with the source's cursor and taint; the source slice
// becomes free. Then Drain gives back the emptied pages, which it returns.
//
// A Landed that did not come from Relocation.Copy panics: committing moves
// whose bytes never landed would lose them.
func (a *Arena) Commit(l *relocation.Landed, st storage.Storage, g *handle.ErrorGraph) (pages int, bytes uint64) {
	if !l.Valid() {
		panic("pool: Commit of a Landed that did not come from Relocation.Copy")
	}
	for _, m := range l.Moves() {
		alloc, target := m.Allocation(), m.Target()
		src, dst := alloc.Location(), target.Location()
		alloc.Release()
		target.Release()
		from, to := a.sliceAt(src), a.sliceAt(dst)
		if from == nil || to == nil || from.h.Descriptor() != alloc.Descriptor() || to.h.Descriptor() != target.Descriptor() {
			panic(fmt.Sprintf("pool: relocation move from %v to %v lost its slices", src, dst))
		}
		to.clearTaint(g)
		to.h.Release()
		to.h = from.h
		to.Cursor = from.Cursor
		to.taint = from.taint
		to.h.Descriptor().SetLocation(dst)
		from.taint = nil
		from.h = handle.New(src)
		from.Cursor = 0
	}
	return a.Drain(st, g)
}
