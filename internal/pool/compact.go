// Compaction planning: emptying the sparsest pages of a sliced pool into the
// free room of its other pages (design §7.7). The protocol that copies and
// commits the plan is package relocation's; this file chooses what moves.
//
// Relocation off outdated pages cannot reach the free room between live
// slices of current pages, and that room is where a long run's memory goes:
// a page holding one live slice holds the whole page. Compaction answers it
// with the same plan → copy → commit, with sources and targets on one pool.

package pool

import (
	"slices"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/relocation"
	"github.com/gpumem/gpumem/storage"
)

// CompactMovedPerFreed is the cost rule of a compaction plan: a page is
// emptied only if the bytes its moves copy are at most this many times the
// bytes emptying it gives back net (the page's bytes, or its mapped bytes on
// granular storage, less the granules its targets newly map). A move costs
// its bytes at the device's copy bandwidth (hundreds of GB/s to TB/s: a
// millisecond per GiB), so under pressure a copy is cheap next to a failed
// allocation; what the rule refuses is a plan that would copy a page's live
// bytes only to map as much again on its targets (granular storage, where a
// sparse page already unmapped its free granules), freeing almost nothing.
// On whole pages a page's live bytes are below its size, so the rule never
// refuses a page there. 2 leaves room for targets that map a granule they
// share with a live slice.
const CompactMovedPerFreed = 2

// CompactLimits bounds one compaction pass (VMA-style incremental passes):
// at most MaxBytes requested bytes copied and MaxMoves allocations moved,
// each 0 for no bound (a negative MaxMoves: nothing may move, see Less). A
// page whose moves would pass a bound is left alone, so a pass empties whole
// pages only. Goal, when nonzero, ends the plan as soon as the pages it
// empties free that many bytes: the make-room path sets it to the room its
// failed reservation lacked, so a compaction under pressure copies no more
// than the retry needs.
type CompactLimits struct {
	MaxBytes uint64
	MaxMoves int
	Goal     uint64
}

// Less returns the limits left after a pass that copied bytes in moves
// moves and freed freed bytes; an unbounded limit stays unbounded, and a
// limit used up (or a goal reached) leaves the limits spent.
func (l CompactLimits) Less(bytes uint64, moves int, freed uint64) CompactLimits {
	spent := CompactLimits{MaxMoves: -1}
	if l.MaxBytes > 0 {
		l.MaxBytes -= min(l.MaxBytes, bytes)
		if l.MaxBytes == 0 {
			return spent
		}
	}
	if l.MaxMoves > 0 {
		l.MaxMoves -= min(l.MaxMoves, moves)
		if l.MaxMoves == 0 {
			return spent
		}
	}
	if l.Goal > 0 {
		l.Goal -= min(l.Goal, freed)
		if l.Goal == 0 {
			return spent
		}
	}
	return l
}

// Spent reports whether the limits allow no further move.
func (l CompactLimits) Spent() bool { return l.MaxMoves < 0 }

// CompactPlan is what a compaction plan expects to free: the pages it
// empties and their bytes net of the granules its targets newly map.
type CompactPlan struct {
	Pages      int
	BytesFreed uint64
	// Refused counts pages whose every allocation found room but that the
	// cost rule (CompactMovedPerFreed) turned down.
	Refused int
}

// compactSource is one candidate page: its index and live bytes.
type compactSource struct {
	index int
	live  uint64
}

// CanCompact reports, without planning, whether a compaction might empty a
// page: an unguarded page holds live slices, none bound, and the unguarded
// pages hold at least one page of free room between them. That is necessary:
// emptying a page of live bytes L into the others needs L of their room,
// and the page itself holds pageSize − L, so the room in all is at least a
// page. The plan decides. O(slices).
func (p *Sliced) CanCompact() bool {
	var free uint64
	movable := 0
	unguarded := 0
	for _, pg := range p.pages {
		if pg.guarded() {
			continue
		}
		unguarded++
		l, ok := movableLive(pg)
		if ok && l > 0 {
			movable++
		}
		free += pg.size() - min(pg.size(), pg.occupied())
	}
	return movable > 0 && unguarded >= 2 && free >= p.pageSize
}

// movableLive sums the requested bytes of the page's live slices; false when
// a live slice is bound (moving the others would not empty the page).
func movableLive(pg *page) (uint64, bool) {
	var live uint64
	for i := range pg.slices {
		s := &pg.slices[i]
		if s.h.IsFree() {
			continue
		}
		if s.h.IsBound() {
			return 0, false
		}
		live += s.Region.Size
	}
	return live, true
}

// PlanCompact plans a compaction of the pool: it empties its sparsest pages
// into free room of its other pages. Nothing is copied; the targets are
// reserved until the relocation lands or is abandoned, and Sliced.Commit
// re-points what landed. The result may be empty.
//
// In order:
//  1. Candidates: unguarded pages holding live slices, none of them bound (a
//     mapping, a queued cross-stream use, a graph's record), sorted by live
//     bytes ascending (the pool's pages share one size, so least live bytes
//     is least dense), ties by index.
//  2. For each candidate in turn that no earlier chosen page took a target
//     on: its live slices, largest first, each take the best fit (the
//     smallest free slice that holds it) among the unguarded pages that are
//     neither a chosen source nor this page. Best fit keeps the large holes
//     for the large slices still to place.
//  3. All or nothing per page: if a slice finds no room, or the limits or
//     the cost rule (CompactMovedPerFreed) turn the page down, its targets
//     are released and the next candidate is tried. A page that took
//     targets is never a source afterwards (its targets hold bytes not
//     landed yet), and a source never takes targets, so source and target
//     are always on distinct pages (R5).
//
// The plan ends early once the pages it empties free lim.Goal bytes.
// Targets are never a new page: room Held only, since a compaction that
// took a page to empty one would free nothing.
func (p *Sliced) PlanCompact(lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	var plan CompactPlan
	if lim.Spent() {
		return relocation.New(nil), plan
	}
	var cands []compactSource
	for i, pg := range p.pages {
		if pg.guarded() {
			continue
		}
		pg.coalesce(g)
		if l, ok := movableLive(pg); ok && l > 0 {
			cands = append(cands, compactSource{index: i, live: l})
		}
	}
	if len(cands) < 2 {
		return relocation.New(nil), plan
	}
	slices.SortStableFunc(cands, func(x, y compactSource) int {
		switch {
		case x.live < y.live:
			return -1
		case x.live > y.live:
			return 1
		}
		return 0
	})
	source := make([]bool, len(p.pages))
	target := make([]bool, len(p.pages))
	var moves []relocation.Move
	var bytes uint64
	for _, c := range cands {
		if target[c.index] {
			continue
		}
		if lim.MaxBytes > 0 && bytes+c.live > lim.MaxBytes {
			continue
		}
		pg := p.pages[c.index]
		live := pg.liveSlices()
		if lim.MaxMoves > 0 && len(moves)+len(live) > lim.MaxMoves {
			continue
		}
		slices.SortStableFunc(live, func(x, y int) int {
			a, b := pg.slices[x].Region.Size, pg.slices[y].Region.Size
			switch {
			case a > b:
				return -1
			case a < b:
				return 1
			}
			return 0
		})
		// Clones first: carving targets renumbers no slice of this page
		// (it takes none), so the indices stay true while the targets are
		// placed.
		clones := make([]*handle.Handle, len(live))
		for k, i := range live {
			clones[k] = pg.slices[i].h.Clone()
		}
		freed := pg.size() - pg.unmappedBytes()
		source[c.index] = true
		mark := len(moves)
		var mapped uint64
		ok := true
		for k, h := range clones {
			src := pg.slices[live[k]].Region
			t, newly := p.bestFit(src.Size, source, st, g)
			if t == nil {
				ok = false
				break
			}
			mapped += newly
			dst := p.Slice(t.Location())
			moves = append(moves, relocation.NewMove(h, t, relocation.StorageCopy{Source: src, Target: dst.Region}))
		}
		if ok && (mapped >= freed || c.live > CompactMovedPerFreed*(freed-mapped)) {
			ok = false
			plan.Refused++
		}
		if ok {
			for _, m := range moves[mark:] {
				target[m.Target().Location().Page()] = true
			}
			bytes += c.live
			plan.Pages++
			plan.BytesFreed += freed - mapped
			if lim.Goal > 0 && plan.BytesFreed >= lim.Goal {
				break
			}
			continue
		}
		for _, m := range moves[mark:] {
			m.Target().Release()
			m.Allocation().Release()
		}
		for _, h := range clones[len(moves)-mark:] {
			h.Release()
		}
		moves = moves[:mark]
		source[c.index] = false
	}
	return relocation.New(moves), plan
}

// occupied sums the effective sizes of the page's slices that are not free.
func (pg *page) occupied() uint64 {
	var n uint64
	for i := range pg.slices {
		if !pg.slices[i].h.IsFree() {
			n += pg.slices[i].EffectiveSize()
		}
	}
	return n
}

// liveSlices returns the indices of the page's live slices.
func (pg *page) liveSlices() []int {
	var out []int
	for i := range pg.slices {
		if !pg.slices[i].h.IsFree() {
			out = append(out, i)
		}
	}
	return out
}

// bestFit reserves size bytes in the smallest free slice that holds it, on
// an unguarded page not marked in exclude, and returns a clone of its
// handle and the bytes of granules it newly mapped; nil when none holds it
// (or the storage refused every mapping tried).
func (p *Sliced) bestFit(size uint64, exclude []bool, st storage.Storage, g *handle.ErrorGraph) (*handle.Handle, uint64) {
	pad, need := padded(size, p.align)
	for {
		bestPage, bestSlice := -1, -1
		var bestSize uint64
		for i, pg := range p.pages {
			if pg.guarded() || exclude[i] {
				continue
			}
			pg.coalesce(g)
			if !pg.changed.Raised() && pg.maxFree < need {
				continue
			}
			for j := range pg.slices {
				s := &pg.slices[j]
				if !s.h.IsFree() {
					continue
				}
				if eff := s.EffectiveSize(); eff >= need && (bestPage < 0 || eff < bestSize) {
					bestPage, bestSlice, bestSize = i, j, eff
				}
			}
		}
		if bestPage < 0 {
			return nil, 0
		}
		pg := p.pages[bestPage]
		before := pg.unmappedBytes()
		if err := pg.back(st, pg.slices[bestSlice].Region.Offset, need); err != nil {
			// The storage refused the granules: leave this page out of the
			// search and look again (a mapped hole elsewhere may hold it).
			exclude[bestPage] = true
			defer func() { exclude[bestPage] = false }()
			continue
		}
		newly := before - pg.unmappedBytes()
		pg.carve(bestSlice, size, pad)
		p.noFitKnown = false // PL29: the plan carved outside a scan
		return pg.slices[bestSlice].h.Clone(), newly
	}
}

// Commit lands a copied compaction of the pool (PlanCompact): every
// allocation takes its target slice, as Arena.Commit does, and the source
// slices become free. The emptied pages go back at the next ReleaseEmpty
// (the cleanup that follows a compaction), which it does not run itself.
// A Landed that did not come from Relocation.Copy panics.
func (p *Sliced) Commit(l *relocation.Landed, g *handle.ErrorGraph) {
	if !l.Valid() {
		panic("pool: Commit of a Landed that did not come from Relocation.Copy")
	}
	commitMoves(l, p.Slice, &p.spares, g)
}

// PlanCompact plans a compaction of the arena's current pool
// (Sliced.PlanCompact). Outdated pools are relocation's (Plan): their pages
// go back whole once emptied onto the current pool, which compaction then
// keeps dense.
func (a *Arena) PlanCompact(lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	return a.Current().PlanCompact(lim, st, g)
}

// CanCompact reports whether a compaction of the current pool might empty a
// page (Sliced.CanCompact).
func (a *Arena) CanCompact() bool { return a.Current().CanCompact() }

// holeWindow is a run of adjacent slices [from, to] of one page that
// together hold a reservation once their live allocations move away: live
// is the bytes those moves copy.
type holeWindow struct {
	page, from, to int
	live           uint64
	moves          int
}

// cheaper orders windows by the bytes their moves copy, then by the moves,
// then by page and offset (so a plan is deterministic).
func (w holeWindow) cheaper(v holeWindow) bool {
	if w.live != v.live {
		return w.live < v.live
	}
	if w.moves != v.moves {
		return w.moves < v.moves
	}
	if w.page != v.page {
		return w.page < v.page
	}
	return w.from < v.from
}

// holeCandidates is how many pages' cheapest windows PlanHole tries before
// it gives up: a window whose allocations find no room elsewhere is rarely
// followed by a much dearer one that does, and each try costs a scan of
// the pool's free slices per move.
const holeCandidates = 8

// PlanHole plans the moves that make room for one reservation of size
// bytes in the pool's pages without a new page: on one page, the run of
// adjacent slices that holds size (padded) and whose live allocations are
// the fewest bytes to copy has those allocations moved into free room of
// the other pages (best fit, largest first), so the run coalesces into one
// free slice the retried reservation takes. It is the make-room path's
// answer when the free room of the pages would hold the reservation but no
// single hole does, and no page can be emptied (PlanCompact).
//
// Only pages backed whole take part: on granular storage a run's free part
// may need granules mapped, which is what failed, and the retry takes the
// first fitting slice, which may be another that needs them; there the
// answer is PlanCompact's, which unmaps what it empties. Guarded pages and
// runs holding a bound allocation are never chosen; a move's target is never
// on the run's page (R5). The cheapest window of each page is a candidate,
// the candidates tried cheapest first (at most holeCandidates), all or
// nothing each, within lim; the first that places every allocation is the
// plan. The plan frees no page: CompactPlan.Pages and BytesFreed are 0.
//
// Cost: one pass over every page's slices (two pointers per page) plus a
// best-fit scan per move of the tried candidates.
func (p *Sliced) PlanHole(size uint64, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	var plan CompactPlan
	if lim.Spent() || len(p.pages) < 2 {
		return relocation.New(nil), plan
	}
	_, need := padded(size, p.align)
	var cands []holeWindow
	for pi, pg := range p.pages {
		if pg.guarded() || pg.granule > 0 || pg.size() < need {
			continue
		}
		pg.coalesce(g)
		if w, ok := pg.cheapestWindow(pi, need); ok {
			cands = append(cands, w)
		}
	}
	slices.SortFunc(cands, func(x, y holeWindow) int {
		if x.cheaper(y) {
			return -1
		}
		if y.cheaper(x) {
			return 1
		}
		return 0
	})
	exclude := make([]bool, len(p.pages))
	for k, w := range cands {
		if k == holeCandidates {
			break
		}
		if w.live == 0 {
			// Already a hole: the reservation failed for another reason
			// (the storage), and moving nothing cures nothing.
			break
		}
		if (lim.MaxBytes > 0 && w.live > lim.MaxBytes) || (lim.MaxMoves > 0 && w.moves > lim.MaxMoves) {
			continue
		}
		pg := p.pages[w.page]
		var live []int
		for i := w.from; i <= w.to; i++ {
			if !pg.slices[i].h.IsFree() {
				live = append(live, i)
			}
		}
		slices.SortStableFunc(live, func(x, y int) int {
			a, b := pg.slices[x].Region.Size, pg.slices[y].Region.Size
			switch {
			case a > b:
				return -1
			case a < b:
				return 1
			}
			return 0
		})
		// Clones first: targets are never carved on this page, so its
		// slice indices stay true while they are placed.
		clones := make([]*handle.Handle, len(live))
		for n, i := range live {
			clones[n] = pg.slices[i].h.Clone()
		}
		exclude[w.page] = true
		var moves []relocation.Move
		ok := true
		for n, h := range clones {
			src := pg.slices[live[n]].Region
			t, _ := p.bestFit(src.Size, exclude, st, g)
			if t == nil {
				ok = false
				break
			}
			dst := p.Slice(t.Location())
			moves = append(moves, relocation.NewMove(h, t, relocation.StorageCopy{Source: src, Target: dst.Region}))
		}
		exclude[w.page] = false
		if ok {
			return relocation.New(moves), plan
		}
		for _, m := range moves {
			m.Target().Release()
			m.Allocation().Release()
		}
		for _, h := range clones[len(moves):] {
			h.Release()
		}
	}
	return relocation.New(nil), plan
}

// cheapestWindow finds the page's run of adjacent slices whose effective
// sizes sum to at least need and whose live slices (none bound) hold the
// fewest requested bytes: two pointers over the slices, the run shrunk
// from the left while it still holds need. false when no run qualifies.
// The page's slices must be coalesced.
func (pg *page) cheapestWindow(index int, need uint64) (holeWindow, bool) {
	best := holeWindow{page: -1}
	var span, live uint64
	moves, from := 0, 0
	for j := range pg.slices {
		s := &pg.slices[j]
		if !s.h.IsFree() && s.h.IsBound() {
			from, span, live, moves = j+1, 0, 0, 0
			continue
		}
		span += s.EffectiveSize()
		if !s.h.IsFree() {
			live += s.Region.Size
			moves++
		}
		for from < j {
			t := &pg.slices[from]
			if span-t.EffectiveSize() < need {
				break
			}
			span -= t.EffectiveSize()
			if !t.h.IsFree() {
				live -= t.Region.Size
				moves--
			}
			from++
		}
		if span >= need {
			w := holeWindow{page: index, from: from, to: j, live: live, moves: moves}
			if best.page < 0 || w.cheaper(best) {
				best = w
			}
		}
	}
	return best, best.page >= 0
}

// CanHole reports, without planning, whether PlanHole might make room for
// size bytes: at least two unguarded pages backed whole, whose free room
// together holds size padded (the run's own free bytes plus the room its
// moves take elsewhere is at least that). O(slices).
func (p *Sliced) CanHole(size uint64) bool {
	_, need := padded(size, p.align)
	var free uint64
	n := 0
	for _, pg := range p.pages {
		if pg.guarded() || pg.granule > 0 {
			continue
		}
		n++
		free += pg.size() - min(pg.size(), pg.occupied())
	}
	return n >= 2 && free >= need
}
