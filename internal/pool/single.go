package pool

import (
	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// slot is one storage allocation holding one slice: what the exclusive,
// direct and persistent pools share (design §4.3–§4.5). In these pools a
// "page" is one storage allocation holding exactly one slice, so a location
// is (pool, index, 0) (PL8–PL10 in the package doc).
//
// Releasing a slot clears its taint from the error graph, drops its handle
// (other owners' descriptors live on, pointed at by no slice) and gives the
// storage allocation back. Costs: every operation on one slot is O(1);
// scans and renumbering in the pools are O(slots).
type slot struct {
	s         Slice
	allocSize uint64 // bytes of the storage allocation (PL8)
}

// slotted lets the pools that extend slot share sweep and lookup.
type slotted interface{ base() *slot }

func (sl *slot) base() *slot { return sl }

// newSlot allocates allocSize bytes and returns them as one slot whose
// slice serves size bytes (padding to the alignment), at location
// (pool, index, 0). On a storage refusal nothing is allocated.
func newSlot(st storage.Storage, allocSize, size, align uint64, pool uint8, index int) (*slot, error) {
	r, err := st.Alloc(allocSize)
	if err != nil {
		return nil, err
	}
	sl := &slot{allocSize: allocSize}
	sl.s = Slice{
		Region:  storage.Region{ID: r.ID, Offset: r.Offset, Size: size},
		Padding: storage.Padding(size, align),
		h:       handle.New(handle.MustLocation(pool, index, 0)),
	}
	return sl, nil
}

// free reports whether only the pool refers to the slot's allocation (PL10).
func (sl *slot) free() bool { return sl.s.h.IsFree() }

// reserve sets the slice window to size with its padding and hands the
// slice to to (Bind.take). The caller has checked the slot is free and that
// size plus padding fits allocSize (PL8).
func (sl *slot) reserve(size, align uint64, to Bind, g *handle.ErrorGraph) *handle.Handle {
	sl.s.Region.Size = size
	sl.s.Padding, _ = padded(size, align)
	return to.take(&sl.s, g)
}

// setIndex renumbers the slot, rewriting its descriptor (PL9).
func (sl *slot) setIndex(pool uint8, index int) {
	loc := handle.MustLocation(pool, index, 0)
	if sl.s.h.Location() != loc {
		sl.s.h.Descriptor().SetLocation(loc)
	}
}

// release drops the slot: taint cleared, handle released, storage given
// back. The slot must not be used afterwards.
func (sl *slot) release(st storage.Storage, g *handle.ErrorGraph) {
	sl.s.clearTaint(g)
	sl.s.h.Release()
	sl.s.h = nil
	st.Dealloc(sl.s.Region.ID)
}

// guard returns an allocation guard: a binding of the slice, which keeps it
// from being free (PL10).
func (sl *slot) guard() *PageGuard { return newAllocationGuard(sl.s.h.Binding()) }

// addUsage adds the slot to u: reserved is allocSize, and its slice counts
// as Usage.addSlice says.
func (sl *slot) addUsage(u *Usage) {
	u.BytesReserved += sl.allocSize
	u.addSlice(&sl.s)
}

// slotAt returns the slice at loc among slots of pool, or nil: wrong pool,
// index out of range, a vacant index (nil entry) or a slice index other
// than 0.
func slotAt[T slotted](slots []T, pool uint8, loc handle.Location) *slot {
	if !loc.Placed() || loc.Pool() != pool || loc.Slice() != 0 || int64(loc.Page()) >= int64(len(slots)) {
		return nil
	}
	return slots[loc.Page()].base()
}

// sweep releases every slot for which drop reports true and renumbers the
// survivors densely in order (PL9). It returns the kept slots (reusing the
// backing array) and the slots and bytes given back.
func sweep[T slotted](slots []T, pool uint8, st storage.Storage, g *handle.ErrorGraph, drop func(T) bool) (kept []T, released int, bytes uint64) {
	out := 0
	for _, it := range slots {
		sl := it.base()
		if drop(it) {
			released++
			bytes += sl.allocSize
			sl.release(st, g)
			continue
		}
		sl.setIndex(pool, out)
		slots[out] = it
		out++
	}
	clear(slots[out:])
	return slots[:out], released, bytes
}

// checkSlot verifies PL8 and PL9 for the slot at index i; it returns a
// description of the first broken invariant, or "".
func checkSlot(sl *slot, pool uint8, i int) string {
	if got, want := sl.s.h.Location(), handle.MustLocation(pool, i, 0); got != want {
		return "carries location " + got.String() + ", want " + want.String() + " (PL9)"
	}
	if sl.s.EffectiveSize() > sl.allocSize {
		return "slice window exceeds its allocation (PL8)"
	}
	return ""
}
