// Package torch models PyTorch's CUDA caching allocator, accounting only, so
// a trace's memory behaviour under PyTorch can be compared with gpumem's.
//
// # Owns
//
// [Allocator] (segments, blocks, per-stream small and large pools, best fit,
// splitting and merging, the out-of-memory path, empty cache; the rules and
// invariants T1–T4 are in allocator.go's header; graph-private pools for
// captures, graphpool.go), PyTorch's allocator
// settings as [Settings], read from PYTORCH_CUDA_ALLOC_CONF syntax by
// [ParseConf] or from a snapshot's allocator_settings by
// [SettingsFromSnapshot] and written back by [Settings.String], [Config]
// with [CachedSegment] to start from a snapshot's pre-window segments and
// [RecordedSegment] to give segments the addresses PyTorch's did (best
// fit's tie-break; addresses.go), and
// [ReplayTorch] / [Replay], which run native trace events through it and
// report peak reserved bytes and every segment allocation, page mapping and
// release. Names follow PyTorch (segment, block, pool), not gpumem's
// glossary.
//
// A caller builds an allocator with settings as
//
//	s, err := torch.ParseConf("expandable_segments:True,max_split_size_mb:128")
//	// or s, err := torch.SettingsFromSnapshot(allocatorSettings)
//	res, err := torch.Replay(events, torch.Config{Capacity: c, Settings: s})
//
// # Settings modelled, one rule per file
//
//   - expandable_segments (expandable.go): one growing virtual range per
//     pool and stream, 2 MiB / 20 MiB pages mapped on demand at the lowest
//     free address, free pages unmapped on out of memory before the retry,
//     every block split down to 512 B, best fit counting a growable block
//     as the size it can grow to.
//   - max_split_size_mb and max_non_split_rounding_mb (allocator.go:
//     bestFit, shouldSplit, releaseOversize): oversize blocks are not split,
//     serve only requests within the margin (20 MiB by default), and are
//     released first under pressure.
//   - roundup_power2_divisions, single value and per-range list
//     (roundup.go, conf.go).
//   - garbage_collection_threshold (gc.go): age-ordered release of cached
//     whole segments, no synchronize, only with a capacity.
//
// # What is validated, what is modelled
//
// Validated against recorded PyTorch data: the default settings only.
// Replaying the shared snapshots (transformer forward and full step, UNet)
// gives PyTorch's recorded peak reserved bytes exactly, and, started from
// the pre-window segments, the same segment sizes in the same order and the
// same reserved bytes at every segment entry. None of the shared snapshots
// was recorded with other settings. On an H200 with PyTorch 2.11 (four
// workloads of scripts/torch-check.py), given the snapshot's segment
// addresses (Config.Recorded), every allocation lands in PyTorch's segment
// at PyTorch's offset, the peak reserved bytes are PyTorch's, and under
// set_per_process_memory_fraction the model completed or ran out at each
// of the 25 capacities PyTorch was run at exactly as PyTorch did; with
// synthetic addresses two of the four peaked 1.4 % and 0.9 % low, and
// their smallest capacity was 30–32 and 46–66 MiB below PyTorch's.
//
// Modelled from PyTorch's source only (c10/cuda/CUDACachingAllocator.cpp,
// c10/core/AllocatorConfig.cpp, c10/cuda/CUDAAllocatorConfig.cpp), each rule
// checked by a named test with the source's or the devlog's worked example
// (pytorch/devlogs content/eager/2026-06-01-cuda-caching-allocator.md):
// graph-private pools (and torch.cuda.graph's empty_cache before a
// capture; no shared snapshot holds a capture), expandable segments,
// max_split_size_mb (also before settings existed),
// max_non_split_rounding_mb, roundup_power2_divisions and
// garbage_collection_threshold. With the zero Settings the model's output
// is byte for byte what it was before settings existed.
//
// # Invariants
//
//   - (T1) A segment's blocks tile it exactly, in address order.
//   - (T2) No two physically adjacent blocks are both free.
//   - (T3) A block is in its pool's free list iff it is free.
//   - (T4) Reserved is the sum of segment sizes; Allocated the sum of
//     allocated blocks' sizes.
//   - (T5) No two live segments overlap; a recorded address is taken only
//     by a segment of the recorded size whose range is free.
//
// Validation: replaying the shared snapshots (transformer forward and full
// step, UNet) gives PyTorch's recorded peak reserved bytes exactly, and,
// started from the pre-window segments, the same segment sizes in the same
// order and the same reserved bytes at every segment entry.
//
// # Does not know
//
// The address the CUDA driver would give a segment PyTorch never allocated
// (a run under another capacity or other settings once its segments leave
// the recorded ones, or a snapshot without addresses): such a segment ranks
// above every recorded one among equal-size free blocks
// (Stats.SyntheticSegments counts them), or below every one under
// Config.Addresses AddressesFalling. gpumem's pools, pages or
// relocation, devices or real memory; CUDA events
// and cross-stream use (a free is reusable at once), private pools shared
// between graphs or made by torch.cuda.MemPool, captures spanning several
// streams, expandable_segments_page_size-style page overrides,
// backend:cudaMallocAsync (refused by ParseConf), and settings changed in
// the middle of a run are not modelled. Cached start segments are plain
// segments whatever the settings, so a snapshot recorded with expandable
// segments does not start from its mapped ranges.
//
// # Concurrency
//
// An Allocator is not safe for concurrent use; callers serialise.
package torch
