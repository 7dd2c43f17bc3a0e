package pool

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// Room set aside for one owner: a capture's recording (design §10.2).
//
// A capture rehearses its warmup before it records, so that the pools hold
// room laid out as the recording needs it. Left free between the rehearsal
// and the recording's reservations, that room is anyone's: a page guard
// another graph takes when it seals freezes it (a guarded page serves
// nothing new), and whatever else may carve, release or unmap free room
// could take it. A Room keeps it bound instead — byte ranges of the pool's
// pages, each free part carved into a slice of its own and bound, as
// HoldFree does for a sealed graph — so none of that reaches it, and its
// owner carves from it at the offsets it chooses (TakeAt, TakeFirst) and
// gives slices back to it (Give).
//
// A page guard taken while room is held on the page does not freeze that
// room (PL34): the room was bound, not free, when the guard was taken, so
// the guard's holder holds no address of it, and carving it only divides
// bound room between its owner's allocations. Room is never set aside on a
// page already guarded (Hold skips taken and guarded room).

// ErrRoomTaken is returned by Room.TakeAt when the bytes asked for are not
// all held by the room: its owner took them already, or they were never
// set aside.
var ErrRoomTaken = errors.New("pool: the room asked for is not held")

// Room is room of one sliced pool held for one owner. Its methods run under
// the caller's lock, as every pool's.
type Room struct {
	p      *Sliced
	served func(size uint64) // notes a reservation served from the room
	pages  []*roomPage
}

// roomPage is the room held on one page: sorted, disjoint, non-adjacent
// byte ranges (offsets of the page's region) and the bindings that hold
// them.
type roomPage struct {
	id    storage.ID
	spans []span
	held  []*handle.Binding
}

// span is a byte range [lo, hi) of a page's region.
type span struct{ lo, hi uint64 }

// HoldRoom sets the ranges aside (each a region of one of the pool's pages:
// its ID, offset and size): the free bytes of each, on unguarded pages, are
// carved into slices of their own and bound; taken bytes and guarded pages
// are left out. On granular storage the ranges' granules are mapped (a
// refusal is returned and nothing is held). A range on no page of the pool
// is an error.
func (p *Sliced) HoldRoom(st storage.Storage, ranges []storage.Region, g *handle.ErrorGraph) (*Room, error) {
	r := &Room{p: p, served: p.served}
	byID := map[storage.ID]*roomPage{}
	for _, reg := range ranges {
		if reg.Size == 0 {
			continue
		}
		pg := p.pageOf(reg.ID)
		if pg == nil || reg.Offset < pg.region.Offset || reg.End() > pg.region.End() {
			return nil, fmt.Errorf("pool %d holds no page with the range %d+[%d, %d)", p.index, reg.ID, reg.Offset, reg.End())
		}
		if pg.guarded() {
			continue
		}
		rp := byID[reg.ID]
		if rp == nil {
			rp = &roomPage{id: reg.ID}
			byID[reg.ID] = rp
			r.pages = append(r.pages, rp)
		}
		rp.spans = addSpan(rp.spans, span{reg.Offset, reg.End()})
	}
	for _, rp := range r.pages {
		pg := p.pageOf(rp.id)
		for _, s := range rp.spans {
			if err := pg.back(st, s.lo, s.hi-s.lo); err != nil {
				r.Release()
				return nil, err
			}
		}
		if err := r.hold(pg, rp, g); err != nil {
			r.Release()
			return nil, err
		}
	}
	// Pages in the pool's order, so TakeFirst is first fit across pages.
	slices.SortFunc(r.pages, func(a, b *roomPage) int { return p.pageOf(a.id).index - p.pageOf(b.id).index })
	return r, nil
}

// HoldRoom is Sliced.HoldRoom on the arena's pool at index, which must be
// the current one (an outdated pool serves nothing, PL26): reservations
// served from the room count in what the arena served, as TryReserve's do.
func (a *Arena) HoldRoom(st storage.Storage, index uint8, ranges []storage.Region, g *handle.ErrorGraph) (*Room, error) {
	p := a.Pool(index)
	if p == nil || p != a.Current() {
		return nil, fmt.Errorf("arena pool %d is not the current one", index)
	}
	r, err := p.HoldRoom(st, ranges, g)
	if err != nil {
		return nil, err
	}
	r.served = func(size uint64) {
		p.served(size)
		a.record(size)
	}
	return r, nil
}

// pageOf returns the pool's page whose region is id, or nil.
func (p *Sliced) pageOf(id storage.ID) *page {
	for _, pg := range p.pages {
		if pg.region.ID == id {
			return pg
		}
	}
	return nil
}

// hold binds the free bytes of rp's spans on pg, one slice each, and keeps
// in rp.spans only the bytes it bound: a taken slice inside a span (none is
// expected: the room's own allocations leave it when taken) is left out.
func (r *Room) hold(pg *page, rp *roomPage, g *handle.ErrorGraph) error {
	var kept []span
	for _, s := range rp.spans {
		for i := 0; i < len(pg.slices); i++ {
			sl := &pg.slices[i]
			start, end := sl.Region.Offset, sl.Region.Offset+sl.EffectiveSize()
			lo, hi := max(start, s.lo), min(end, s.hi)
			if lo >= hi {
				continue
			}
			if !sl.h.IsFree() {
				continue
			}
			if lo > start {
				pg.split(i, lo-start)
				i++ // the part from lo on
			}
			if hi < pg.slices[i].Region.Offset+pg.slices[i].EffectiveSize() {
				pg.split(i, hi-lo)
			}
			// A freed buffer's descriptor leaves the slice, as merging
			// would drop it: the room holds bytes, not that buffer.
			pg.renew(i, g)
			rp.held = append(rp.held, pg.slices[i].h.Binding())
			kept = addSpan(kept, span{lo, hi})
		}
	}
	rp.spans = kept
	pg.invalidate() // held slices are no free room (PL33's index)
	if len(rp.held) > 0 {
		pg.empty = false
	}
	return nil
}

// letGo releases the bindings holding rp's spans: their slices are free,
// for the caller to carve and hold again under the same lock.
func (rp *roomPage) letGo() {
	for _, b := range rp.held {
		b.Release()
	}
	rp.held = nil
}

// TakeAt carves a reservation of size bytes at offset off of the page
// whose region is id, from the room, and returns a clone of its slice's
// handle (bind it and release the clone, as after TryReserve). The bytes
// the reservation takes with its padding must all be held; otherwise
// ErrRoomTaken is returned and nothing changed. A page guard taken since
// the room was set aside does not stop it (PL34).
func (r *Room) TakeAt(st storage.Storage, id storage.ID, off, size uint64, g *handle.ErrorGraph) (*handle.Handle, error) {
	pad, need := padded(size, r.p.align)
	rp, pg, ok := r.holds(id, off, need)
	if !ok {
		return nil, fmt.Errorf("%w: %d bytes at offset %d of region %d", ErrRoomTaken, need, off, id)
	}
	if err := pg.back(st, off, need); err != nil { // mapped while held (PL6): no storage call
		return nil, err
	}
	rp.letGo()
	pg.coalesce(g)
	i := pg.freeSliceAt(off)
	if start := pg.slices[i].Region.Offset; off > start {
		pg.split(i, off-start)
		i++
	}
	pg.carve(i, size, pad)
	h := pg.slices[i].h.Clone()
	rp.spans = removeSpan(rp.spans, span{off, off + need})
	_ = r.hold(pg, rp, g) // free bytes it carved just now: nothing refuses
	r.served(size)
	return h, nil
}

// holds reports whether the room holds need bytes at offset off of the
// page whose region is id: what TakeAt asks before it carves (held room is
// mapped, PL6, so nothing after it refuses), and CanTakeAt asks alone.
func (r *Room) holds(id storage.ID, off, need uint64) (*roomPage, *page, bool) {
	rp, pg := r.page(id)
	return rp, pg, rp != nil && covers(rp.spans, span{off, off + need})
}

// CanTakeAt reports, changing nothing, whether TakeAt(id, off, size) would
// serve size.
func (r *Room) CanTakeAt(id storage.ID, off, size uint64) bool {
	_, need := padded(size, r.p.align)
	_, _, ok := r.holds(id, off, need)
	return ok
}

// CanTakeFirst reports, changing nothing, whether TakeFirst would serve
// size: a held range holds it.
func (r *Room) CanTakeFirst(size uint64) bool {
	_, need := padded(size, r.p.align)
	for _, rp := range r.pages {
		for _, s := range rp.spans {
			if s.hi-s.lo >= need {
				return true
			}
		}
	}
	return false
}

// TakeFirst carves a reservation of size bytes at the start of the first
// held range that holds it (pages in the pool's order, ranges in offset
// order), or returns nil with nothing changed.
func (r *Room) TakeFirst(st storage.Storage, size uint64, g *handle.ErrorGraph) *handle.Handle {
	_, need := padded(size, r.p.align)
	for _, rp := range r.pages {
		for _, s := range rp.spans {
			if s.hi-s.lo >= need {
				if h, err := r.TakeAt(st, rp.id, s.lo, size, g); err == nil {
					return h
				}
			}
		}
	}
	return nil
}

// Give sets the slice at loc aside again, once it is free (its allocation
// was freed: the owner's own, whose room it reuses). A slice that is not
// free, or not on the pool, is left alone and false returned.
func (r *Room) Give(loc handle.Location, g *handle.ErrorGraph) bool {
	sl := r.p.Slice(loc)
	if sl == nil || !sl.h.IsFree() {
		return false
	}
	pg := r.p.pages[loc.Page()]
	rp, _ := r.page(pg.region.ID)
	if rp == nil {
		rp = &roomPage{id: pg.region.ID}
		r.pages = append(r.pages, rp)
		slices.SortFunc(r.pages, func(a, b *roomPage) int { return r.p.pageOf(a.id).index - r.p.pageOf(b.id).index })
	}
	rp.letGo()
	rp.spans = addSpan(rp.spans, span{sl.Region.Offset, sl.Region.Offset + sl.EffectiveSize()})
	_ = r.hold(pg, rp, g)
	return true
}

// Bytes is the room held.
func (r *Room) Bytes() uint64 {
	var n uint64
	for _, rp := range r.pages {
		for _, s := range rp.spans {
			n += s.hi - s.lo
		}
	}
	return n
}

// Release lets go of every range: its slices are free room of their pages
// again. It is idempotent.
func (r *Room) Release() {
	for _, rp := range r.pages {
		rp.letGo()
		rp.spans = nil
	}
	r.pages = nil
}

// page returns the room held on the page whose region is id, and that page
// (nil, nil: none).
func (r *Room) page(id storage.ID) (*roomPage, *page) {
	for _, rp := range r.pages {
		if rp.id == id {
			return rp, r.p.pageOf(id)
		}
	}
	return nil, nil
}

// freeSliceAt returns the index of the free slice holding offset off; the
// caller knows there is one.
func (p *page) freeSliceAt(off uint64) int {
	for i := range p.slices {
		s := &p.slices[i]
		if s.Region.Offset <= off && off < s.Region.Offset+s.EffectiveSize() {
			return i
		}
	}
	panic(fmt.Sprintf("pool: page %d holds no slice at offset %d", p.index, off))
}

// addSpan adds s to the sorted, disjoint, non-adjacent spans, merging what
// it touches.
func addSpan(spans []span, s span) []span {
	if s.lo >= s.hi {
		return spans
	}
	out := make([]span, 0, len(spans)+1)
	for _, t := range spans {
		switch {
		case t.hi < s.lo || s.hi < t.lo:
			out = append(out, t)
		default:
			s = span{min(s.lo, t.lo), max(s.hi, t.hi)}
		}
	}
	out = append(out, s)
	slices.SortFunc(out, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	return out
}

// removeSpan removes s from the spans, splitting the one that holds it.
func removeSpan(spans []span, s span) []span {
	out := make([]span, 0, len(spans)+1)
	for _, t := range spans {
		if t.hi <= s.lo || s.hi <= t.lo {
			out = append(out, t)
			continue
		}
		if t.lo < s.lo {
			out = append(out, span{t.lo, s.lo})
		}
		if s.hi < t.hi {
			out = append(out, span{s.hi, t.hi})
		}
	}
	return out
}

// covers reports whether one of the spans holds s whole.
func covers(spans []span, s span) bool {
	for _, t := range spans {
		if t.lo <= s.lo && s.hi <= t.hi {
			return true
		}
	}
	return false
}
