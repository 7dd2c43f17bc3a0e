// Package handle owns identity and per-allocation bookkeeping: who refers to
// an allocation, where it currently lives, and which of its bytes a failure
// left unwritten.
//
// # Owns
//
// [ID], [Location] (packing, bounds, [ErrIndexOverflow]), the shared
// [Descriptor] with its two explicit counters, [Handle] (an owner) and
// [Binding] (a holder of the address, not an owner), the [Recycler] of
// dead descriptors' cells and the keys that hold a cell back from it, the
// predicates IsFree,
// CanMut and IsBound, the free signal and its watches
// ([Descriptor.WatchRelease]: told at the release that leaves an
// allocation free) and its listener ([Signal.OnRaise]: told each time the
// signal rises), [ErrNotFound], and failure bookkeeping: [FailureID],
// [ErrorGraph] and [Taint] (design §11).
//
// # Invariants
//
//   - (H1) refs counts every live Handle and Binding object of a descriptor,
//     handles counts the Handle objects; every clone is a distinct object
//     released exactly once (a second Release panics).
//   - (H2) Free ⇔ refs ≤ 1: only the pool's slice refers to the allocation.
//     CanMut ⇔ handles ≤ 2. IsBound ⇔ refs > handles.
//   - (H3) Allocation IDs start at 1 and are never reused, process-wide;
//     each Recycler draws them in blocks, so they increase in the order of
//     its News (New's in the order of its calls), not across Recyclers.
//   - (H4) Every owner shares one descriptor, so rewriting its location
//     re-points all of them at once: renumbering and relocation are invisible
//     to owners. Nothing may keep a page or slice index across a point where
//     pages renumber; keep a Handle or Binding and read its location.
//   - (H5) A Location never wraps: NewLocation refuses indices beyond MaxPage
//     and MaxSlice.
//   - (H6) A descriptor made by a [Recycler] goes back to it once nothing
//     refers to it (refs 0) and nothing keys on it ([Descriptor.Key],
//     [Descriptor.Keep]), and the next New hands its cell out with a fresh
//     ID. A pool's Recycler makes free slices' descriptors, which nothing
//     keys on; a device's makes buffers' descriptors, which each structure
//     that keys on one keys for as long as it keeps it. A stale holder of a
//     released handle tells a later allocation of its cell by the ID.
//
// # Does not know
//
// Pools, pages, placement, streams: a location is three numbers whose meaning
// the pool package gives them.
//
// # Concurrency
//
// Nothing here is safe for concurrent use except the process-wide ID
// counter: descriptors, handles, bindings, signals, recyclers, ErrorGraph and
// Taint are plain fields, and the device lock serialises every call on them
// (stream workers never touch them; an op that frees or clones a buffer
// takes the lock, or borrows it from its holder). Counters were atomics
// once; under the lock they only cost the hot path locked instructions.
package handle
