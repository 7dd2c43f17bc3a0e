// Package torch models PyTorch's CUDA caching allocator, accounting only, so
// a trace's memory behaviour under PyTorch can be compared with gpumem's.
//
// # Owns
//
// [Allocator] (segments, blocks, per-stream small and large pools, best fit,
// splitting and merging, the out-of-memory path, max_split_size, empty
// cache; the rules and invariants T1–T4 are in allocator.go's header),
// [Config] with [CachedSegment] to start from a snapshot's pre-window
// segments, and [ReplayTorch] / [Replay], which run native trace events
// through it and report peak reserved bytes and every segment allocation.
// Names follow PyTorch (segment, block, pool), not gpumem's glossary.
//
// # Invariants
//
//   - (T1) A segment's blocks tile it exactly, in address order.
//   - (T2) No two physically adjacent blocks are both free.
//   - (T3) A block is in its pool's free list iff it is free.
//   - (T4) Reserved is the sum of segment sizes; Allocated the sum of
//     allocated blocks' sizes.
//
// Validation: replaying the shared snapshots (transformer forward and full
// step, UNet) gives PyTorch's recorded peak reserved bytes exactly, and,
// started from the pre-window segments, the same segment sizes in the same
// order and the same reserved bytes at every segment entry.
//
// # Does not know
//
// gpumem's pools, pages or relocation, devices or real memory; CUDA events
// and cross-stream use (a free is reusable at once), expandable segments,
// graph-private pools, garbage_collection_threshold and
// roundup_power2_divisions are not modelled.
//
// # Concurrency
//
// An Allocator is not safe for concurrent use; callers serialise.
package torch
