package pool

import (
	"fmt"
	"slices"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// planPage is one outdated page's live allocations.
type planPage struct {
	live   uint64
	allocs []*handle.Handle // clones of the live slices' handles
}

// targetSearch finds targets on the current pool for one plan: on the
// tightest page where the pool reserves that way (PL33), else by first fit.
// Between the events that reset a page's hint (its first visit, an abandoned
// page releasing targets on it) only the plan carves, which never frees a
// byte, so every hint stays true.
type targetSearch struct {
	cur   *Sliced
	hints []pageHint // one per current page, by page index
	// Pages [0, open) are guarded or hold no free slice of openBelow bytes
	// or more, so a search for at least that many starts at open. A page
	// left with a remnant smaller than the moves' size (the growth page, a
	// page the targets did not tile exactly) thus stops no search: without
	// the bound every later move would walk every full page from it.
	open      int
	openBelow uint64
	// left counts the moves not yet given a target: a page whose slice
	// list is full grows it once for as many as its free slice holds, not
	// by doubling, 512 targets on a 2 MiB page would copy the list nine
	// times.
	left int
}

// pageHint is what a plan knows about one current page.
type pageHint struct {
	dirty   bool   // coalesce before the next scan
	first   int    // slices [0, first) are live
	maxFree uint64 // no free slice at or after first is larger (effective size)
}

func newTargetSearch(cur *Sliced) *targetSearch {
	s := &targetSearch{cur: cur, hints: make([]pageHint, len(cur.pages)), openBelow: 1}
	for i, pg := range cur.pages {
		if !pg.guarded() {
			s.hints[i] = pageHint{dirty: true, maxFree: ^uint64(0)}
		}
	}
	return s
}

// released marks the page of a target the plan gave back: its room must be
// coalesced and searched again.
func (s *targetSearch) released(loc handle.Location) {
	i := int(loc.Page())
	s.hints[i] = pageHint{dirty: true, maxFree: ^uint64(0)}
	s.open = min(s.open, i)
}

// Plan chooses, for every movable outdated page, a target on the current
// pool for each of its live allocations, and returns the moves. Nothing is
// copied; the targets are reserved (non-free) until the relocation lands or
// is abandoned. The result may be empty. Plan and Commit are the arena's two
// halves of a relocation; the protocol as a whole (plan → copy → land →
// commit) and its invariants are described in package relocation.
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
//  4. A move reserves its target on the current pool only (PL26): held room
//     first (first fit on unguarded pages), then, with MayAllocate room, a
//     new page. On granular storage the target's granules are mapped first
//     (PL6); a refused mapping leaves the move without a target.
//
// Cost: the target search gives the answer TryReserve would give for each
// move (first fit over the current pool's unguarded pages in index order,
// each page coalesced) without rescanning what the plan already filled. It
// coalesces each current page once, when first visited, and again only after
// an abandoned page released targets on it; per page it keeps the index
// before which every slice is live and an upper bound on the free room after
// it; pages with no free slice left are skipped for the rest of the plan. A
// plan of n moves onto pages filling front to back thus costs O(n + slices),
// not O(n · slices). (An earlier design resumed from the last target
// instead: it skipped holes before that target that a later, smaller
// allocation fits, and room an abandoned page gave back stayed split, so a
// Held plan could leave pages that fit.)
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

	search := newTargetSearch(a.Current())
	total := 0
	for _, c := range candidates {
		total += len(c.allocs)
	}
	search.left = total
	moves := make([]relocation.Move, 0, total)
	for _, c := range candidates {
		mark := len(moves)
		ok := true
		for _, h := range c.allocs {
			src := a.sliceAt(h.Location())
			if src == nil {
				ok = false
				break
			}
			target := search.reserve(src.Region.Size, room, st, g)
			search.left--
			if target == nil {
				ok = false
				break
			}
			dst := search.cur.Slice(target.Location())
			moves = append(moves, relocation.NewMove(h, target, relocation.StorageCopy{Source: src.Region, Target: dst.Region}))
		}
		if ok {
			continue
		}
		// All or nothing per page: undo this page's moves; the targets
		// become free again, and their pages are searched again.
		for _, m := range moves[mark:] {
			search.released(m.Target().Location())
			m.Target().Release()
			m.Allocation().Release()
		}
		for _, h := range c.allocs[len(moves)-mark:] {
			h.Release()
		}
		moves = moves[:mark]
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
	clones := make([]handle.Handle, len(c.allocs)) // one allocation per page, not per move
	for i, h := range c.allocs {
		c.allocs[i] = h.CloneInto(&clones[i])
	}
	return c, true
}

// reserve reserves size bytes on the current pool, first fit; with
// MayAllocate it adds a page when held room runs out. nil: no target.
func (s *targetSearch) reserve(size uint64, room relocation.TargetRoom, st storage.Storage, g *handle.ErrorGraph) *handle.Handle {
	cur := s.cur
	pad, need := padded(size, cur.align)
	if pg, at, found, ok := cur.tryReserveTightest(st, size, need, g, false); ok {
		// An arena pool on whole pages places a target as it places a
		// reservation (PL33): on the tightest page, by the page hints of
		// PL4, which the plan's carving keeps true as it keeps its own.
		if found {
			return pg.slices[at].h.Clone()
		}
		return s.allocate(size, room, st)
	}
	start := 0
	if need >= s.openBelow {
		start = s.open
	}
	for i := start; i < len(cur.pages); i++ {
		pg, hint := cur.pages[i], &s.hints[i]
		if hint.dirty {
			pg.coalesce(g)
			*hint = pageHint{maxFree: ^uint64(0)}
		}
		if hint.maxFree >= need {
			at, first, largest := pg.fitFrom(hint.first, need)
			if at >= 0 {
				var err error
				if at, err = pg.backFit(st, at, need); at < 0 {
					// The storage refused to map the granules of every
					// fitting slice: nothing was carved; a later page may
					// have mapped room, as TryReserve would find.
					continue
				}
				if err != nil {
					pg.changed.Raise() // as reserveAt: a passed-over run merges next visit
				}
				if len(pg.slices) == cap(pg.slices) {
					room := pg.slices[at].EffectiveSize() / max(need, 1)
					pg.slices = slices.Grow(pg.slices, int(min(room, uint64(max(s.left, 1)))))
				}
				pg.carve(at, size, pad)
				h := pg.slices[at].h.Clone()
				if first == at {
					first = at + 1 // the carved slice is live now
				}
				hint.first = first
				cur.served(size)
				return h
			}
			hint.first, hint.maxFree = first, largest
		}
		if i == s.open && hint.maxFree < need {
			s.open++
			s.openBelow = max(s.openBelow, hint.maxFree+1)
		}
	}
	return s.allocate(size, room, st)
}

// allocate adds a page to the current pool for a target of size bytes when
// room is MayAllocate; nil otherwise, or when the storage refuses.
func (s *targetSearch) allocate(size uint64, room relocation.TargetRoom, st storage.Storage) *handle.Handle {
	cur := s.cur
	if room != relocation.MayAllocate {
		return nil
	}
	h, err := cur.Alloc(st, size)
	if err != nil {
		return nil
	}
	for len(s.hints) < len(cur.pages) {
		s.hints = append(s.hints, pageHint{maxFree: ^uint64(0)})
	}
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
// Commit re-reads both locations from the moves' handles (the plan's
// coalescing may have renumbered slices), so every user handle and binding
// follows, unchanged; cursor and failure marks move with the bytes, and the
// source slice becomes free with a fresh handle.
//
// A Landed that did not come from Relocation.Copy panics: committing moves
// whose bytes never landed would lose them.
func (a *Arena) Commit(l *relocation.Landed, st storage.Storage, g *handle.ErrorGraph) (pages int, bytes uint64) {
	if !l.Valid() {
		panic("pool: Commit of a Landed that did not come from Relocation.Copy")
	}
	commitMoves(l, a.sliceAt, &a.Current().spares, g)
	return a.Drain(st, g)
}

// commitMoves re-points every landed move (Arena.Commit, Sliced.Commit): the
// target slice takes the allocation's handle with the source's cursor and
// taint, and the source slice becomes free with a fresh handle from spares.
// sliceAt finds a slice by location in the pools the moves touch.
func commitMoves(l *relocation.Landed, sliceAt func(handle.Location) *Slice, spares *handle.Recycler, g *handle.ErrorGraph) {
	for _, m := range l.All() {
		alloc, target := m.Allocation(), m.Target()
		src, dst := alloc.Location(), target.Location()
		alloc.Release()
		target.Release()
		from, to := sliceAt(src), sliceAt(dst)
		if from == nil || to == nil || from.h.Descriptor() != alloc.Descriptor() || to.h.Descriptor() != target.Descriptor() {
			panic(fmt.Sprintf("pool: relocation move from %v to %v lost its slices", src, dst))
		}
		sigTo, sigFrom := to.h.Descriptor().FreeSignal(), from.h.Descriptor().FreeSignal()
		to.clearTaint(g)
		to.h.Descriptor().SignalFree(nil)
		to.h.Release()
		to.h = from.h
		to.Cursor = from.Cursor
		to.taint = from.taint
		to.h.Descriptor().SetLocation(dst)
		to.h.Descriptor().SignalFree(sigTo)
		from.taint = nil
		from.h = spares.New(src, sigFrom)
		from.Cursor = 0
		sigFrom.RaiseAt(src.Slice()) // the source slice is free now
	}
}
