// The best fits of one page's moves, found in order (compactScope.fits).
//
// A compaction empties a page by giving each of its live slices the best
// fit (bestFit): the smallest free slice that holds it on the scope's other
// pages, the first in scope order on a tie. Asked slice by slice, that was
// a walk over every slice of every page per move: a 100-slice page of a
// 200-page forward pass read the scope's slices a hundred times, and the
// plans of a capacity search on whole pages spent most of their time there.
// Between two moves of one page only the move's own carve changes the free
// slices (nothing is released, no page comes or goes, the excluded pages
// stay excluded), so the free slices are listed once, by size then scope
// order, and each move takes the first that holds it and puts back its
// rest: the same targets, in the same order.

package pool

import (
	"cmp"
	"slices"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// fits hands out best fits for the moves of one page (moveAway,
// moveWhatFits) with the exclusions fixed: every call gives what bestFit
// would. On granular storage, with mappedOnly, or when the scope's pools
// differ in alignment (a slice's need would depend on the pool), it asks
// bestFit each time.
type fits struct {
	sc         compactScope
	exclude    [][]bool
	mappedOnly bool
	st         storage.Storage
	g          *handle.ErrorGraph
	listed     bool
	free       []freeSlot // by size, then scope order (k, i, offset)
}

// freeSlot is a free slice of page i of the scope's pool k: its effective
// size and offset.
type freeSlot struct {
	eff  uint64
	k, i int
	off  uint64
}

func compareSlots(a, b freeSlot) int {
	if c := cmp.Compare(a.eff, b.eff); c != 0 {
		return c
	}
	if a.k != b.k {
		return a.k - b.k
	}
	if a.i != b.i {
		return a.i - b.i
	}
	return cmp.Compare(a.off, b.off)
}

func (sc compactScope) fits(exclude [][]bool, mappedOnly bool, st storage.Storage, g *handle.ErrorGraph) *fits {
	return &fits{sc: sc, exclude: exclude, mappedOnly: mappedOnly, st: st, g: g}
}

// listable reports whether the free slices may be listed once: whole pages
// (a move maps nothing and the storage refuses nothing), every target
// allowed, one alignment.
func (f *fits) listable() bool {
	if f.mappedOnly || storage.GranuleOf(f.st) > 0 {
		return false
	}
	for _, p := range f.sc {
		if p.align != f.sc[0].align {
			return false
		}
	}
	return true
}

// take is bestFit(size): a clone of the target's handle and the bytes of
// granules it newly mapped, nil when none holds size.
func (f *fits) take(size uint64) (*handle.Handle, uint64) {
	if !f.listed {
		if !f.listable() {
			return f.sc.bestFit(size, f.exclude, f.mappedOnly, f.st, f.g)
		}
		f.list()
	}
	_, need := padded(size, f.sc[0].align)
	at, _ := slices.BinarySearchFunc(f.free, freeSlot{eff: need, k: -1}, compareSlots)
	if at == len(f.free) {
		return nil, 0
	}
	s := f.free[at]
	p := f.sc[s.k]
	pg := p.pages[s.i]
	j, _ := slices.BinarySearchFunc(pg.slices, s.off, func(sl Slice, off uint64) int { return cmp.Compare(sl.Region.Offset, off) })
	pad, _ := padded(size, p.align)
	pg.carve(j, size, pad)
	p.noFitKnown = false // PL29: the plan carved outside a scan
	f.free = slices.Delete(f.free, at, at+1)
	if rest := s.eff - need; rest > 0 {
		r := freeSlot{eff: rest, k: s.k, i: s.i, off: s.off + need}
		at, _ := slices.BinarySearchFunc(f.free, r, compareSlots)
		f.free = slices.Insert(f.free, at, r)
	}
	return pg.slices[j].h.Clone(), 0
}

// list coalesces every page a move may take room on, as bestFit's first
// call does, and lists its free slices.
func (f *fits) list() {
	f.listed = true
	for k, p := range f.sc {
		for i, pg := range p.pages {
			if pg.guarded() || f.exclude[k][i] {
				continue
			}
			pg.coalesce(f.g)
			for j := pg.firstFree; j < len(pg.slices); j++ {
				if s := &pg.slices[j]; s.h.IsFree() {
					f.free = append(f.free, freeSlot{eff: s.EffectiveSize(), k: k, i: i, off: s.Region.Offset})
				}
			}
		}
	}
	slices.SortFunc(f.free, compareSlots)
}
