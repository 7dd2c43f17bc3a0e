// Package handle owns identity and per-allocation bookkeeping: who refers to
// an allocation, where it currently lives, and which of its bytes a failure
// left unwritten.
//
// # Owns
//
// [ID], [Location] (packing, bounds, [ErrIndexOverflow]), the shared
// [Descriptor] with its two explicit counters, [Handle] (an owner) and
// [Binding] (a holder of the address, not an owner), the [Recycler] of
// free-slice descriptors, the predicates IsFree,
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
//   - (H3) Allocation IDs start at 1, increase and are never reused.
//   - (H4) Every owner shares one descriptor, so rewriting its location
//     re-points all of them at once: renumbering and relocation are invisible
//     to owners. Nothing may keep a page or slice index across a point where
//     pages renumber; keep a Handle or Binding and read its location.
//   - (H5) A Location never wraps: NewLocation refuses indices beyond MaxPage
//     and MaxSlice.
//   - (H6) A descriptor made by a [Recycler] only ever names a free slice,
//     never a buffer's allocation; once its refs reach 0 its cell goes back
//     to the Recycler and the next New hands it out with a fresh ID. Buffers'
//     descriptors are never recycled, so a stale buffer keeps naming its own,
//     dead allocation.
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
