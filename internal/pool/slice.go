package pool

import (
	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// Slice is a contiguous window of a page: its region (offset and requested
// size), the alignment padding after it, an opaque cursor the caller stores
// with the bytes, and the handle of the allocation on it. The slice's own
// handle is one reference; the slice is free when no other reference exists.
type Slice struct {
	Region  storage.Region
	Padding uint64
	// Cursor is opaque to pools: set by Bind, carried by relocation, zero on
	// fresh slices. The root stores the owner stream's sequence number of the
	// buffer's last use.
	Cursor uint64
	h      *handle.Handle
	taint  *handle.Taint
}

// EffectiveSize is Region.Size plus Padding: the bytes the slice takes from
// its page.
func (s *Slice) EffectiveSize() uint64 { return s.Region.Size + s.Padding }

// padded returns the padding after size bytes at alignment align and the
// effective size (size plus padding, saturating), as storage.Padding and
// SatAdd give them. A power-of-two alignment (every device's) takes a mask:
// the general case's two divisions cost about 4.5 ns, and a reservation
// asks several times.
func padded(size, align uint64) (pad, need uint64) {
	if align != 0 && align&(align-1) == 0 {
		pad = -size & (align - 1)
	} else {
		pad = storage.Padding(size, align)
	}
	return pad, storage.SatAdd(size, pad)
}

// Handle returns the slice's own handle.
func (s *Slice) Handle() *handle.Handle { return s.h }

// IsFree reports whether only the pool refers to the slice.
func (s *Slice) IsFree() bool { return s.h.IsFree() }

// Taint returns the failure marks on the slice's bytes (nil: none).
func (s *Slice) Taint() *handle.Taint { return s.taint }

// SetTaint replaces the slice's marks; the caller owns the old ones.
func (s *Slice) SetTaint(t *handle.Taint) { s.taint = t }

// clearTaint releases the slice's marks from the error graph.
func (s *Slice) clearTaint(g *handle.ErrorGraph) {
	if s.taint != nil {
		s.taint.Clear(g)
		s.taint = nil
	}
}

// Bind says who takes the slice a reservation finds. The zero Bind: nobody
// yet; the reservation returns a clone of the slice's own handle, which the
// caller binds to its buffer later (memory.Manager.Bind, through a lookup)
// and releases. With To set (a buffer's handle, never placed), the slice
// carries To's allocation at once (Rebind, with Cursor) and the reservation
// returns To itself: no clone, no lookup. Every reservation takes one, so
// each search is written once for both.
type Bind struct {
	To     *handle.Handle
	Cursor uint64
}

// take hands slice s to b and returns the handle that holds it for the
// caller: b.To once bound, else a clone of the slice's handle.
func (b Bind) take(s *Slice, g *handle.ErrorGraph) *handle.Handle {
	if b.To == nil {
		return s.h.Clone()
	}
	s.Rebind(b.To, b.Cursor, g)
	return b.To
}

// Rebind makes the slice carry the allocation of assigned: the slice's taint
// is cleared, its handle swapped for a clone of assigned (whose descriptor
// takes the slice's location), and its cursor set. The slice's previous
// handle is released; the caller still holds and must release the reserved
// clone it got from the reservation.
func (s *Slice) Rebind(assigned *handle.Handle, cursor uint64, g *handle.ErrorGraph) {
	loc := s.h.Location()
	s.clearTaint(g)
	old := s.h
	s.h = assigned.Clone()
	assigned.Descriptor().SetLocation(loc)
	// The page's free signal follows the allocation onto the slice; the
	// old descriptor no longer lives on a slice and must not raise it.
	assigned.Descriptor().SignalFree(old.Descriptor().FreeSignal())
	old.Descriptor().SignalFree(nil)
	old.Release()
	s.Cursor = cursor
}
