package torch

import (
	"errors"
	"fmt"
	"iter"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// ErrReplay is returned by ReplayTorch for an event the model refuses
// other than by running out of memory. An invalid event is reported with
// trace's sentinels instead; an alloc of a live ID is an implied free.
var ErrReplay = errors.New("PyTorch model: bad trace")

// SegmentEvent is one modelled cudaMalloc (Release false) or cudaFree, or
// with expandable segments one page mapping (segment_map) or unmapping
// (segment_unmap), marked Mapping.
type SegmentEvent struct {
	Event   int    // index of the trace event that caused it
	Size    uint64 // segment bytes, or bytes mapped or unmapped
	Release bool
	Mapping bool
}

// Result is what a replay through the model measured.
type Result struct {
	Events       int // events applied
	Allocs       int // successful allocs
	Frees        int // frees of live IDs
	ImpliedFrees int // allocs of an ID still live, which free it first (as gpumem's replay does)
	FailedAllocs int // allocs refused with ErrOutOfMemory (their frees are ignored)
	FirstFailure int // index of the first failed alloc, −1 when none
	IgnoredFrees int // frees of IDs not live (unknown, or of a failed alloc)
	// HeldFrees counts held frees: PyTorch's free of a block with other
	// streams' uses pending (RequestFree), returned to its pool at the
	// release of its ID; IgnoredReleases releases with nothing held.
	HeldFrees       int
	IgnoredReleases int
	Cleanups        int // cleanup events, each an EmptyCache
	// Captures counts capture begins applied: each empties the cache (as
	// torch.cuda.graph does) and sends the stream's allocations to a new
	// graph-private pool until the capture's end; the pool's memory stays
	// the graph's until its close (graphpool.go). CaptureErrors counts
	// capture phases out of order (a begin on a stream already capturing,
	// an end or close of a graph never begun, a second begin of a graph),
	// which change nothing.
	Captures      int
	CaptureErrors int
	// Skipped counts window, hold, pass and defragment events, alloc_failed
	// ones, and capture prepare and launch phases: PyTorch has no
	// counterpart (its cudaFree waits for the device, so nothing holds a
	// segment's release; a warmup is ordinary work; a replay allocates
	// nothing; it never moves memory), and a failed allocation gpumem's
	// device recorded is left out as the snapshot reader leaves out
	// PyTorch's own oom entries.
	Skipped       int
	PeakReserved  uint64 // highest reserved bytes
	FinalReserved uint64
	PeakAllocated uint64 // highest allocated block bytes
	// FinalAllocated and FinalLargestFree are the allocated block bytes
	// and the largest free cached block at the end.
	FinalAllocated   uint64
	FinalLargestFree uint64
	// FinalHeld is the cached bytes held for other streams or pools at the
	// end (Allocator.Held).
	FinalHeld uint64
	PeakLive  uint64 // highest requested bytes live
	Stats     Stats  // the allocator's counters at the end
	// Segments lists every segment allocation and release in order, so a
	// caller can rebuild the reserved-bytes timeline or compare segment
	// sizes with PyTorch's segment_alloc entries.
	Segments []SegmentEvent
}

// ReplayTorch replays native events through a fresh model with the given
// capacity (0 = unlimited) and default settings. It continues past a failed
// alloc. The error wraps ErrReplay (or trace's validation sentinels) and
// names the event index; the Result up to that event is returned with it.
func ReplayTorch(events iter.Seq[trace.Event], capacity uint64) (Result, error) {
	return Replay(events, Config{Capacity: capacity})
}

// Replay is ReplayTorch with a full Config: capacity, PyTorch's settings
// (cfg.Settings, from ParseConf or SettingsFromSnapshot), the segments to
// start from and the segments PyTorch placed each alloc in (cfg.Recorded,
// indexed like events). Settings that fail Validate are returned as its
// error, with nothing replayed.
func Replay(events iter.Seq[trace.Event], cfg Config) (Result, error) {
	return replay(events, cfg, nil)
}

// replay is Replay, telling placed (when set) of every block an alloc event
// got: the event's index and the allocator holding the block.
func replay(events iter.Seq[trace.Event], cfg Config, placed func(idx int, a *Allocator, b Block)) (Result, error) {
	if err := cfg.Settings.Validate(); err != nil {
		return Result{FirstFailure: -1}, err
	}
	a := NewWithConfig(cfg)
	res := Result{FirstFailure: -1}
	idx := 0
	a.onSegment = func(size uint64, release, mapping bool) {
		res.Segments = append(res.Segments, SegmentEvent{Event: idx, Size: size, Release: release, Mapping: mapping})
	}
	live := map[uint64]Block{}
	held := map[uint64]Block{}    // held frees' blocks, until their release
	graphs := map[int]graphPool{} // captured graphs' private pools, until their close
	nextPool := 0
	failed := map[uint64]bool{}
	finish := func() {
		res.PeakReserved = a.PeakReserved()
		res.FinalReserved = a.Reserved()
		res.Stats = a.Stats()
		res.PeakAllocated = res.Stats.PeakAllocated
		res.FinalAllocated = a.Allocated()
		res.FinalLargestFree = a.LargestFree()
		res.FinalHeld = a.Held()
		res.PeakLive = res.Stats.PeakRequested
	}
	for e := range events {
		if err := e.Validate(); err != nil {
			finish()
			return res, fmt.Errorf("event %d: %w", idx, err)
		}
		switch e.Op {
		case trace.OpAlloc:
			if old, dup := live[e.ID]; dup {
				// An ID reused while live: the trace implies a free.
				delete(live, e.ID)
				a.Free(old)
				res.ImpliedFrees++
			}
			delete(failed, e.ID)
			var rec RecordedSegment
			if idx < len(cfg.Recorded) {
				rec = cfg.Recorded[idx]
			}
			b, err := a.MallocRecorded(e.Size, e.Stream, rec)
			if err != nil {
				if !errors.Is(err, ErrOutOfMemory) {
					finish()
					return res, fmt.Errorf("%w: event %d: %w", ErrReplay, idx, err)
				}
				res.FailedAllocs++
				if res.FirstFailure < 0 {
					res.FirstFailure = idx
				}
				if cfg.FailFast {
					res.Events++
					finish()
					return res, nil
				}
				failed[e.ID] = true
				break
			}
			live[e.ID] = b
			res.Allocs++
			if placed != nil {
				placed(idx, a, b)
			}
		case trace.OpFree:
			b, ok := live[e.ID]
			if !ok {
				delete(failed, e.ID)
				res.IgnoredFrees++
				break
			}
			delete(live, e.ID)
			res.Frees++
			if e.Held {
				if old, ok := held[e.ID]; ok {
					a.Free(old) // an ID held twice (refused by Decode): the first is done
				}
				a.RequestFree(b)
				held[e.ID] = b
				res.HeldFrees++
				break
			}
			a.Free(b)
		case trace.OpRelease:
			b, ok := held[e.ID]
			if !ok {
				res.IgnoredReleases++
				break
			}
			delete(held, e.ID)
			a.Free(b)
		case trace.OpCleanup:
			a.EmptyCache()
			res.Cleanups++
		case trace.OpCapture:
			switch e.Phase {
			case trace.PhaseBegin:
				if _, dup := graphs[e.Graph]; dup {
					res.CaptureErrors++
					break
				}
				// torch.cuda.graph empties the cache before capture_begin.
				a.EmptyCache()
				nextPool++
				if a.BeginAllocateToPool(e.Stream, nextPool) != nil {
					res.CaptureErrors++ // the stream captures another graph
					break
				}
				graphs[e.Graph] = graphPool{id: nextPool, stream: e.Stream, capturing: true}
				res.Captures++
			case trace.PhaseEnd:
				g, ok := graphs[e.Graph]
				if !ok || !g.capturing {
					res.CaptureErrors++
					break
				}
				a.EndAllocateToPool(g.stream)
				g.capturing = false
				graphs[e.Graph] = g
			case trace.PhaseClose:
				g, ok := graphs[e.Graph]
				if !ok {
					res.CaptureErrors++
					break
				}
				delete(graphs, e.Graph)
				a.ReleasePool(g.id)
			default:
				res.Skipped++
			}
		default:
			res.Skipped++
		}
		idx++
		res.Events++
	}
	finish()
	return res, nil
}

// graphPool is a captured graph's private pool in Replay: its id, the
// stream that captured it, and whether the capture is still open.
type graphPool struct {
	id, stream int
	capturing  bool
}
