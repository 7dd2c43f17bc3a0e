// Page layouts: what a pool holds, page by page and slice by slice, for a
// caller that draws memory (the root's PyTorch snapshot, design §13.5).
//
// A layout is a copy taken under the device lock: it names each page's
// storage allocation, which of its granules are mapped, and its slices in
// offset order with the descriptor of the allocation on each. The slices
// tile the page (PL2): a sliced page's slices cover [0, page size) by their
// effective sizes; a slot's one slice is followed, when the allocation is
// larger than the slice's effective size, by Rest bytes nothing uses.

package pool

import (
	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// PageLayout is one storage allocation of a pool.
type PageLayout struct {
	Pool   uint8
	Region storage.Region // the whole allocation (Offset 0 from its base)
	// Granule is the mapping granule (0: the allocation is backed whole);
	// Mapped[k] says granule k is mapped. Mapped is the caller's.
	Granule uint64
	Mapped  []bool
	Slices  []SliceLayout
	// Rest is the allocation's bytes after the last slice: a slot larger
	// than its slice's effective size (exclusive pages sized by an
	// average). 0 on sliced pages, whose slices tile them.
	Rest uint64
}

// SliceLayout is one slice of a page: [Offset, Offset+Size) requested,
// Padding after it, and the descriptor of the allocation on it (read its ID,
// Handles and Refs under the device lock; the slice is free when Refs ≤ 1).
type SliceLayout struct {
	Offset, Size, Padding uint64
	Desc                  *handle.Descriptor
}

// Layouter is a pool that can describe its pages. Every pool of this
// package is one.
type Layouter interface {
	// Layout calls visit with each page in index order.
	Layout(visit func(PageLayout))
}

var (
	_ Layouter = (*Sliced)(nil)
	_ Layouter = (*Exclusive)(nil)
	_ Layouter = (*Direct)(nil)
	_ Layouter = (*Persistent)(nil)
)

// Layout implements Layouter.
func (p *Sliced) Layout(visit func(PageLayout)) {
	for _, pg := range p.pages {
		l := PageLayout{Pool: p.index, Region: pg.region, Granule: pg.granule, Slices: make([]SliceLayout, len(pg.slices))}
		if pg.granule > 0 {
			l.Mapped = append([]bool(nil), pg.mapped...)
		}
		for i := range pg.slices {
			s := &pg.slices[i]
			l.Slices[i] = SliceLayout{Offset: s.Region.Offset - pg.region.Offset, Size: s.Region.Size, Padding: s.Padding, Desc: s.h.Descriptor()}
		}
		visit(l)
	}
}

// Layout implements Layouter.
func (p *Exclusive) Layout(visit func(PageLayout)) {
	for _, pg := range p.pages {
		visit(pg.slot.layout(p.index))
	}
}

// Layout implements Layouter; vacant indices are skipped.
func (p *Direct) Layout(visit func(PageLayout)) {
	for _, sl := range p.slots {
		if sl != nil {
			visit(sl.layout(p.index))
		}
	}
}

// Layout implements Layouter.
func (p *Persistent) Layout(visit func(PageLayout)) {
	for _, sl := range p.slots {
		visit(sl.layout(PersistentIndex))
	}
}

// layout describes a slot: one slice at offset 0, the rest of the
// allocation after it.
func (sl *slot) layout(pool uint8) PageLayout {
	eff := sl.s.EffectiveSize()
	return PageLayout{
		Pool:   pool,
		Region: storage.Region{ID: sl.s.Region.ID, Offset: sl.s.Region.Offset, Size: sl.allocSize},
		Slices: []SliceLayout{{Size: sl.s.Region.Size, Padding: sl.s.Padding, Desc: sl.s.h.Descriptor()}},
		Rest:   sl.allocSize - min(eff, sl.allocSize),
	}
}
