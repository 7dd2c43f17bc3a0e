// Package storage owns device allocations: whole regions of device (or host)
// memory handed out by a backend, and the capacity budget they share.
//
// # Owns
//
// The [Storage] interface, [Region], [Resource], the shared capacity [Budget],
// the [Host] backend (real aligned bytes: the embedded default), the [Sim]
// backend (accounting only, for replaying huge traces), the [Faulty] wrapper
// that refuses on cue for tests, the sentinels [ErrOutOfMemory],
// [ErrUnknownRegion] and [ErrDevicePoisoned], and the [RoundUp] / [Padding]
// arithmetic every layer above uses; and the optional [Granular] interface
// (reserve a page's address range, map and unmap its granules) with its host
// ([GranularHost]) and sim ([GranularSim]) implementations (granular.go).
//
// # Invariants
//
//   - (S1) An allocation ID is process-unique, starts at 1 and is never reused.
//   - (S2) BytesAllocated equals the sum of live allocations' sizes plus
//     queued deallocations; a Budget's use equals the sum over its storages.
//   - (S3) A refused Alloc changes nothing.
//   - (S4) Every non-empty Host allocation's base is a multiple of the
//     alignment; allocations never overlap.
//
// # Does not know
//
// Pages, slices, handles, streams or relocation: a storage hands out whole
// allocations and resolves windows of them; pools above decide placement.
//
// # Concurrency
//
// Every implementation here is safe for concurrent use. The device calls
// Alloc, Dealloc and Flush under its lock; Resolve may also be called by
// stream workers, so each storage guards its map with its own small lock.
package storage
