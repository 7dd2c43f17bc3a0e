// Granular storage: pages whose address range is reserved up front and backed
// in granules on demand.
//
// A plain Storage backs every byte of an allocation from Alloc to Dealloc. A
// page sized to the largest allocation then pays for the holes between its
// live slices. A Granular storage splits the two: Reserve takes address space
// for a page and backs none of it; Map backs whole granules of it (2 MiB by
// default: the driver's usual physical granularity) and Unmap gives them back.
// The page keeps its address throughout, so its slices' addresses never
// change; only the bytes no live slice holds stop costing memory.
//
//	(G1) BytesAllocated counts mapped granules (a whole granule each, even the
//	     partial last granule of a range: the device backs whole granules)
//	     plus plain allocations; the Budget charges exactly that. Reserved
//	     address space is BytesReserved and takes no budget.
//	(G2) Map is all or nothing: on error no granule of the call is mapped and
//	     nothing else changed (S3).
//	(G3) a granule mapped again after Unmap reads as zero; Resolve refuses a
//	     window that touches an unmapped granule, so a stale address fails
//	     loudly instead of reading memory that is not there.
//	(G4) Alloc on a Granular storage is a plain, fully backed allocation; only
//	     Reserve makes a range that maps granules.
//
// A storage that implements the interface may still decline at run time
// (Granule() == 0: an unsupported OS, an alignment the mapping cannot honour,
// or a wrapper hiding it); callers then use it as a plain Storage. GranuleOf
// folds both checks.
//
// The cuda backend implements it with cuMemAddressReserve (Reserve),
// cuMemCreate + cuMemMap + cuMemSetAccess per granule (Map: one physical
// allocation per granule, so any granule can be unmapped alone), cuMemUnmap +
// cuMemRelease (Unmap) and cuMemAddressFree after unmapping the rest
// (Dealloc). The host backend (internal/hoststorage) reserves an anonymous mmap
// and madvises released granules away; Sim keeps the accounting only.

package storage

import (
	"errors"
)

// ErrNotGranular is returned by Reserve, Map and Unmap of a storage that
// cannot map granules (Granule() == 0). Use the storage as a plain Storage.
var ErrNotGranular = errors.New("storage: storage does not map granules")

// Granular is a Storage that can reserve a page's address range without
// backing it and back it granule by granule. Every method is safe for
// concurrent use; the pools above call them under the device lock.
type Granular interface {
	Storage
	// Granule is the mapping unit in bytes; 0 means this storage maps no
	// granules (treat it as a plain Storage). It never changes.
	Granule() uint64
	// Reserve takes address space for size bytes and backs none of it. The
	// region (Offset 0) spans granules [0, ceil(size/Granule)). It takes no
	// budget. Dealloc releases it with whatever is still mapped. On error
	// nothing changed.
	Reserve(size uint64) (Region, error)
	// Map backs granules [first, first+n) of reservation id, each unmapped
	// before the call. On error (wrapping ErrOutOfMemory when the budget or
	// the device refuses, ErrUnknownRegion for a bad range) nothing is
	// mapped (G2).
	Map(id ID, first, n uint64) error
	// Unmap gives back the backing of granules [first, first+n) of
	// reservation id, each mapped before the call; they read as zero when
	// mapped again (G3). An unknown reservation is ignored.
	Unmap(id ID, first, n uint64)
	// BytesReserved is the address space held: reservations (rounded up to
	// the granule) plus plain allocations.
	BytesReserved() uint64
}

// GranuleOf returns st's mapping granule, or 0 when st maps no granules.
func GranuleOf(st Storage) uint64 {
	if g, ok := st.(Granular); ok {
		return g.Granule()
	}
	return 0
}

// Granules returns the granule range [first, first+n) that the window
// [off, off+size) touches, for a granule of g bytes; n is 0 for an empty
// window.
func Granules(off, size, g uint64) (first, n uint64) {
	if size == 0 || g == 0 {
		return off / max(g, 1), 0
	}
	first = off / g
	last := (SatAdd(off, size) - 1) / g
	return first, last - first + 1
}
