// Package storage is what a backend implements for device memory: whole
// allocations handed out by a driver (or the host), the windows resolved
// in them, and the capacity budget the storages of one device share.
//
// # Owns
//
// The [Storage] interface, [Region], [Resource], [ID] and [NewID], the
// shared capacity [Budget], the sentinels [ErrOutOfMemory] (with the typed
// [OutOfMemoryError]), [ErrUnknownRegion], [ErrDevicePoisoned] and
// [ErrNotGranular]; the optional [Granular] interface (reserve a page's
// address range, map and unmap its granules, granular.go); and the size
// arithmetic a storage and the layers above share ([RoundUp], [Padding],
// [SatAdd], [SatSub], [Granules]), which never overflows.
//
// The storages the library makes itself (the host's real bytes, the
// simulation's accounting, their granular forms, the Faulty test wrapper)
// are not here: a user reaches them through gpumem.Open and its options,
// and a backend brings its own (package cuda, package vulkan).
//
// # Invariants
//
//   - (S1) An allocation ID is process-unique, starts at 1 and is never reused.
//   - (S2) BytesAllocated equals the sum of live allocations' sizes plus
//     queued deallocations; a Budget's use equals the sum over its storages.
//   - (S3) A refused Alloc changes nothing.
//   - (S4) Every non-empty allocation's base is a multiple of the
//     alignment; allocations never overlap.
//
// # Does not know
//
// Pages, slices, handles, streams or relocation: a storage hands out whole
// allocations and resolves windows of them; pools above decide placement.
//
// # Concurrency
//
// Every implementation must be safe for concurrent use. The device calls
// Alloc, Dealloc and Flush under its lock; Resolve may also be called by
// stream workers, so a storage guards its map with its own small lock.
package storage
