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
