package pool

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// Holding free room: a sealed graph whose recording reused a freed buffer's
// slice writes that room at every launch, though no buffer owns it any
// more. HoldFree carves the free parts of such a range into slices of their
// own and binds each, so the room is neither carved again, coalesced,
// released, unmapped nor moved (a bound slice is not free, and a page
// holding one is not emptied), while the rest of the page serves as usual:
// the graph keeps the bytes it writes, not the whole page (design §10.3).

// HoldFree binds region on page (the page's own region and offsets, as
// Slice.Region has them): each free part carved into a slice of its own
// first, each taken slice overlapping it as it is, and returns the
// bindings; releasing one lets its slice go. A taken slice is bound too
// because its owner may free it while the graph still writes there (a
// buffer the recording placed on the room and freed while a hold or
// another stream's use kept it). On granular storage the range's granules
// are mapped (a refusal is returned, nothing held). An unknown page, or a
// region of another page, returns an error and holds nothing.
func (p *Sliced) HoldFree(st storage.Storage, page uint32, region storage.Region) ([]*handle.Binding, error) {
	if int64(page) >= int64(len(p.pages)) {
		return nil, fmt.Errorf("pool %d has no page %d", p.index, page)
	}
	if pg := p.pages[page]; region.ID == pg.region.ID {
		return pg.holdFree(st, region)
	}
	return nil, fmt.Errorf("pool %d page %d is region %d, not %d", p.index, page, p.pages[page].region.ID, region.ID)
}

func (p *page) holdFree(st storage.Storage, r storage.Region) ([]*handle.Binding, error) {
	if r.Size == 0 {
		return nil, nil
	}
	if err := p.back(st, r.Offset, r.Size); err != nil {
		return nil, err
	}
	p.invalidate() // held slices are no free room (PL33's index)
	var held []*handle.Binding
	for i := 0; i < len(p.slices); i++ {
		s := &p.slices[i]
		start, end := s.Region.Offset, s.Region.Offset+s.EffectiveSize()
		lo, hi := max(start, r.Offset), min(end, r.End())
		if lo >= hi {
			continue
		}
		if !s.h.IsFree() {
			held = append(held, s.h.Binding())
			continue
		}
		if lo > start {
			p.split(i, lo-start)
			i++ // the part from lo on
		}
		if hi < p.slices[i].Region.Offset+p.slices[i].EffectiveSize() {
			p.split(i, hi-lo)
		}
		held = append(held, p.slices[i].h.Binding())
		p.empty = false
	}
	return held, nil
}

// split divides free slice i at front bytes into two free slices, the
// second with a descriptor of its own, renumbering the slices after it
// (PL3). PL4's bounds stay bounds: nothing became free, nothing grew.
func (p *page) split(i int, front uint64) {
	p.invalidate()
	s := &p.slices[i]
	eff := s.EffectiveSize()
	rest := Slice{
		Region: storage.Region{ID: p.region.ID, Offset: s.Region.Offset + front, Size: eff - front},
		h:      p.spares.New(p.loc(i+1), &p.changed),
	}
	s.Region.Size, s.Padding = front, 0
	p.slices = append(p.slices, Slice{})
	copy(p.slices[i+2:], p.slices[i+1:])
	p.slices[i+1] = rest
	p.relocate(i + 2)
}
