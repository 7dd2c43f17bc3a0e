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
	"cmp"
	"fmt"
	"math/bits"
	"slices"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/relocation"
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

// admits reports whether a plan that copies bytes in moves moves stays
// within the bounds (a page that would pass one is left whole).
func (l CompactLimits) admits(bytes uint64, moves int) bool {
	return (l.MaxBytes == 0 || bytes <= l.MaxBytes) && (l.MaxMoves <= 0 || moves <= l.MaxMoves)
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
	// Repacked counts the pages of Pages emptied onto a new page of their
	// live bytes' size (compactScope.repack); BytesFreed counts them net.
	Repacked int
}

// compactScope is the pools one compaction plans over, in order: sources
// and targets may be any unguarded page of any of them, so a move may cross
// from one pool to another. A single pool (Sliced.PlanCompact, the small
// pool) or an arena's current and outdated pools (Arena.PlanCompact).
type compactScope []*Sliced

// scopePage names one page of a scope: pool k of the scope, page i.
type scopePage struct{ k, i int }

func (sc compactScope) page(at scopePage) *page { return sc[at.k].pages[at.i] }

// marks returns a page mark per page of the scope, all false.
func (sc compactScope) marks() [][]bool {
	m := make([][]bool, len(sc))
	for k, p := range sc {
		m[k] = make([]bool, len(p.pages))
	}
	return m
}

// compactSource is one candidate page: where it is, its size and live
// bytes.
type compactSource struct {
	at         scopePage
	size, live uint64
}

// sparser orders candidates by density, live bytes per page byte, least
// first (exactly: live·size' < live'·size in 128 bits), then by the scope's
// order. On pages of one size that is least live bytes; density also ranks
// an arena's own-size pages (PL30) among the pool's.
func (c compactSource) sparser(d compactSource) int {
	h1, l1 := bits.Mul64(c.live, d.size)
	h2, l2 := bits.Mul64(d.live, c.size)
	switch {
	case h1 < h2 || (h1 == h2 && l1 < l2):
		return -1
	case h1 > h2 || (h1 == h2 && l1 > l2):
		return 1
	case c.at.k != d.at.k:
		return c.at.k - d.at.k
	}
	return c.at.i - d.at.i
}

// CanCompact reports, without planning, whether a compaction might empty a
// page: an unguarded page holds live slices, none bound, and the unguarded
// pages hold at least one page of free room between them. That is necessary:
// emptying a page of live bytes L into the others needs L of their room,
// and the page itself holds its size less L, so the room in all is at least
// that page's size. Or, underPressure (a plan with a Goal, where a repack
// may run) and on whole pages, such a page's live bytes rounded up to a
// tile leave a tile of it or more: a repack might replace it by a tight
// page. The plan decides. O(slices).
func (p *Sliced) CanCompact(underPressure bool) bool {
	return compactScope{p}.canCompact(nil, underPressure)
}

// CanCompactIn is CanCompact in a dry run's view (would.go).
func (p *Sliced) CanCompactIn(v *View, underPressure bool) bool {
	return compactScope{p}.canCompact(v, underPressure)
}

// canCompact is CanCompact over the scope, in view v (nil: as it is): the
// free room of its unguarded pages is at least the smallest movable page,
// or (repack) a page might be repacked.
func (sc compactScope) canCompact(v *View, repack bool) bool {
	var free uint64
	smallest := uint64(0)
	unguarded := 0
	repackable := false
	for _, p := range sc {
		for _, pg := range p.pages {
			if pg.guarded() || !v.present(pg) {
				continue
			}
			unguarded++
			l, ok := movableLiveIn(v, pg)
			if ok && l > 0 && (smallest == 0 || pg.size() < smallest) {
				smallest = pg.size()
			}
			// A whole page a tight page of its live bytes would replace with
			// a tile or more to spare (repack, under pressure only).
			if repack && ok && l > 0 && pg.granule == 0 && ceilTo(l, TileStep)+TileStep <= pg.size() && ceilTo(l, TileStep) <= sc[0].pageSize {
				repackable = true
			}
			free += pg.size() - min(pg.size(), v.occupied(pg))
		}
	}
	return smallest > 0 && (repackable || unguarded >= 2 && free >= smallest)
}

// movableLive sums the requested bytes of the page's live slices; false when
// a live slice is bound (moving the others would not empty the page).
func movableLive(pg *page) (uint64, bool) { return movableLiveIn(nil, pg) }

// movableLiveIn is movableLive in view v (nil: as it is).
func movableLiveIn(v *View, pg *page) (uint64, bool) {
	var live uint64
	for i := range pg.slices {
		s := &pg.slices[i]
		if v.free(s) {
			continue
		}
		if v.bound(s) {
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
//     mapping, a queued cross-stream use, a graph's record), sorted by
//     density (live bytes per page byte) ascending: on pages of one size,
//     least live bytes (an own-size page, PL30, ranks by its own size).
//     Ties by position.
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
// Targets are room Held, since a compaction that took a page as large as
// the one it empties would free nothing; the one exception, under pressure
// only (a Goal) and on whole pages, is a page packed to its live slices'
// size (repack), which frees the difference.
func (p *Sliced) PlanCompact(lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	return compactScope{p}.plan(lim, st, g)
}

// plan is PlanCompact over the scope.
func (sc compactScope) plan(lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	return sc.planFrom(0, lim, st, g)
}

// planFrom is plan with sources on the scope's pools from index from on
// only; targets may lie on any.
func (sc compactScope) planFrom(from int, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	var plan CompactPlan
	if lim.Spent() {
		return relocation.New(nil), plan
	}
	var cands []compactSource
	for k, p := range sc[from:] {
		k += from
		for i, pg := range p.pages {
			if pg.guarded() {
				continue
			}
			pg.coalesce(g)
			if l, ok := movableLive(pg); ok && l > 0 {
				cands = append(cands, compactSource{at: scopePage{k, i}, size: pg.size(), live: l})
			}
		}
	}
	if len(cands) == 0 || len(cands) < 2 && lim.Goal == 0 {
		return relocation.New(nil), plan // a lone page can only be repacked
	}
	slices.SortFunc(cands, compactSource.sparser)
	source := sc.marks()
	target := sc.marks()
	var moves []relocation.Move
	var bytes uint64
	var room freeRoom
	whole := storage.GranuleOf(st) == 0
	for _, c := range cands {
		if target[c.at.k][c.at.i] {
			continue
		}
		pg := sc.page(c.at)
		live := pg.liveSlices()
		if !lim.admits(bytes+c.live, len(moves)+len(live)) {
			continue
		}
		if whole {
			// On whole pages the moves map nothing, so sizes alone say
			// whether every live slice finds room (freeRoom.overflow): a
			// page one of them would not leave costs no carving.
			if !room.valid {
				room = sc.freeRoom(source)
			}
			if room.exact {
				if _, spills := room.overflow(c.at, live, pg, sc[0].align); spills {
					continue
				}
				room.valid = false // the moves below carve and mark
			}
		}
		freed := pg.size() - pg.unmappedBytes()
		source[c.at.k][c.at.i] = true
		mark := len(moves)
		var ok bool
		var mapped uint64
		moves, ok, mapped = sc.moveAway(pg, live, source, false, st, g, moves)
		if ok && (mapped >= freed || c.live > CompactMovedPerFreed*(freed-mapped)) {
			ok = false
			plan.Refused++
		}
		if ok {
			for _, m := range moves[mark:] {
				loc := m.Target().Location()
				target[sc.index(loc.Pool())][loc.Page()] = true
			}
			bytes += c.live
			plan.Pages++
			plan.BytesFreed += freed - mapped
			if lim.Goal > 0 && plan.BytesFreed >= lim.Goal {
				break
			}
			continue
		}
		moves = releaseMoves(moves, mark)
		source[c.at.k][c.at.i] = false
	}
	if lim.Goal > 0 && plan.BytesFreed < lim.Goal {
		moves = sc.repack(cands, lim, bytes, source, target, st, g, moves, &plan)
	}
	return relocation.New(moves), plan
}

// repack is the plan's last resort under pressure, on pages backed whole:
// a candidate whose live slices did not all find room among the other
// pages moves what does fit there (largest first, best fit, as the plan
// places) and the rest onto one new page of its own, sized to those slices
// packed end to end and rounded up to TileStep (as PL32 sizes a page of a
// reservation's own size), in the scope's first pool (an arena's current
// pool: outdated pages serve nothing new). The sparse page's bytes less
// the tight page's go back, so a compaction that takes a page still frees
// memory: a 64 MiB page holding 38 MiB of scattered live slices becomes a
// 38 MiB page (less what the others' holes took), and the rest is the
// device's again. Only under pressure (a Goal: the make-room path, after
// held room alone could not give the reservation what it lacked), so a
// device with the bytes for every page never reaches it, and only where
// the storage grants the page: a refusal leaves the candidate alone (the
// tight page must fit beside the page it empties, so the make-room path
// runs another pass once one has freed room: a larger page may fit then).
// On granular storage a page's free granules are unmapped already, and the
// tight page would map as many again: nothing to gain, so it never runs
// there. bytes is what the plan copies so far.
func (sc compactScope) repack(cands []compactSource, lim CompactLimits, bytes uint64, source, target [][]bool, st storage.Storage, g *handle.ErrorGraph, moves []relocation.Move, plan *CompactPlan) []relocation.Move {
	if storage.GranuleOf(st) > 0 {
		return moves
	}
	home := sc[0]
	var room freeRoom
	for _, c := range cands {
		if source[c.at.k][c.at.i] || target[c.at.k][c.at.i] {
			continue
		}
		pg := sc.page(c.at)
		live := pg.liveSlices()
		if !lim.admits(bytes+c.live, len(moves)+len(live)) {
			continue
		}
		if !room.valid {
			room = sc.freeRoom(source)
		}
		var fresh *page
		if room.exact {
			// The plan's outcome for this page from the sizes alone
			// (freeRoom.overflow): a page that cannot pass costs no carving,
			// and one whose tight page the storage refuses none either —
			// the storage is asked first, as the moves ask it nothing on
			// whole pages.
			packed, spills := room.overflow(c.at, live, pg, home.align)
			tight := ceilTo(packed, TileStep)
			if tight+TileStep > pg.size() || tight > home.pageSize {
				continue
			}
			if spills {
				var err error
				if fresh, err = home.addPage(st, tight); err != nil {
					continue // refused: a smaller candidate's page may still fit
				}
				for k := range source { // the fresh page takes no best fit
					source[k] = append(source[k], k == 0)
					target[k] = append(target[k], false)
				}
			}
			room.valid = false // the moves below carve and mark
		}
		source[c.at.k][c.at.i] = true
		mark := len(moves)
		var overflow []int
		moves, overflow = sc.moveWhatFits(pg, live, source, st, g, moves)
		var packed uint64
		for _, i := range overflow {
			_, need := padded(pg.slices[i].Region.Size, home.align)
			packed += need
		}
		tight := ceilTo(packed, TileStep)
		ok := tight+TileStep <= pg.size() && tight <= home.pageSize
		switch {
		case fresh != nil:
			source[0][fresh.index] = false
			if !ok || len(overflow) == 0 || fresh.size() != tight {
				ok = false // cannot happen: overflow foresaw the moves
				home.dropLastEmptyPage(st, g)
				for k := range source {
					source[k] = source[k][:len(sc[k].pages)]
					target[k] = target[k][:len(sc[k].pages)]
				}
				fresh = nil
			}
		case ok && len(overflow) > 0:
			var err error
			if fresh, err = home.addPage(st, tight); err != nil {
				ok = false // refused: a smaller candidate's page may still fit
			} else {
				for k := range source {
					source[k] = append(source[k], false)
					target[k] = append(target[k], false)
				}
			}
		}
		if ok && fresh != nil {
			home.pagesPeak = max(home.pagesPeak, uint64(len(home.pages)))
			// Only the fresh page takes the rest: every other page is
			// excluded.
			only := sc.marks()
			for k := range only {
				for i := range only[k] {
					only[k][i] = !(k == 0 && i == fresh.index)
				}
			}
			moves, ok, _ = sc.moveAway(pg, overflow, only, false, st, g, moves)
			if !ok {
				// Padding the packing did not foresee. The fresh page is the
				// pool's last: its targets released, it goes back.
				moves = releaseMoves(moves, mark)
				home.dropLastEmptyPage(st, g)
				for k := range source {
					source[k] = source[k][:len(sc[k].pages)]
					target[k] = target[k][:len(sc[k].pages)]
				}
			}
		}
		if !ok {
			moves = releaseMoves(moves, mark)
			source[c.at.k][c.at.i] = false
			continue
		}
		for _, m := range moves[mark:] {
			loc := m.Target().Location()
			target[sc.index(loc.Pool())][loc.Page()] = true
		}
		bytes += c.live
		plan.Pages++
		if fresh != nil {
			plan.Repacked++
		}
		plan.BytesFreed += pg.size() - tight
		if plan.BytesFreed >= lim.Goal {
			break
		}
	}
	return moves
}

// freeRoom is the free room a plan's moves may take, by size: the runs of
// free slices (one slice each once coalesced) on the scope's unguarded
// pages that are not sources, kept sorted in all and
// per page in page, so overflow simulates a candidate's best fits without
// carving. exact is false when the scope's pools differ in alignment (a
// slice's need would depend on the pool that takes it): repack then plans
// every candidate as it always did. It stays true while nothing is carved
// or marked: repack takes it again after a candidate it plans.
type freeRoom struct {
	valid, exact bool
	all          []uint64     // every free slice's effective size, ascending
	page         [][][]uint64 // the same per page of the scope, ascending
	scratch      []uint64
}

func (sc compactScope) freeRoom(exclude [][]bool) freeRoom {
	f := freeRoom{valid: true, exact: true, page: make([][][]uint64, len(sc))}
	for k, p := range sc {
		if p.align != sc[0].align {
			f.exact = false
			return f
		}
		f.page[k] = make([][]uint64, len(p.pages))
		for i, q := range p.pages {
			if q.guarded() || exclude[k][i] {
				continue
			}
			// Runs of adjacent free slices: bestFit coalesces a page
			// before it looks, so a run is one free slice to it.
			var sizes []uint64
			var run uint64
			for j := range q.slices {
				if s := &q.slices[j]; s.h.IsFree() {
					run += s.EffectiveSize()
					continue
				}
				if run > 0 {
					sizes, run = append(sizes, run), 0
				}
			}
			if run > 0 {
				sizes = append(sizes, run)
			}
			slices.Sort(sizes)
			f.page[k][i] = sizes
			f.all = append(f.all, sizes...)
		}
	}
	slices.Sort(f.all)
	return f
}

// overflow returns what moveWhatFits would leave of page at's live slices
// (indices live, of pg) for a tight page: the sum of their needs at
// alignment align, and whether any is left. It follows moveWhatFits step
// by step on sizes alone: largest first, each slice takes the smallest free
// slice of at least its need on another page (best fit: which of equal
// sizes does not change the sizes left), whose rest stays free; a slice
// that finds none is left. On whole pages a move maps nothing, so sizes are
// all that decide. O(free slices + live·free).
func (f *freeRoom) overflow(at scopePage, live []int, pg *page, align uint64) (packed uint64, spills bool) {
	free := f.scratch[:0]
	own := f.page[at.k][at.i]
	for _, v := range f.all { // all less the page's own, both ascending
		if len(own) > 0 && own[0] == v {
			own = own[1:]
			continue
		}
		free = append(free, v)
	}
	pg.largestFirst(live)
	for _, i := range live {
		_, need := padded(pg.slices[i].Region.Size, align)
		j, _ := slices.BinarySearch(free, need)
		if j == len(free) {
			packed += need
			spills = true
			continue
		}
		rest := free[j] - need
		free = slices.Delete(free, j, j+1)
		if rest > 0 {
			r, _ := slices.BinarySearch(free, rest)
			free = slices.Insert(free, r, rest)
		}
	}
	f.scratch = free
	return packed, spills
}

// moveWhatFits plans, largest first, the move of each of the page's live
// slices (indices live) that finds a best fit on a page of the scope not
// marked in exclude, appending them to moves, and returns the indices of
// those that found none, largest first. The page itself must be marked.
func (sc compactScope) moveWhatFits(pg *page, live []int, exclude [][]bool, st storage.Storage, g *handle.ErrorGraph, moves []relocation.Move) ([]relocation.Move, []int) {
	pg.largestFirst(live)
	var overflow []int
	fit := sc.fits(exclude, false, st, g)
	for _, i := range live {
		src := pg.slices[i].Region
		t, _ := fit.take(src.Size)
		if t == nil {
			overflow = append(overflow, i)
			continue
		}
		dst := sc[sc.index(t.Location().Pool())].Slice(t.Location())
		moves = append(moves, relocation.NewMove(pg.slices[i].h.Clone(), t, relocation.StorageCopy{Source: src, Target: dst.Region}))
	}
	return moves, overflow
}

// index returns the position in the scope of the pool of that index.
func (sc compactScope) index(pool uint8) int {
	for k, p := range sc {
		if p.index == pool {
			return k
		}
	}
	panic(fmt.Sprintf("pool: compaction target in pool %d, outside its scope", pool))
}

// moveAway plans the moves of the page's live slices (indices live), largest
// first, each into the best fit on an unmarked page of the scope, appending
// them to moves. ok is false when one found no room: the moves appended so
// far are then still in moves for the caller to release. mapped is the bytes
// of granules the targets newly mapped.
func (sc compactScope) moveAway(pg *page, live []int, exclude [][]bool, mappedOnly bool, st storage.Storage, g *handle.ErrorGraph, moves []relocation.Move) (_ []relocation.Move, ok bool, mapped uint64) {
	pg.largestFirst(live)
	// Clones first: targets are never carved on this page (it is marked),
	// so its slice indices stay true while they are placed.
	clones := make([]*handle.Handle, len(live))
	for n, i := range live {
		clones[n] = pg.slices[i].h.Clone()
	}
	fit := sc.fits(exclude, mappedOnly, st, g)
	for n, h := range clones {
		src := pg.slices[live[n]].Region
		t, newly := fit.take(src.Size)
		if t == nil {
			for _, c := range clones[n:] {
				c.Release()
			}
			return moves, false, mapped
		}
		mapped += newly
		dst := sc[sc.index(t.Location().Pool())].Slice(t.Location())
		moves = append(moves, relocation.NewMove(h, t, relocation.StorageCopy{Source: src, Target: dst.Region}))
	}
	return moves, true, mapped
}

// largestFirst orders slice indices of the page by requested size, largest
// first, ties in place: the order moves take room in, so the large holes
// go to the large slices still to place.
func (pg *page) largestFirst(live []int) {
	slices.SortStableFunc(live, func(x, y int) int {
		return cmp.Compare(pg.slices[y].Region.Size, pg.slices[x].Region.Size)
	})
}

// releaseMoves releases the moves from mark on (both handles each) and
// returns moves cut back to mark.
func releaseMoves(moves []relocation.Move, mark int) []relocation.Move {
	for _, m := range moves[mark:] {
		m.Target().Release()
		m.Allocation().Release()
	}
	return moves[:mark]
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
// an unguarded page of the scope not marked in exclude (with mappedOnly,
// only where every granule it covers is mapped already), and returns a
// clone of its handle and the bytes of granules it newly mapped; nil when
// none holds it (or the storage refused every mapping tried).
func (sc compactScope) bestFit(size uint64, exclude [][]bool, mappedOnly bool, st storage.Storage, g *handle.ErrorGraph) (*handle.Handle, uint64) {
	for {
		best, bestSlice := scopePage{-1, -1}, -1
		var bestSize uint64
		for k, p := range sc {
			_, need := padded(size, p.align)
			for i, pg := range p.pages {
				if pg.guarded() || exclude[k][i] {
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
					eff := s.EffectiveSize()
					if eff < need || (best.k >= 0 && eff >= bestSize) {
						continue
					}
					if !mappedOnly || pg.rangeMapped(s.Region.Offset, need) {
						best, bestSlice, bestSize = scopePage{k, i}, j, eff
					}
				}
			}
		}
		if best.k < 0 {
			return nil, 0
		}
		p, pg := sc[best.k], sc.page(best)
		pad, need := padded(size, p.align)
		before := pg.unmappedBytes()
		if err := pg.back(st, pg.slices[bestSlice].Region.Offset, need); err != nil {
			// The storage refused the granules: leave this page out of the
			// search and look again (a mapped hole elsewhere may hold it).
			exclude[best.k][best.i] = true
			defer func() { exclude[best.k][best.i] = false }()
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

// PlanCompact plans a compaction over the arena's current and outdated
// pools (compactScope.plan): the sparsest pages of any of them empty into
// free room of the others, so under pressure an outdated page's free room
// takes another outdated page's allocations, or the current pool's, when
// the current pages have none (relocation off outdated pages moves into
// current pages only). Arena.Commit lands it; the current pool's emptied
// pages then go back at its ReleaseEmpty, the outdated pools' at the
// commit's drain.
func (a *Arena) PlanCompact(lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	return a.scope().plan(lim, st, g)
}

// PlanCompactWith plans the emptying of other's pages (the small pool's)
// into free room of the arena's pools or other's other pages, for a
// compaction under pressure on whole pages: a small page holding a few
// live slices is a page of bytes the device pays for, and the arena's holes
// can take them, so the page goes back; the bytes it frees may be what the
// tight page of a repack lacked (on a device a page short, a 2 MiB small
// page is the difference). Only other's pages are sources (the arena's
// compact on their own, PlanCompact); CommitWith lands it.
func (a *Arena) PlanCompactWith(other *Sliced, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	sc := a.scope()
	return append(sc, other).planFrom(len(sc), lim, st, g)
}

// CanCompactWith is CanCompact over the arena's pools and other, under
// pressure (PlanCompactWith plans only with a goal).
func (a *Arena) CanCompactWith(other *Sliced) bool { return a.CanCompactWithIn(nil, other) }

// CanCompactWithIn is CanCompactWith in a dry run's view.
func (a *Arena) CanCompactWithIn(v *View, other *Sliced) bool {
	return append(a.scope(), other).canCompact(v, true)
}

// CanCompact reports whether a compaction of the arena might empty a page
// (Sliced.CanCompact over its pools).
func (a *Arena) CanCompact(underPressure bool) bool { return a.scope().canCompact(nil, underPressure) }

// CanCompactIn is CanCompact in a dry run's view.
func (a *Arena) CanCompactIn(v *View, underPressure bool) bool {
	return a.scope().canCompact(v, underPressure)
}

// scope is the arena's pools as one compaction sees them: the current pool
// first (its free room is where moves belong), then the outdated ones in
// growth order.
func (a *Arena) scope() compactScope {
	sc := compactScope{a.Current()}
	for _, slot := range a.outdated {
		sc = append(sc, a.slots[slot])
	}
	return sc
}

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
	return compactScope{p}.hole(size, lim, st, g)
}

// PlanHole is Sliced.PlanHole for a reservation the arena's current pool
// serves: the run lies on a current page, the moves may take free room on
// any page of the arena, outdated pages included.
func (a *Arena) PlanHole(size uint64, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	return a.scope().hole(size, lim, st, g)
}

// CanHole is Sliced.CanHole for the arena: the current pool's pages take
// the run, every pool's free room counts.
func (a *Arena) CanHole(size uint64) bool { return a.scope().canHole(nil, size) }

// CanHoleIn is CanHole in a dry run's view.
func (a *Arena) CanHoleIn(v *View, size uint64) bool { return a.scope().canHole(v, size) }

// hole is PlanHole with the run on a page of the scope's first pool and
// the targets anywhere else in the scope.
func (sc compactScope) hole(size uint64, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	var plan CompactPlan
	p := sc[0]
	if lim.Spent() || sc.pageCount() < 2 {
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
	exclude := sc.marks()
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
		exclude[0][w.page] = true
		moves, ok, _ := sc.moveAway(pg, live, exclude, false, st, g, nil)
		exclude[0][w.page] = false
		if ok {
			return relocation.New(moves), plan
		}
		releaseMoves(moves, 0)
	}
	return relocation.New(nil), plan
}

// pageCount is the pages of every pool of the scope.
func (sc compactScope) pageCount() int {
	n := 0
	for _, p := range sc {
		n += len(p.pages)
	}
	return n
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
func (p *Sliced) CanHole(size uint64) bool { return compactScope{p}.canHole(nil, size) }

// CanHoleIn is CanHole in a dry run's view.
func (p *Sliced) CanHoleIn(v *View, size uint64) bool { return compactScope{p}.canHole(v, size) }

// canHole is CanHole over the scope, in view v (nil: as it is).
func (sc compactScope) canHole(v *View, size uint64) bool {
	_, need := padded(size, sc[0].align)
	var free uint64
	n := 0
	for _, p := range sc {
		for _, pg := range p.pages {
			if pg.guarded() || pg.granule > 0 || !v.present(pg) {
				continue
			}
			n++
			free += pg.size() - min(pg.size(), v.occupied(pg))
		}
	}
	return n >= 2 && free >= need
}

// rangeMapped reports whether every granule [off, off+n) touches is mapped
// (always on a page backed whole).
func (pg *page) rangeMapped(off, n uint64) bool {
	if pg.granule == 0 || n == 0 {
		return true
	}
	first, count := storage.Granules(off, n, pg.granule)
	for k := first; k < first+count; k++ {
		if !pg.mapped[k] {
			return false
		}
	}
	return true
}

// PlanUnmap plans the moves that give back at least goal bytes of mapped
// granules on granular pages (one granule's worth when goal is 0), without
// emptying a page: on one page, the run of adjacent slices whose live
// allocations are the fewest bytes to copy and whose moving frees that
// many granules (granules no live slice outside the run touches) has those
// allocations moved into free room of the other pages that is mapped
// already, so the moves map nothing and the cleanup after the commit
// unmaps the freed granules. It is the granular counterpart of PlanHole:
// there a reservation fails for want of budget to map granules, and the
// free room that would give it back lies in pieces inside mapped granules.
// Moves copy at most CompactMovedPerFreed times the bytes freed. The
// candidates are each page's cheapest run, tried cheapest first (at most
// holeCandidates); CompactPlan.BytesFreed is the run's granule bytes.
func (p *Sliced) PlanUnmap(goal uint64, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	return compactScope{p}.unmap(goal, lim, st, g)
}

// unmapWindow is a run whose moving frees freed bytes of mapped granules.
type unmapWindow struct {
	holeWindow
	freed uint64
}

// unmapRuns bounds the runs one PlanUnmap gathers toward its goal: each
// costs a best-fit scan of the scope's free slices per move.
const unmapRuns = 64

// unmap is PlanUnmap over the scope: first the cheapest single run that
// frees the whole goal; failing that, runs of one granule or more gathered
// cheapest per byte freed first (a page that gave a run takes no targets,
// a page that took targets gives no run) until they free the goal together,
// or nothing when they cannot.
func (sc compactScope) unmap(goal uint64, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	var plan CompactPlan
	if lim.Spent() || sc.pageCount() < 2 {
		return relocation.New(nil), plan
	}
	if r, freed, ok := sc.unmapRunsToward(goal, true, lim, st, g); ok {
		plan.BytesFreed = freed
		return r, plan
	}
	if r, freed, ok := sc.unmapRunsToward(goal, false, lim, st, g); ok {
		plan.BytesFreed = freed
		return r, plan
	}
	return relocation.New(nil), plan
}

// unmapRunsToward plans runs until they free goal (one granule when 0):
// single, one run that frees it all (each page's cheapest such run a
// candidate, the cheapest tried first); otherwise each page's cheapest run
// of one granule, cheapest per byte freed first, gathered. All or nothing.
func (sc compactScope) unmapRunsToward(goal uint64, single bool, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, uint64, bool) {
	var cands []unmapWindow
	var at []scopePage
	for k, p := range sc {
		for i, pg := range p.pages {
			if pg.guarded() || pg.granule == 0 {
				continue
			}
			pg.coalesce(g)
			want := pg.granule
			if single {
				want = max(goal, pg.granule)
			}
			if w, ok := pg.cheapestUnmapWindow(len(at), want); ok && w.live > 0 && w.live <= CompactMovedPerFreed*w.freed {
				cands = append(cands, w)
				at = append(at, scopePage{k, i})
			}
		}
	}
	if single {
		slices.SortFunc(cands, func(x, y unmapWindow) int {
			if x.cheaper(y.holeWindow) {
				return -1
			}
			if y.cheaper(x.holeWindow) {
				return 1
			}
			return 0
		})
	} else {
		// Cheapest per byte freed: live·freed' < live'·freed.
		slices.SortStableFunc(cands, func(x, y unmapWindow) int {
			return compactSource{live: x.live, size: x.freed}.sparser(compactSource{live: y.live, size: y.freed})
		})
	}
	source, target := sc.marks(), sc.marks()
	var moves []relocation.Move
	var freed, bytes uint64
	tried := 0
	for _, w := range cands {
		if tried == unmapRuns || (single && tried == holeCandidates) {
			break
		}
		where := at[w.page]
		if target[where.k][where.i] {
			continue
		}
		if (lim.MaxBytes > 0 && bytes+w.live > lim.MaxBytes) || (lim.MaxMoves > 0 && len(moves)+w.moves > lim.MaxMoves) {
			continue
		}
		tried++
		pg := sc.page(where)
		var live []int
		for i := w.from; i <= w.to; i++ {
			if !pg.slices[i].h.IsFree() {
				live = append(live, i)
			}
		}
		was := source[where.k][where.i]
		source[where.k][where.i] = true
		mark := len(moves)
		var ok bool
		moves, ok, _ = sc.moveAway(pg, live, source, true, st, g, moves)
		if !ok {
			moves = releaseMoves(moves, mark)
			source[where.k][where.i] = was
			continue
		}
		for _, m := range moves[mark:] {
			loc := m.Target().Location()
			target[sc.index(loc.Pool())][loc.Page()] = true
		}
		freed += w.freed
		bytes += w.live
		if freed >= max(goal, 1) {
			return relocation.New(moves), freed, true
		}
		if single {
			break // a single run that frees less is not what was asked
		}
	}
	releaseMoves(moves, 0)
	return nil, 0, false
}

// cheapestUnmapWindow finds the page's run of adjacent slices (live ones
// unbound) whose moving frees at least want bytes of mapped granules and
// whose live slices hold the fewest requested bytes: two pointers, the run
// shrunk from the left while it still frees want. A run frees the mapped
// granules that lie wholly inside the free room it joins once its live
// slices are gone: from the first free slice before it to the last free
// one after it. The page's slices must be coalesced.
func (pg *page) cheapestUnmapWindow(index int, want uint64) (unmapWindow, bool) {
	best := unmapWindow{holeWindow: holeWindow{page: -1}}
	var live uint64
	moves, from := 0, 0
	for j := range pg.slices {
		s := &pg.slices[j]
		if !s.h.IsFree() && s.h.IsBound() {
			from, live, moves = j+1, 0, 0
			continue
		}
		if !s.h.IsFree() {
			live += s.Region.Size
			moves++
		}
		for from < j {
			t := &pg.slices[from]
			tl := uint64(0)
			if !t.h.IsFree() {
				tl = t.Region.Size
			}
			if pg.runFrees(from+1, j) < want {
				break
			}
			live -= tl
			if !t.h.IsFree() {
				moves--
			}
			from++
		}
		if f := pg.runFrees(from, j); f >= want {
			w := unmapWindow{holeWindow: holeWindow{page: index, from: from, to: j, live: live, moves: moves}, freed: f}
			if best.page < 0 || w.cheaper(best.holeWindow) {
				best = w
			}
		}
	}
	return best, best.page >= 0
}

// runFrees is the bytes of mapped granules that moving the live slices of
// [from, to] would free: those wholly inside the free room the run joins.
func (pg *page) runFrees(from, to int) uint64 {
	if from > to {
		return 0
	}
	for from > 0 && pg.slices[from-1].h.IsFree() {
		from--
	}
	for to+1 < len(pg.slices) && pg.slices[to+1].h.IsFree() {
		to++
	}
	start := pg.slices[from].Region.Offset
	end := pg.slices[to].Region.Offset + pg.slices[to].EffectiveSize()
	if to == len(pg.slices)-1 {
		end = pg.size()
	}
	first := (start + pg.granule - 1) / pg.granule
	last := end / pg.granule
	if end == pg.size() {
		last = uint64(len(pg.mapped))
	}
	var freed uint64
	for k := first; k < last; k++ {
		if pg.mapped[k] {
			freed += pg.granuleBytes(int(k))
		}
	}
	return freed
}

// CanUnmap reports, without planning, whether PlanUnmap might free a
// granule: two unguarded granular pages or more, with free room inside
// their mapped granules. O(slices + granules).
func (p *Sliced) CanUnmap() bool { return compactScope{p}.canUnmap(nil) }

// canUnmap is CanUnmap over the scope, in view v (nil: as it is).
func (sc compactScope) canUnmap(v *View) bool {
	n := 0
	var free uint64
	for _, p := range sc {
		for _, pg := range p.pages {
			if pg.guarded() || pg.granule == 0 || !v.present(pg) {
				continue
			}
			n++
			mapped := pg.size() - v.unmappedBytes(pg)
			free += mapped - min(mapped, v.occupied(pg))
		}
	}
	return n >= 2 && free > 0
}

// PlanUnmapWith is Sliced.PlanUnmap over the arena's pools and other: a
// run on any of their pages, its allocations moved into mapped room on any
// other (a small allocation may land on an arena page, an arena one on a
// small page). On granular storage the budget is the device's, whichever
// pool frees the granule: a lone small-pool page's free granule can only
// be given back by moving its few live slices into another pool's room.
// CommitWith lands it.
func (a *Arena) PlanUnmapWith(other *Sliced, goal uint64, lim CompactLimits, st storage.Storage, g *handle.ErrorGraph) (*relocation.Relocation, CompactPlan) {
	return append(a.scope(), other).unmap(goal, lim, st, g)
}

// CanUnmapWith is Sliced.CanUnmap over the arena's pools and other.
func (a *Arena) CanUnmapWith(other *Sliced) bool { return a.CanUnmapWithIn(nil, other) }

// CanUnmapWithIn is CanUnmapWith in a dry run's view.
func (a *Arena) CanUnmapWithIn(v *View, other *Sliced) bool {
	return append(a.scope(), other).canUnmap(v)
}

// CommitWith lands a copied plan of PlanUnmapWith: every move re-pointed
// whichever of the arena's pools or other its source and target lie in,
// then the arena's emptied outdated pages drained.
func (a *Arena) CommitWith(other *Sliced, l *relocation.Landed, st storage.Storage, g *handle.ErrorGraph) {
	if !l.Valid() {
		panic("pool: Commit of a Landed that did not come from Relocation.Copy")
	}
	sliceAt := func(loc handle.Location) *Slice {
		if loc.Pool() == other.index {
			return other.Slice(loc)
		}
		return a.sliceAt(loc)
	}
	commitMoves(l, sliceAt, &a.Current().spares, g)
	a.Drain(st, g)
}
