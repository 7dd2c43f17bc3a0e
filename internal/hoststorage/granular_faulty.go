// Faulty over a granular storage: reservations and granule mappings refused
// on cue (design of granular storage in granular.go).
//
// A reservation is an allocation of address space: RefuseNextAllocs and
// RefuseAllocIf refuse it as they refuse Alloc; it takes no bytes, so
// RefuseAllocAbove never does. A mapping takes bytes: RefuseAllocAbove
// refuses one that would take BytesAllocated above its total, and
// RefuseNextMaps refuses the next n mappings outright. A refusal changes
// nothing in the inner storage (G2).

package hoststorage

import (
	"fmt"

	"github.com/gpumem/gpumem/storage"
)

// RefuseNextMaps refuses the next n Map calls.
func (f *Faulty) RefuseNextMaps(n int) {
	f.mu.Lock()
	f.nextMaps = n
	f.mu.Unlock()
}

// Granule implements Granular: the inner storage's granule, 0 when it maps
// none.
func (f *Faulty) Granule() uint64 { return storage.GranuleOf(f.inner) }

// Reserve implements Granular, refusing on the allocation cues.
func (f *Faulty) Reserve(size uint64) (storage.Region, error) {
	g, ok := f.inner.(storage.Granular)
	if !ok || g.Granule() == 0 {
		return storage.Region{}, fmt.Errorf("%w: reserving %d bytes", storage.ErrNotGranular, size)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	refuse := false
	switch {
	case f.nextAllocs > 0:
		f.nextAllocs--
		refuse = true
	case f.allocIf != nil && f.allocIf(size):
		refuse = true
	}
	if refuse {
		return storage.Region{}, f.refuseLocked(&storage.OutOfMemoryError{Requested: size, Allocated: f.inner.BytesAllocated(), Capacity: f.allocAbove})
	}
	return g.Reserve(size)
}

// Map implements Granular, refusing on RefuseNextMaps and RefuseAllocAbove.
func (f *Faulty) Map(id storage.ID, first, n uint64) error {
	g, ok := f.inner.(storage.Granular)
	if !ok || g.Granule() == 0 {
		return fmt.Errorf("%w: mapping granules of allocation %d", storage.ErrNotGranular, id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	bytes := n * g.Granule()
	refuse := false
	switch {
	case f.nextMaps > 0:
		f.nextMaps--
		refuse = true
	case f.allocAbove != 0 && storage.SatAdd(f.inner.BytesAllocated(), bytes) > f.allocAbove:
		refuse = true
	}
	if refuse {
		return f.refuseLocked(&storage.OutOfMemoryError{Requested: bytes, Allocated: f.inner.BytesAllocated(), Capacity: f.allocAbove})
	}
	return g.Map(id, first, n)
}

// Unmap implements Granular.
func (f *Faulty) Unmap(id storage.ID, first, n uint64) {
	if g, ok := f.inner.(storage.Granular); ok {
		g.Unmap(id, first, n)
	}
}

// BytesReserved implements Granular: the inner storage's address space, or
// its allocated bytes when it maps no granules.
func (f *Faulty) BytesReserved() uint64 {
	if g, ok := f.inner.(storage.Granular); ok {
		return g.BytesReserved()
	}
	return f.inner.BytesAllocated()
}
