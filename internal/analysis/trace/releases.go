// Cache releases and out-of-memory entries: whose release a run of
// segment_free (segment_unmap) entries was, and what the trace says of the
// memory PyTorch ran in (docs/decisions/2026-12-04-cache-releases.md).
//
// PyTorch gives cached segments back to the driver in two places, and a
// trace shows both as a run of consecutive release entries (the allocator
// holds its lock throughout, so nothing comes between them):
//
//   - the program's torch.cuda.empty_cache() (torch.cuda.graph calls it
//     too): its frames pass through NativeCachingAllocator::emptyCache
//     (THCPModule_emptyCache, Python's empty_cache). A replay must make the
//     same release at the same point, or it models a program that kept its
//     cache: the run becomes cleanup events (ReleaseProgram).
//   - the allocator's own out-of-memory path: cudaMalloc (or a page
//     mapping) failed, PyTorch released every free cached segment and
//     retried. Its frames are malloc's (DeviceCachingAllocator::malloc).
//     When the retry is served, the next entry allocates the segment
//     (ReleaseRetry): the allocator made that release because the device
//     was full, so a model at the device's capacity makes it by itself,
//     and the run is evidence of that capacity, not an event. When the
//     retry failed too, an oom entry follows (ReleaseFailed): the failed
//     request is no event of the native trace (the reader counts oom
//     entries and emits nothing for them), so nothing in a replay would
//     release that cache, and the run becomes cleanup events.
//   - malloc's frames without a refusal around them (garbage collection,
//     garbage_collection_threshold): the allocator's own housekeeping,
//     which the model does itself under the recorded settings
//     (ReleaseAllocator): no event.
//
// The innermost frame that names either place decides (ByFrames). A run
// without frames (recorded with frames off, or C++ frames not gathered) is
// decided by context: followed by an oom entry, the out-of-memory path;
// followed by the allocation of a segment, the out-of-memory retry only
// when PyTorch could have been refused that segment and the run released
// nothing that could have served the request instead:
//
//   - refused: its reserve before the run plus the segment passes the
//     highest reserve the trace reaches (a device of a fixed size held
//     that much at another time, so it would not have refused it);
//   - served: malloc asks the driver only when no cached free block
//     serves the request, so a run that released a segment (or mapped
//     pages) of the request's stream and pool, at least as large as the
//     request and usable for it under max_split_size, was not malloc's.
//
// Anything else is the program's. empty_cache between layers, each
// followed by a new segment at the reserve's plateau, passes the first
// test and fails the second (the compression snapshot: the released
// segments include one the size the next allocation takes). A program
// that calls empty_cache and then allocates, past its own peak, a request
// no released segment serves still reads as a retry: the model at the
// capacity that reading implies makes the same release by itself, provided
// its state there is PyTorch's.
//
// What a trace says of the capacity (RecordedCapacity): PyTorch held its
// highest reserve, so the capacity is at least that (Low); a refused
// segment at reserve R of S bytes puts it below R+S (High, the tightest
// refusal); an oom entry's device_free, the driver's free bytes when the
// request failed, puts it at the reserve then plus those bytes (the
// lowest of them when there are several), raised to Low; one past High
// (the device's other users changed) gives way to High.

package trace

import (
	"math"
	"strings"
)

// ReleaseKind says whose a run of cache releases was.
type ReleaseKind uint8

const (
	// ReleaseProgram is the program's torch.cuda.empty_cache(): replayed
	// as cleanup events.
	ReleaseProgram ReleaseKind = iota + 1
	// ReleaseRetry is the allocator's out-of-memory path whose retry was
	// served (the next entry allocates the segment): evidence of the
	// capacity, no event.
	ReleaseRetry
	// ReleaseFailed is the allocator's out-of-memory path whose retry
	// failed (an oom entry follows): evidence of the capacity, and cleanup
	// events, since the failed request is no event.
	ReleaseFailed
	// ReleaseAllocator is the allocator's own release with no refusal
	// around it (garbage collection): no event, no evidence.
	ReleaseAllocator
)

var releaseKindNames = [...]string{ReleaseProgram: "empty_cache", ReleaseRetry: "out-of-memory retry",
	ReleaseFailed: "out-of-memory", ReleaseAllocator: "allocator"}

// String names the kind as the reports do: "empty_cache",
// "out-of-memory retry", "out-of-memory", "allocator".
func (k ReleaseKind) String() string {
	if k >= ReleaseProgram && int(k) < len(releaseKindNames) {
		return releaseKindNames[k]
	}
	return "unknown"
}

// Cleanup reports whether a run of this kind becomes cleanup events.
func (k ReleaseKind) Cleanup() bool { return k == ReleaseProgram || k == ReleaseFailed }

// ReleaseRun is one run of consecutive segment_free (segment_unmap)
// entries of the chosen trace.
type ReleaseRun struct {
	First, Last int    // its first and last entry (device trace indices)
	Bytes       uint64 // segment bytes released
	Kind        ReleaseKind
	// ByFrames is set when the entries' frames decided the kind; else the
	// context did (the file comment's rules): no frames, or none that
	// name emptyCache or malloc.
	ByFrames bool
	// Cleanup is the index in Events of the first cleanup event the run
	// became (one per stream known then), −1 when it became none (a kind
	// that does not, or a run before any event, when a replay holds
	// nothing to release).
	Cleanup int
	// ReservedBefore is PyTorch's reserve just before the run; Next the
	// size of the segment the next entry allocated (segment_alloc or
	// segment_map), 0 when the next entry is no such allocation.
	ReservedBefore uint64
	Next           uint64
}

// OOMEntry is one oom entry of the chosen trace: a request PyTorch failed.
type OOMEntry struct {
	Entry int    // its index in the device trace
	Size  uint64 // the request's bytes
	// DeviceFree is the driver's free bytes when it failed (the entry's
	// device_free; HasDeviceFree false when it has none).
	DeviceFree    uint64
	HasDeviceFree bool
	Reserved      uint64 // PyTorch's reserve then
}

// RecordedCapacity is what a trace says of the memory PyTorch's allocator
// could reserve (the file comment): Bytes, the figure a replay "as the
// recording ran" uses, 0 when the trace says nothing (no refusal, no oom
// entry); Low, the highest reserve PyTorch held; High, one byte less than
// the tightest refusal (0 when no refusal bounds it). FromEntry is the
// entry Bytes comes from: an oom entry (FromOOM) whose reserve plus
// device_free it is (raised to Low), else the release run or oom entry
// whose refusal gave High (also when an oom entry's figure passes it).
type RecordedCapacity struct {
	Bytes     uint64
	Low, High uint64
	FromEntry int
	FromOOM   bool
}

// Known reports whether the trace says anything of the capacity.
func (c RecordedCapacity) Known() bool { return c.Bytes > 0 }

// Frame names that say whose a release was (the innermost that names
// either decides).
var (
	programReleaseFrames   = []string{"emptyCache", "empty_cache"}
	allocatorReleaseFrames = []string{"::malloc(", "garbage_collect_cached_blocks", "release_available_cached_blocks", "alloc_block"}
)

// Whose a release entry's frames say it was.
const (
	framesUnknown uint8 = iota // no frames, or none that say
	framesProgram
	framesAllocator
)

// releaseFramesOf says whose release the frames v (a "frames" value as
// decoded: kept, or a JSON snapshot's list) name.
func releaseFramesOf(v any) uint8 {
	var items []any
	switch x := v.(type) {
	case *keptFrames:
		items = x.items
	case *pyList:
		items = x.items
	default:
		return framesUnknown
	}
	for _, it := range items {
		d, ok := it.(*pyDict)
		if !ok {
			continue
		}
		nv, _ := d.get("name")
		name, _ := nv.(string)
		for _, p := range programReleaseFrames {
			if strings.Contains(name, p) {
				return framesProgram
			}
		}
		for _, p := range allocatorReleaseFrames {
			if strings.Contains(name, p) {
				return framesAllocator
			}
		}
	}
	return framesUnknown
}

// releaseRuns finds the runs of release entries and decides each one's
// kind (the file comment's rules), with the net segment bytes before each
// run (to be made a reserve once the reserve before the trace is known).
// The nets are the conversion's own, checked the same way: an overflow
// is left for it to report, and the runs found so far are returned.
func releaseRuns(entries []entry, maxSplit uint64) (runs []ReleaseRun, netBefore []int64) {
	nets := make([]int64, len(entries)+1) // nets[i]: before entry i
	var net, maxNet int64
	for i, e := range entries {
		nets[i] = net
		if e.kind == actSegmentAdd || e.kind == actSegmentSub {
			d := int64(e.rawSize)
			if e.kind == actSegmentSub {
				d = -d
			}
			if (d > 0 && net > math.MaxInt64-d) || (d < 0 && net < math.MinInt64-d) {
				return nil, nil
			}
			net += d
			maxNet = max(maxNet, net)
		}
	}
	nets[len(entries)] = net
	for i := 0; i < len(entries); i++ {
		if entries[i].kind != actSegmentSub {
			continue
		}
		r := ReleaseRun{First: i, Cleanup: -1}
		who := framesUnknown
		for ; i < len(entries) && entries[i].kind == actSegmentSub; i++ {
			r.Bytes += entries[i].rawSize // ≤ 2^62 each, and the net did not overflow
			if who == framesUnknown {
				who = entries[i].frames
			}
		}
		r.Last = i - 1
		var next *entry
		if i < len(entries) {
			next = &entries[i]
		}
		nextOOM := next != nil && next.kind == actOOM
		if next != nil && next.kind == actSegmentAdd {
			r.Next = next.rawSize
		}
		// A refusal at a fixed capacity: the reserve before the run plus
		// the segment passes every reserve the trace reaches.
		refused := r.Next > 0 && nets[r.First] > max(maxNet, 0)-int64(r.Next)
		r.ByFrames = who != framesUnknown
		switch {
		case who == framesProgram:
			r.Kind = ReleaseProgram
		case nextOOM:
			r.Kind = ReleaseFailed
		case refused && who == framesAllocator:
			r.Kind = ReleaseRetry
		case refused && !servedBy(entries[r.First:r.Last+1], entries[i+1:], maxSplit):
			r.Kind = ReleaseRetry
		case who == framesAllocator:
			r.Kind = ReleaseAllocator
		default:
			r.Kind = ReleaseProgram
		}
		runs = append(runs, r)
		netBefore = append(netBefore, nets[r.First])
		i-- // the loop's i++ moves past the run
	}
	return runs, netBefore
}

// servedBy reports whether a segment the run released could have served
// the request that follows it (the first entry of after, when an alloc):
// the same stream, the same pool (small requests, up to 1 MiB, from 2 MiB
// segments; large ones from segments of at least 10 MiB, the smallest a
// large-pool segment is), at least the request's block, and, with
// max_split_size (maxSplit > 0), not an oversize block for a smaller
// request nor one 20 MiB or more past a request of that size
// (get_free_block's rules, max_non_split_rounding_mb at its default).
func servedBy(run, after []entry, maxSplit uint64) bool {
	if len(after) == 0 || after[0].kind != actAlloc {
		return false
	}
	req := after[0]
	block := req.rawSize
	if block == 0 {
		block = req.size
	}
	const mib = 1 << 20
	for _, r := range run {
		seg := r.rawSize
		switch {
		case r.stream != req.stream, seg < block:
		case block <= mib && seg != 2*mib:
		case block > mib && seg < 10*mib:
		case maxSplit > 0 && block < maxSplit && seg >= maxSplit:
		case maxSplit > 0 && block >= maxSplit && seg >= block+20*mib:
		default:
			return true
		}
	}
	return false
}

// maxSplitOf is the max_split_size the snapshot's allocator_settings
// record, in bytes; 0 when none is set (PyTorch writes −1 for unlimited).
func maxSplitOf(settings map[string]any) uint64 {
	if v, ok := settings["max_split_size"].(int64); ok && v > 0 && v < 1<<62 {
		return uint64(v)
	}
	return 0
}

// recordedCapacity is what the runs and oom entries say of the capacity,
// peak PyTorch's highest reserve (the file comment).
func recordedCapacity(runs []ReleaseRun, ooms []OOMEntry, peak uint64) RecordedCapacity {
	c := RecordedCapacity{Low: peak, FromEntry: -1}
	bound := func(reserved, size uint64, entry int) {
		if size == 0 || reserved > MaxSize || size > MaxSize || reserved+size <= peak {
			return // no refusal at a fixed capacity that held peak
		}
		if b := reserved + size - 1; c.High == 0 || b < c.High {
			c.High, c.FromEntry = b, entry
		}
	}
	for _, r := range runs {
		if r.Kind == ReleaseRetry {
			bound(r.ReservedBefore, r.Next, r.First)
		}
	}
	for _, o := range ooms {
		if !o.HasDeviceFree {
			bound(o.Reserved, o.Size, o.Entry)
		}
	}
	from, seen := -1, false
	var est uint64
	for _, o := range ooms {
		if !o.HasDeviceFree || o.Reserved > MaxSize || o.DeviceFree > MaxSize {
			continue
		}
		if v := o.Reserved + o.DeviceFree; !seen || v < est {
			est, from, seen = v, o.Entry, true
		}
	}
	switch {
	case seen && (c.High == 0 || est <= c.High):
		c.Bytes, c.FromEntry, c.FromOOM = max(est, c.Low), from, true
	case c.High != 0:
		// No oom entry, or one whose free bytes a refusal contradicts
		// (the device's other users changed): the refusal bounds it.
		c.Bytes = c.High
	}
	return c
}
