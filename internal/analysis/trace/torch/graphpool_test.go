package torch

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// A capture's allocations come from a private pool: a block freed during
// the capture serves the capture's next allocation (stream order), but
// never an ordinary one, until the graph is released and the cache emptied.
func TestPrivatePoolServesOnlyItsCaptureUntilReleased(t *testing.T) {
	a := New(0)
	if err := a.BeginAllocateToPool(0, 1); err != nil {
		t.Fatal(err)
	}
	x, err := a.Malloc(5*MiB, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.Free(x)
	y, err := a.Malloc(5*MiB, 0)
	if err != nil {
		t.Fatal(err)
	}
	if y.Addr != x.Addr || a.Reserved() != LargeBuffer {
		t.Fatalf("second capture alloc at %#x (first %#x), reserved %d: want the freed block reused in one 20 MiB segment", y.Addr, x.Addr, a.Reserved())
	}
	a.Free(y)
	if !a.EndAllocateToPool(0) || a.EndAllocateToPool(0) {
		t.Fatal("EndAllocateToPool: want true for the capturing stream, then false")
	}
	checkInvariants(t, a)

	z, err := a.Malloc(5*MiB, 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Reserved() != 2*LargeBuffer {
		t.Fatalf("reserved %d after an ordinary alloc: want a second 20 MiB segment (the private one is the graph's)", a.Reserved())
	}
	a.Free(z)
	a.EmptyCache()
	if a.Reserved() != LargeBuffer {
		t.Fatalf("reserved %d after empty_cache with the graph alive: want its 20 MiB kept", a.Reserved())
	}
	a.ReleasePool(1)
	a.EmptyCache()
	if a.Reserved() != 0 {
		t.Fatalf("reserved %d after the pool's release and empty_cache: want 0", a.Reserved())
	}
	checkInvariants(t, a)
}

// While a capture is underway PyTorch's out-of-memory path does not release
// the cache (it would synchronize), so a capture that needs a segment past
// the capacity fails where an ordinary allocation frees cached segments.
func TestCaptureDoesNotReleaseTheCacheOnOutOfMemory(t *testing.T) {
	a := New(24 * MiB)
	cached, err := a.Malloc(512<<10, 0) // a 2 MiB small segment, cached once freed
	if err != nil {
		t.Fatal(err)
	}
	a.Free(cached)
	if err := a.BeginAllocateToPool(0, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Malloc(12*MiB, 0); err != nil {
		t.Fatalf("first capture alloc: %v (2 + 12 MiB fit 24)", err)
	}
	if _, err := a.Malloc(12*MiB, 0); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("second capture alloc: %v, want ErrOutOfMemory (the cached 2 MiB may not go)", err)
	}
	if a.Reserved() != 14*MiB || a.Stats().AllocRetries != 0 {
		t.Fatalf("reserved %d, retries %d: want 14 MiB and no cache release", a.Reserved(), a.Stats().AllocRetries)
	}
	a.EndAllocateToPool(0)
	if _, err := a.Malloc(12*MiB, 0); err != nil {
		t.Fatalf("ordinary alloc after the capture: %v (the cached segment can go now)", err)
	}
	if a.Stats().AllocRetries != 1 || a.Reserved() != 24*MiB {
		t.Fatalf("retries %d, reserved %d: want 1 and 24 MiB (the small segment released)", a.Stats().AllocRetries, a.Reserved())
	}
	checkInvariants(t, a)
}

func TestBeginAllocateToPoolRefusesMisuse(t *testing.T) {
	a := New(0)
	for _, c := range []struct{ stream, id int }{{0, 0}, {0, -1}, {-1, 2}} {
		if err := a.BeginAllocateToPool(c.stream, c.id); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("BeginAllocateToPool(%d, %d): %v, want ErrInvalidRequest", c.stream, c.id, err)
		}
	}
	if err := a.BeginAllocateToPool(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.BeginAllocateToPool(0, 2); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("second pool on a capturing stream: %v, want ErrInvalidRequest", err)
	}
	a.ReleasePool(1) // ends the capture too
	if err := a.BeginAllocateToPool(0, 1); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a released pool: %v, want ErrInvalidRequest", err)
	}
	if err := a.BeginAllocateToPool(0, 2); err != nil {
		t.Fatalf("a new pool once the stream stopped capturing: %v", err)
	}
}

// Replay maps capture phases to torch.cuda.graph: begin empties the cache
// and opens a private pool, end closes the capture, close releases the
// pool; phases out of order are counted and change nothing.
func TestReplayGivesEachCaptureAPrivatePool(t *testing.T) {
	capture := func(g int) []trace.Event {
		return []trace.Event{
			{Op: trace.OpCapture, Phase: trace.PhasePrepare, Graph: g},
			{Op: trace.OpAlloc, ID: 1, Size: 5 * MiB}, // warmup
			{Op: trace.OpFree, ID: 1},
			{Op: trace.OpCapture, Phase: trace.PhaseBegin, Graph: g},
			{Op: trace.OpAlloc, ID: 2, Size: 5 * MiB}, // recording
			{Op: trace.OpFree, ID: 2},
			{Op: trace.OpCapture, Phase: trace.PhaseEnd, Graph: g},
			{Op: trace.OpCapture, Phase: trace.PhaseLaunch, Graph: g},
			{Op: trace.OpAlloc, ID: 3, Size: 5 * MiB}, // work between launches
			{Op: trace.OpFree, ID: 3},
		}
	}
	events := capture(0)
	events = append(events,
		trace.Event{Op: trace.OpCapture, Phase: trace.PhaseEnd, Graph: 0},   // ended already
		trace.Event{Op: trace.OpCapture, Phase: trace.PhaseClose, Graph: 5}, // never begun
		trace.Event{Op: trace.OpCapture, Phase: trace.PhaseClose, Graph: 0})
	events = append(events, capture(1)...)
	res, err := ReplayTorch(slices.Values(events), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Graph 0: the warmup's segment goes at begin, the recording takes a
	// private one, the work between launches a default one (40 MiB).
	// Graph 1's warmup reuses that default segment; its begin releases it
	// and graph 0's pool, now freeable; its recording and work take two
	// new ones.
	if res.PeakReserved != 2*LargeBuffer || res.FinalReserved != 2*LargeBuffer {
		t.Fatalf("peak reserved %d, final %d: want 40 MiB each", res.PeakReserved, res.FinalReserved)
	}
	if res.Captures != 2 || res.CaptureErrors != 2 || res.Skipped != 4 {
		t.Fatalf("captures %d, capture errors %d, skipped %d: want 2, 2 and 4 (prepares and launches)", res.Captures, res.CaptureErrors, res.Skipped)
	}
	if res.Stats.SegmentFrees != 3 {
		t.Fatalf("segment frees %d: want 3 (graph 0's warmup segment at its begin; the default one and graph 0's pool at graph 1's)", res.Stats.SegmentFrees)
	}
}

// PyTorch's alloc_block never uses expandable segments for a private pool
// (owner_PrivatePool): a capture's 30 MiB request is one 30 MiB segment
// even with expandable_segments:True (found by review).
func TestPrivatePoolIgnoresExpandableSegments(t *testing.T) {
	set, err := ParseConf("expandable_segments:True")
	if err != nil {
		t.Fatal(err)
	}
	a := NewWithConfig(Config{Settings: set})
	if err := a.BeginAllocateToPool(0, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Malloc(30*MiB, 0); err != nil {
		t.Fatal(err)
	}
	if a.Reserved() != 30*MiB || a.Stats().SegmentAllocs != 1 || a.Stats().SegmentMaps != 0 {
		t.Fatalf("reserved %d, %d segments, %d mappings: want one 30 MiB segment, no mapping", a.Reserved(), a.Stats().SegmentAllocs, a.Stats().SegmentMaps)
	}
	checkInvariants(t, a)
}
