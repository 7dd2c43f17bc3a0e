// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// PyTorch 2.x), accounting only: no memory is touched. See
// /work/shared/notes/pytorch-caching-allocator.md. This file is the core
// (segments, blocks, best fit, split, merge, the out-of-memory path); the
// settings each add one rule, in their own file: settings.go and conf.go
// (PYTORCH_CUDA_ALLOC_CONF), roundup.go (roundup_power2_divisions),
// expandable.go (expandable_segments), gc.go (garbage_collection_threshold).
// max_split_size_mb's rules are here, in bestFit, shouldSplit and
// releaseOversize, as in the source.
//
// Data structure. A segment is one modelled cudaMalloc, at the address
// PyTorch's snapshot recorded for it when the caller gives one
// (Config.Recorded, addresses.go), else at a synthetic address from a bump
// counter above every recorded one (synthetic addresses are never reused).
// A segment is a doubly linked list of blocks in address order (prev/next
// are physical neighbours). Free blocks live in one
// pool per (stream, small|large), a slice sorted by (size, address), so best
// fit is a binary search: the first block whose size is at least the
// request, the lowest address among equal sizes.
//
// Malloc, in PyTorch's order (malloc, get_free_block, alloc_block,
// should_split):
//  1. Round the request (round_size): below 512 B to 512 B, else up to a
//     multiple of 512, or of a power-of-two division (roundup.go). ≤ 1 MiB
//     goes to the small pool, larger to the large pool.
//  2. Best fit in the stream's pool. With max_split_size set, a request
//     below it never takes an oversize block (≥ max_split_size), and a
//     request at or above it takes a block less than
//     max_non_split_rounding (20 MiB) larger. With expandable segments, a
//     block at the growing end counts as the size it can grow to.
//  3. None fits: with garbage collection on, release long-unused cached
//     segments (gc.go). Then cudaMalloc a segment of 2 MiB (small), 20 MiB
//     (1–10 MiB) or the request rounded up to 2 MiB (≥ 10 MiB) — or, with
//     expandable segments, map pages into the pool's range (expandable.go).
//     If the capacity refuses it: with max_split_size set, release one whole
//     free oversize segment large enough (else the largest ones until
//     enough is freed) and retry; then release every whole free segment and
//     unmap every free page of every pool and stream and retry once more (an
//     alloc retry; not while a graph captures, graphpool.go); then fail (an
//     OOM).
//  4. Split: small pool, or any pool with expandable segments, when the
//     remainder is ≥ 512 B; large pool when the request is below
//     max_split_size and the remainder is > 1 MiB. The front serves the
//     request; the remainder goes back to the pool.
//
// Free marks the block free, merges it with free neighbours of its segment
// and returns it to its pool. Segments go back only through the OOM path
// and EmptyCache.
//
// Invariants.
//   - (T1) A segment's blocks tile it exactly, in address order.
//   - (T2) No two physically adjacent blocks are both free and mapped, nor
//     both unmapped.
//   - (T3) A mapped block is in its pool's free list iff it is free; an
//     unmapped block (expandable segments only) is in its pool's unmapped
//     list, never allocated.
//   - (T4) Reserved is the sum of plain segments' sizes plus the mapped
//     blocks of expandable segments; Allocated is the sum of allocated
//     blocks' sizes.
//   - (T5) No two live segments overlap: a recorded address is taken only
//     when no live segment holds any of its range, and a synthetic one
//     skips every live segment (addresses.go).
//
// Cost: O(log n) lookup plus O(n) slice insertion in the number of free
// blocks of one pool; traces have hundreds to a few thousand.

package torch

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// PyTorch's constants (CUDACachingAllocator.cpp).
const (
	MinBlockSize  = 512        // kMinBlockSize: every request rounds up to a multiple of this
	SmallSize     = 1 << 20    // kSmallSize: largest request served by the small pool
	SmallBuffer   = 2 << 20    // kSmallBuffer: segment size of the small pool
	LargeBuffer   = 20 << 20   // kLargeBuffer: segment size for 1–10 MiB requests
	MinLargeAlloc = 10 << 20   // kMinLargeAlloc: from here segments are the rounded request
	RoundLarge    = 2 << 20    // kRoundLarge: rounding of large segments
	MaxRequest    = 1 << 62    // larger requests are refused as impossible
	baseAddress   = 1 << 40    // first synthetic segment address
	addressGap    = RoundLarge // between segments, so no two are adjacent
)

// Sentinel errors.
var (
	// ErrOutOfMemory is returned by Malloc when no cached block fits and the
	// capacity refuses a new segment even after releasing every cached
	// segment. The allocator is unchanged except for the released cache.
	ErrOutOfMemory = errors.New("PyTorch model: out of memory")
	// ErrInvalidRequest is returned by Malloc for a size above 2^62 or a
	// negative stream; the allocator is unchanged.
	ErrInvalidRequest = errors.New("PyTorch model: invalid request")
)

// Config configures an Allocator.
type Config struct {
	// FailFast makes Replay stop at the first failed allocation: a
	// capacity search needs to know only whether one fails.
	FailFast bool
	// Capacity is the device memory available for segments; 0 = unlimited.
	// It plays both of PyTorch's limits: the device's memory (cudaMalloc
	// and page mapping fail beyond it) and the per-process memory fraction
	// (alloc_block refuses a request whose segment size would pass it, and
	// garbage_collection_threshold is a fraction of it; with no capacity,
	// as in PyTorch without set_per_process_memory_fraction, garbage
	// collection never runs).
	Capacity uint64
	// Settings are PYTORCH_CUDA_ALLOC_CONF's; the zero value is PyTorch's
	// defaults. Build them with ParseConf or SettingsFromSnapshot.
	Settings Settings
	// Cached are segments the allocator starts with, all free, as if
	// reserved earlier and emptied since: a replay of a snapshot whose
	// window began mid-run starts from PyTorch's segments at that moment
	// (trace.Snapshot.StartSegments). They are created in order regardless
	// of Capacity and count in Reserved and PeakReserved; one of size 0 or
	// above 2^62, or one that would take the reserved bytes or addresses
	// past 2^64, is skipped.
	Cached []CachedSegment
	// Recorded, when set, gives for the i-th event Replay applies the
	// segment PyTorch placed that alloc's block in (the zero
	// RecordedSegment for other events and unknown ones): a segment the
	// model allocates for it takes the recorded address when the sizes
	// agree and the range is free, so best fit breaks ties between
	// equal-size blocks by PyTorch's addresses (addresses.go). Without it
	// addresses rise in allocation order.
	Recorded []RecordedSegment
	// Addresses is where a segment goes whose address Recorded does not
	// give (addresses.go): above the recorded ones and rising (the zero
	// value), or below them and falling.
	Addresses AddressConvention
}

// CachedSegment is one segment of Config.Cached. Stream may be negative for
// a segment no event's stream uses; Small selects the small pool.
type CachedSegment struct {
	Size   uint64
	Stream int
	Small  bool
	// Addr is PyTorch's address of the segment (trace.StartSegment's
	// Address); 0, or a range another cached segment took, means a
	// synthetic one.
	Addr uint64
}

// Block is an allocation handed out by Malloc. Size is the block's size
// (the rounded request, or more when the large pool did not split).
type Block struct {
	Addr      uint64
	Size      uint64
	Requested uint64
	Stream    int
}

// Stats are the allocator's counters, named after PyTorch's memory_stats.
type Stats struct {
	Mallocs          int    // successful Malloc calls
	Frees            int    // Free calls
	SegmentAllocs    int    // modelled cudaMalloc calls
	SegmentFrees     int    // modelled cudaFree calls
	AllocRetries     int    // num_alloc_retries: cache flushed after a refused segment
	OOMs             int    // num_ooms
	PeakAllocated    uint64 // highest Allocated
	Requested        uint64 // bytes requested by live blocks
	PeakRequested    uint64 // highest Requested
	InactiveSplit    uint64 // free bytes in plain segments that also hold allocated blocks
	ReleasedOversize int    // oversize segments released by the max_split_size path
	SegmentMaps      int    // expandable segments: page mappings (segment_map)
	SegmentUnmaps    int    // expandable segments: page unmappings (segment_unmap)
	GarbageCollected int    // segments released by garbage collection
	// RecordedSegments and SyntheticSegments count the plain segments
	// allocated (cached ones included) at the address a recording gave
	// and at a synthetic one (addresses.go): with Config.Recorded set, a
	// synthetic one is a segment whose rank among equal-size free blocks
	// no snapshot says.
	RecordedSegments  int
	SyntheticSegments int
}

type block struct {
	addr, size uint64
	requested  uint64
	allocated  bool
	pending    bool   // freed with uses pending (RequestFree): out of its pool until Free
	unmapped   bool   // address range of an expandable segment with no pages (T3)
	gcBase     uint64 // its pool class's lookup count when it became free (gc.go)
	prev, next *block
	seg        *segment
}

// segment is one cudaMalloc, or with expandable set one reserved virtual
// range whose pages of page bytes are mapped on demand (expandable.go).
type segment struct {
	addr, size uint64
	pool       *freePool
	expandable bool
	page       uint64
	recorded   bool // at a recorded address (addresses.go)
}

type poolKey struct {
	stream int
	small  bool
	// private is the graph-private pool (graphpool.go) the pool belongs
	// to; 0 for the default pools.
	private int
}

// freePool is one (stream, small|large) pool: free mapped blocks sorted by
// (size, address), and the unmapped blocks of its expandable segment(s)
// sorted by address. lookups is the allocator's lookup counter for the
// pool's size class, which PyTorch keeps per BlockPool (all streams).
type freePool struct {
	key      poolKey
	blocks   []*block
	unmapped []*block
	lookups  *uint64
}

func less(a *block, size, addr uint64) bool {
	return a.size < size || (a.size == size && a.addr < addr)
}

func (p *freePool) insert(b *block) {
	b.gcBase = *p.lookups
	i := sort.Search(len(p.blocks), func(i int) bool { return !less(p.blocks[i], b.size, b.addr) })
	p.blocks = append(p.blocks, nil)
	copy(p.blocks[i+1:], p.blocks[i:])
	p.blocks[i] = b
}

func (p *freePool) remove(b *block) {
	i := sort.Search(len(p.blocks), func(i int) bool { return !less(p.blocks[i], b.size, b.addr) })
	if i >= len(p.blocks) || p.blocks[i] != b {
		panic("torch: free block missing from its pool (T3)")
	}
	p.blocks = append(p.blocks[:i], p.blocks[i+1:]...)
}

// lowerBound returns the index of the first block of at least size bytes.
func (p *freePool) lowerBound(size uint64) int {
	return sort.Search(len(p.blocks), func(i int) bool { return p.blocks[i].size >= size })
}

// Allocator is the model. The zero value is not usable; call New or
// NewWithConfig. It is not safe for concurrent use.
type Allocator struct {
	cfg       Config
	set       Settings
	maxSplit  uint64    // max_split_size in bytes, MaxUint64 when unlimited
	gc        bool      // garbage collection on: a threshold and a capacity
	lookups   [2]uint64 // get_free_block calls per size class, [1] small (gc.go)
	pools     map[poolKey]*freePool
	poolOrder []*freePool // creation order, for deterministic cache release
	live      map[uint64]*block
	// capturing maps a stream that captures a graph to the private pool
	// its allocations go to; freeable holds the private pools no graph
	// uses any more, whose free segments the cache release may return
	// (graphpool.go).
	capturing map[int]int
	freeable  map[int]bool
	nextAddr  uint64
	// segs holds every live segment by address; hint is the recording of
	// the allocation being served (addresses.go).
	segs      []*segment
	hint      RecordedSegment
	reserved  uint64
	peakRes   uint64
	allocated uint64
	stats     Stats
	// onSegment, when set, is told of every segment allocation (release
	// false) and release (true), page mappings and unmappings of
	// expandable segments with mapping true; Replay records the timeline
	// with it.
	onSegment func(size uint64, release, mapping bool)
}

// New returns an allocator with the given capacity (0 = unlimited) and
// PyTorch's default settings.
func New(capacity uint64) *Allocator { return NewWithConfig(Config{Capacity: capacity}) }

// NewWithConfig returns an allocator with the given settings. Cached
// segments of size 0 or above 2^62 are skipped; they are plain segments
// whatever the settings. Settings that fail Validate are a caller bug and
// panic: ParseConf and SettingsFromSnapshot validate, and Replay returns
// the error instead.
func NewWithConfig(cfg Config) *Allocator {
	if err := cfg.Settings.Validate(); err != nil {
		panic(fmt.Sprintf("torch: NewWithConfig: %v", err))
	}
	a := &Allocator{cfg: cfg, set: cfg.Settings, maxSplit: cfg.Settings.maxSplitBytes(), pools: map[poolKey]*freePool{},
		live: map[uint64]*block{}, capturing: map[int]int{}, freeable: map[int]bool{}, nextAddr: syntheticStart(cfg)}
	a.gc = cfg.Settings.GarbageCollectionThreshold > 0 && cfg.Capacity != 0
	for _, c := range cfg.Cached {
		if c.Size == 0 || c.Size > MaxRequest || a.reserved > math.MaxUint64-c.Size {
			continue
		}
		addr, recorded, ok := a.segmentAddress(RecordedSegment{Addr: c.Addr, Size: c.Size}, c.Size)
		if !ok {
			continue
		}
		p := a.pool(c.Stream, c.Small)
		seg := &segment{addr: addr, size: c.Size, pool: p}
		a.track(seg, recorded)
		a.reserved += c.Size
		a.peakRes = max(a.peakRes, a.reserved)
		p.insert(&block{addr: seg.addr, size: c.Size, seg: seg})
	}
	return a
}

// Reserved returns the bytes held in segments (PyTorch's reserved bytes).
func (a *Allocator) Reserved() uint64 { return a.reserved }

// PeakReserved returns the highest Reserved so far.
func (a *Allocator) PeakReserved() uint64 { return a.peakRes }

// Allocated returns the bytes of allocated blocks (PyTorch's allocated
// bytes: rounded sizes, slack of unsplit blocks included).
func (a *Allocator) Allocated() uint64 { return a.allocated }

// Stats returns the counters.
func (a *Allocator) Stats() Stats {
	s := a.stats
	s.InactiveSplit = 0
	for _, p := range a.poolOrder {
		for _, b := range p.blocks {
			if (b.prev != nil || b.next != nil) && !b.seg.expandable {
				s.InactiveSplit += b.size
			}
		}
	}
	return s
}

// RoundSize is PyTorch's round_size: below 512 B to 512 B, else up to a
// multiple of 512 B.
func RoundSize(size uint64) uint64 {
	if size < MinBlockSize {
		return MinBlockSize
	}
	return (size + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// SegmentSize is PyTorch's get_allocation_size for a rounded request.
func SegmentSize(rounded uint64) uint64 {
	switch {
	case rounded <= SmallSize:
		return SmallBuffer
	case rounded < MinLargeAlloc:
		return LargeBuffer
	default:
		return (rounded + RoundLarge - 1) / RoundLarge * RoundLarge
	}
}

// pool returns the free pool a request of stream takes from: the default
// (stream, size class) pool, or while stream captures a graph, that of the
// capture's private pool.
func (a *Allocator) pool(stream int, small bool) *freePool {
	k := poolKey{stream: stream, small: small, private: a.capturing[stream]}
	p, ok := a.pools[k]
	if !ok {
		p = &freePool{key: k, lookups: &a.lookups[0]}
		if small {
			p.lookups = &a.lookups[1]
		}
		if k.private != 0 {
			// A private pool counts its own lookups; garbage collection
			// reads only the default large pools' (gc.go).
			p.lookups = new(uint64)
		}
		a.pools[k] = p
		a.poolOrder = append(a.poolOrder, p)
	}
	return p
}

// Malloc allocates size bytes on stream. On error the allocator is unchanged,
// except that an out-of-memory path may have released cached segments.
func (a *Allocator) Malloc(size uint64, stream int) (Block, error) {
	if size > MaxRequest || stream < 0 {
		return Block{}, fmt.Errorf("%w: size %d on stream %d (size must be ≤ 2^62, stream ≥ 0)", ErrInvalidRequest, size, stream)
	}
	rounded := a.set.RoundSize(size)
	p := a.pool(stream, rounded <= SmallSize)
	b := a.bestFit(p, rounded)
	if b == nil {
		if a.gc {
			a.collectGarbage()
		}
		segSize := SegmentSize(rounded)
		b = a.allocBlock(p, rounded, segSize)
		if b == nil && a.releaseOversize(p, rounded) {
			b = a.allocBlock(p, rounded, segSize)
		}
		if b == nil && len(a.capturing) == 0 {
			// While a graph captures, PyTorch skips this release: it
			// synchronizes the device, which a capture forbids.
			a.releaseCached()
			a.stats.AllocRetries++
			b = a.allocBlock(p, rounded, segSize)
		}
		if b == nil {
			a.stats.OOMs++
			return Block{}, fmt.Errorf("%w: malloc of %d bytes (segment %d) with %d reserved, %d allocated, capacity %d",
				ErrOutOfMemory, size, segSize, a.reserved, a.allocated, a.cfg.Capacity)
		}
	} else {
		p.remove(b)
	}
	if a.shouldSplit(p, b, rounded) {
		rest := &block{addr: b.addr + rounded, size: b.size - rounded, prev: b, next: b.next, seg: b.seg}
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		b.size = rounded
		p.insert(rest)
	}
	b.allocated = true
	b.requested = size
	a.live[b.addr] = b
	a.allocated += b.size
	a.stats.PeakAllocated = max(a.stats.PeakAllocated, a.allocated)
	a.stats.Requested += size
	a.stats.PeakRequested = max(a.stats.PeakRequested, a.stats.Requested)
	a.stats.Mallocs++
	return Block{Addr: b.addr, Size: b.size, Requested: size, Stream: stream}, nil
}

// bestFit is get_free_block: the smallest block of at least size bytes, the
// lowest address among equals (with expandable segments, see
// expandableFit), subject to the max_split_size rules: a request below
// max_split_size may not take an oversize block, and one at or above it
// may not take a block max_non_split_rounding or more larger. Each call
// counts as a lookup of the pool's size class for garbage collection.
func (a *Allocator) bestFit(p *freePool, size uint64) *block {
	if a.gc {
		*p.lookups++
	}
	i := p.lowerBound(size)
	if i == len(p.blocks) {
		return nil
	}
	if a.set.ExpandableSegments {
		i = p.expandableFit(i)
	}
	b := p.blocks[i]
	if size < a.maxSplit && b.size >= a.maxSplit {
		return nil
	}
	if size >= a.maxSplit && b.size-size >= a.set.nonSplitRoundingBytes() {
		return nil
	}
	return b
}

// shouldSplit is should_split: with expandable segments every pool splits
// like the small one (max_split_size does not apply).
func (a *Allocator) shouldSplit(p *freePool, b *block, size uint64) bool {
	remaining := b.size - size
	if p.key.small || a.set.ExpandableSegments {
		return remaining >= MinBlockSize
	}
	return size < a.maxSplit && remaining > SmallSize
}

// allocBlock is alloc_block: a new segment of segSize bytes, or with
// expandable segments pages mapped for a block of size bytes; nil when the
// capacity refuses. The block is in no free list.
func (a *Allocator) allocBlock(p *freePool, size, segSize uint64) *block {
	if !a.set.ExpandableSegments || p.key.private != 0 {
		// A graph-private pool never uses expandable segments (alloc_block:
		// "expandable_segments() && !p.pool->owner_PrivatePool").
		return a.newSegment(p, segSize)
	}
	// The memory-fraction check comes first and uses get_allocation_size,
	// not the pages the mapping will take.
	if a.cfg.Capacity != 0 && (segSize > a.cfg.Capacity || a.reserved > a.cfg.Capacity-segSize) {
		return nil
	}
	return a.allocExpandable(p, size)
}

// newSegment models cudaMalloc: nil when the capacity refuses, or when the
// reserved bytes or the synthetic address space would pass 2^64 (out of
// memory even with no capacity set, never a wrapped address).
func (a *Allocator) newSegment(p *freePool, size uint64) *block {
	if a.cfg.Capacity != 0 && (size > a.cfg.Capacity || a.reserved > a.cfg.Capacity-size) {
		return nil
	}
	if a.reserved > math.MaxUint64-size {
		return nil
	}
	addr, recorded, ok := a.segmentAddress(a.hint, size)
	if !ok {
		return nil
	}
	seg := &segment{addr: addr, size: size, pool: p}
	a.track(seg, recorded)
	a.reserved += size
	a.peakRes = max(a.peakRes, a.reserved)
	a.stats.SegmentAllocs++
	if a.onSegment != nil {
		a.onSegment(size, false, false)
	}
	return &block{addr: seg.addr, size: size, seg: seg}
}

// releaseSegment models cudaFree of a whole free segment b (in its pool).
func (a *Allocator) releaseSegment(p *freePool, b *block) {
	p.remove(b)
	a.untrack(b.seg)
	a.reserved -= b.seg.size
	a.stats.SegmentFrees++
	if a.onSegment != nil {
		a.onSegment(b.seg.size, true, false)
	}
}

// releaseOversize is release_available_cached_blocks: with max_split_size
// set, free one whole oversize segment of at least size bytes, else the
// largest whole oversize segments until size bytes are freed. It reports
// whether enough was released.
func (a *Allocator) releaseOversize(p *freePool, size uint64) bool {
	if a.maxSplit == math.MaxUint64 {
		return false
	}
	key := max(size, a.maxSplit)
	i := p.lowerBound(key)
	for j := i; j < len(p.blocks); j++ { // one large enough, smallest first
		if b := p.blocks[j]; b.prev == nil && b.next == nil && !b.seg.expandable {
			a.releaseSegment(p, b)
			a.stats.ReleasedOversize++
			return true
		}
	}
	var released uint64
	for j := i - 1; j >= 0 && released < key; j-- { // largest first
		b := p.blocks[j]
		if b.size < a.maxSplit {
			break
		}
		if b.prev == nil && b.next == nil && !b.seg.expandable {
			released += b.size
			a.releaseSegment(p, b)
			a.stats.ReleasedOversize++
		}
	}
	return released >= key
}

// releaseCached is release_cached_blocks: every whole free segment of every
// default pool and stream, and of every private pool no graph uses any more
// (graphpool.go), goes back, and every free block of an expandable segment
// has its whole pages unmapped (release_blocks, unmap_block); a range left
// with no page mapped is released with it (release_expandable_segment).
func (a *Allocator) releaseCached() {
	for _, p := range a.poolOrder {
		if p.key.private != 0 && !a.freeable[p.key.private] {
			continue // a graph still uses it: its memory is the graph's
		}
		var keep, unmap []*block
		for _, b := range p.blocks {
			if b.seg.expandable {
				keep = append(keep, b)
				unmap = append(unmap, b)
				continue
			}
			if b.prev == nil && b.next == nil {
				a.untrack(b.seg)
				a.reserved -= b.seg.size
				a.stats.SegmentFrees++
				if a.onSegment != nil {
					a.onSegment(b.seg.size, true, false)
				}
				continue
			}
			keep = append(keep, b)
		}
		p.blocks = keep
		for _, b := range unmap {
			a.unmapBlock(p, b)
		}
	}
}

// EmptyCache releases every cached segment that holds no allocated block
// (torch.cuda.empty_cache).
func (a *Allocator) EmptyCache() { a.releaseCached() }

// RequestFree is PyTorch's free of a block whose uses on other streams
// have not completed (free_requested without free_completed): the
// allocated and requested bytes drop now, but the block stays out of its
// pool, neither reused nor merged, until Free returns it (free_completed).
// A block not allocated, or requested already, is a caller bug and panics.
func (a *Allocator) RequestFree(blk Block) {
	b, ok := a.live[blk.Addr]
	if !ok || b.pending {
		panic(fmt.Sprintf("torch: free request of unknown or already freed block at %#x", blk.Addr))
	}
	a.allocated -= b.size
	a.stats.Requested -= b.requested
	b.pending = true
}

// Free returns b to its pool, merging it with free neighbours (a block
// RequestFree freed already: only that). Freeing a block that is not
// allocated is a caller bug and panics.
func (a *Allocator) Free(blk Block) {
	b, ok := a.live[blk.Addr]
	if !ok {
		panic(fmt.Sprintf("torch: free of unknown or already freed block at %#x", blk.Addr))
	}
	delete(a.live, blk.Addr)
	p := b.seg.pool
	if !b.pending {
		a.allocated -= b.size
		a.stats.Requested -= b.requested
	}
	b.pending = false
	a.stats.Frees++
	b.allocated = false
	b.requested = 0
	if prev := b.prev; prev != nil && !prev.allocated && !prev.unmapped {
		p.remove(prev)
		prev.size += b.size
		prev.next = b.next
		if b.next != nil {
			b.next.prev = prev
		}
		b = prev
	}
	if next := b.next; next != nil && !next.allocated && !next.unmapped {
		p.remove(next)
		b.size += next.size
		b.next = next.next
		if next.next != nil {
			next.next.prev = b
		}
	}
	p.insert(b)
}
