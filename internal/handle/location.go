package handle

import (
	"errors"
	"fmt"
)

// Location packs where an allocation lives into one word, so rewriting it
// (renumbering, relocation) is one store:
//
//	bit 63      placed
//	bits 55–62  pool  (8 bits)
//	bits 31–54  page  (24 bits)
//	bits 0–30   slice (31 bits)
//
// The zero Location (Uninit) was never placed.
type Location uint64

const (
	// Uninit is the location of an allocation that was never placed.
	Uninit Location = 0
	// MaxPage is the largest page index a Location holds.
	MaxPage = 1<<24 - 1
	// MaxSlice is the largest slice index a Location holds.
	MaxSlice = 1<<31 - 1

	placedBit = 1 << 63
	poolShift = 55
	pageShift = 31
	sliceMask = MaxSlice
	pageMask  = MaxPage
	poolMask  = 0xff
)

// ErrIndexOverflow is returned when a page or slice index would exceed its
// field in a Location. The pool refuses the reservation and changes nothing;
// free memory (fewer, larger pages) or use a larger page size.
var ErrIndexOverflow = errors.New("handle: page or slice index overflow")

// ErrNotFound is returned when a reference does not resolve: never placed, no
// slice at its location, or the slice there belongs to another allocation.
var ErrNotFound = errors.New("handle: allocation not found")

// NewLocation packs pool, page and slice, or returns ErrIndexOverflow.
func NewLocation(pool uint8, page, slice uint32) (Location, error) {
	if page > MaxPage {
		return Uninit, fmt.Errorf("%w: page index %d exceeds %d", ErrIndexOverflow, page, MaxPage)
	}
	if slice > MaxSlice {
		return Uninit, fmt.Errorf("%w: slice index %d exceeds %d", ErrIndexOverflow, slice, MaxSlice)
	}
	return Location(placedBit | uint64(pool)<<poolShift | uint64(page)<<pageShift | uint64(slice)), nil
}

// MustLocation is NewLocation for indices the caller already bounds-checked;
// it panics on overflow (an internal bug).
func MustLocation(pool uint8, page, slice int) Location {
	if page < 0 || slice < 0 {
		panic(fmt.Sprintf("handle: negative index page %d slice %d", page, slice))
	}
	l, err := NewLocation(pool, uint32(min(page, MaxPage+1)), uint32(min(slice, MaxSlice+1)))
	if err != nil {
		panic(err)
	}
	return l
}

// Placed reports whether the location was ever set.
func (l Location) Placed() bool { return l&placedBit != 0 }

// Pool returns the pool index.
func (l Location) Pool() uint8 { return uint8(uint64(l) >> poolShift & poolMask) }

// Page returns the page index.
func (l Location) Page() uint32 { return uint32(uint64(l) >> pageShift & pageMask) }

// Slice returns the slice index.
func (l Location) Slice() uint32 { return uint32(uint64(l) & sliceMask) }

// WithPage returns l with its page index replaced.
func (l Location) WithPage(page int) Location { return MustLocation(l.Pool(), page, int(l.Slice())) }

// WithSlice returns l with its slice index replaced.
func (l Location) WithSlice(slice int) Location { return MustLocation(l.Pool(), int(l.Page()), slice) }

func (l Location) String() string {
	if !l.Placed() {
		return "uninit"
	}
	return fmt.Sprintf("pool %d page %d slice %d", l.Pool(), l.Page(), l.Slice())
}
