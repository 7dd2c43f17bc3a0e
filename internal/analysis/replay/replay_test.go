package replay

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/storage"
)

const MiB = 1 << 20

func simDevice(t *testing.T) *gpumem.Device {
	t.Helper()
	dev, err := gpumem.Open(gpumem.WithSim())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func replayEvents(t *testing.T, events []trace.Event) (*Report, error) {
	t.Helper()
	return Run(context.Background(), simDevice(t), slices.Values(events), Options{})
}

// A stream number beyond trace.MaxStreams (or negative) stops the replay
// with an error naming the event, instead of creating streams until memory
// runs out (or indexing out of range).
func TestReplayRefusesStreamsBeyondMaxStreams(t *testing.T) {
	for _, stream := range []int{trace.MaxStreams, 1_000_000_000, -1} {
		for _, e := range []trace.Event{
			{Op: trace.OpAlloc, T: 1, ID: 2, Size: 512, Stream: stream},
			{Op: trace.OpCleanup, T: 1, Stream: stream},
			{Op: trace.OpWindow, T: 1, Stream: stream, Mode: trace.ModePersistent},
			{Op: trace.OpCapture, T: 1, Stream: stream, Phase: trace.PhasePrepare},
			{Op: trace.OpHold, T: 1, Stream: stream},
		} {
			events := []trace.Event{{Op: trace.OpAlloc, T: 0, ID: 1, Size: 512}, e}
			_, err := replayEvents(t, events)
			if !errors.Is(err, ErrStopped) || !errors.Is(err, trace.ErrInvalidEvent) || !strings.Contains(err.Error(), "event 1") {
				t.Errorf("%s on stream %d: %v, want ErrStopped/trace.ErrInvalidEvent naming event 1", e.Op, stream, err)
			}
			if err := e.Validate(); !errors.Is(err, trace.ErrInvalidEvent) {
				t.Errorf("Validate(%s on stream %d) = %v", e.Op, stream, err)
			}
		}
	}
	last := trace.Event{Op: trace.OpAlloc, ID: 1, Size: 512, Stream: trace.MaxStreams - 1}
	if err := last.Validate(); err != nil {
		t.Fatalf("stream MaxStreams-1 refused: %v", err)
	}
	if _, err := replayEvents(t, []trace.Event{last}); err != nil {
		t.Fatalf("stream MaxStreams-1: %v", err)
	}
}

// Live bytes that would pass 2^63 stop the replay naming the event, rather
// than wrapping the live counter.
func TestReplayRefusesLiveBytesBeyond2To63(t *testing.T) {
	var events []trace.Event
	for i := range 5 {
		events = append(events, trace.Event{Op: trace.OpAlloc, T: int64(i), ID: uint64(i + 1), Size: trace.MaxSize - 2*MiB})
	}
	// Pages large enough that Sim grants every one of them.
	dev, err := gpumem.Open(gpumem.WithSim(), gpumem.WithProperties(gpumem.Properties{MaxPageSize: 1 << 63, Alignment: storage.DefaultAlignment}))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := Run(context.Background(), dev, slices.Values(events), Options{})
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "event 2") || !strings.Contains(err.Error(), "2^63") {
		t.Fatalf("got %v, want an error naming event 2", err)
	}
	if rep.Allocs != 2 || rep.PeakLive != 2*(trace.MaxSize-2*MiB) {
		t.Fatalf("replay report %+v", rep)
	}
	bad := []trace.Event{{Op: trace.OpAlloc, ID: 1, Size: trace.MaxSize + 1}}
	if _, err := replayEvents(t, bad); !errors.Is(err, trace.ErrInvalidEvent) || !strings.Contains(err.Error(), "event 0") {
		t.Fatalf("alloc above MaxSize: %v", err)
	}
}

// Closing a graph while another graph records on the stream is refused by
// the device: counted in CaptureErrors, and the replay goes on to the end.
func TestReplayCountsRefusedCaptureCloseAndGoesOn(t *testing.T) {
	events := []trace.Event{
		{Op: trace.OpAlloc, T: 0, ID: 1, Size: MiB},
		{Op: trace.OpCapture, T: 1, Phase: trace.PhasePrepare, Graph: 0},
		{Op: trace.OpCapture, T: 2, Phase: trace.PhaseBegin, Graph: 0},
		{Op: trace.OpAlloc, T: 3, ID: 2, Size: MiB},
		{Op: trace.OpCapture, T: 4, Phase: trace.PhaseEnd, Graph: 0},
		{Op: trace.OpCapture, T: 5, Phase: trace.PhasePrepare, Graph: 1},
		{Op: trace.OpCapture, T: 6, Phase: trace.PhaseBegin, Graph: 1},
		{Op: trace.OpCapture, T: 7, Phase: trace.PhaseClose, Graph: 0}, // refused: graph 1 records
		{Op: trace.OpCapture, T: 8, Phase: trace.PhaseEnd, Graph: 1},   // refused: the refusal doomed it
		{Op: trace.OpCapture, T: 9, Phase: trace.PhaseClose, Graph: 0}, // now it closes
		{Op: trace.OpCapture, T: 10, Phase: trace.PhaseClose, Graph: 1},
		{Op: trace.OpFree, T: 11, ID: 1},
	}
	rep, err := replayEvents(t, events)
	if err != nil {
		t.Fatalf("replay stopped: %v", err)
	}
	if rep.Events != len(events) || rep.CaptureErrors != 2 || rep.Frees != 1 {
		t.Fatalf("events %d capture errors %d frees %d, want %d, 2, 1", rep.Events, rep.CaptureErrors, rep.Frees, len(events))
	}
}

// An alloc of an ID still live frees it first and is counted.
func TestReplayCountsImpliedFrees(t *testing.T) {
	events := []trace.Event{
		{Op: trace.OpAlloc, T: 0, ID: 1, Size: 4 * MiB},
		{Op: trace.OpAlloc, T: 1, ID: 1, Size: 2 * MiB},
		{Op: trace.OpFree, T: 2, ID: 1},
	}
	rep, err := replayEvents(t, events)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ImpliedFrees != 1 || rep.Allocs != 2 || rep.Frees != 1 || rep.FinalLive != 0 || rep.PeakLive != 4*MiB {
		t.Fatalf("report %+v", rep)
	}
}

// An allocation made while a stream records is used by a recorded op (as a
// real recording's kernels use what it allocates), so its room stays the
// graph's until the graph closes: freed inside the recording, it goes back
// to the recording only (its page guarded at the seal), and work between
// launches cannot reuse it.
func TestRecordedAllocationStaysTheGraphsUntilItCloses(t *testing.T) {
	run := func(closeFirst bool) *Report {
		t.Helper()
		events := []trace.Event{
			{Op: trace.OpCapture, T: 0, Phase: trace.PhasePrepare, Graph: 0},
			{Op: trace.OpAlloc, T: 1, ID: 1, Size: 8 * MiB}, // warmup
			{Op: trace.OpFree, T: 2, ID: 1},
			{Op: trace.OpCapture, T: 3, Phase: trace.PhaseBegin, Graph: 0},
			{Op: trace.OpAlloc, T: 4, ID: 2, Size: 8 * MiB}, // recorded
			{Op: trace.OpFree, T: 5, ID: 2},
			{Op: trace.OpCapture, T: 6, Phase: trace.PhaseEnd, Graph: 0},
			{Op: trace.OpCapture, T: 7, Phase: trace.PhaseLaunch, Graph: 0},
		}
		work := []trace.Event{
			{Op: trace.OpAlloc, T: 8, ID: 3, Size: 8 * MiB}, // between launches
			{Op: trace.OpFree, T: 9, ID: 3},
		}
		closing := trace.Event{Op: trace.OpCapture, T: 10, Phase: trace.PhaseClose, Graph: 0}
		if closeFirst {
			events = append(append(events, closing), work...)
		} else {
			events = append(append(events, work...), closing)
		}
		rep, err := replayEvents(t, events)
		if err != nil {
			t.Fatalf("replay stopped: %v", err)
		}
		if rep.CapturesSealed != 1 || rep.CaptureErrors != 0 || rep.FailedAllocs != 0 || rep.CapturesReused != 1 {
			t.Fatalf("sealed %d, capture errors %d, failed allocs %d, reused %d: want 1, 0, 0, 1 (the recorded buffer's slice went back to the recording)", rep.CapturesSealed, rep.CaptureErrors, rep.FailedAllocs, rep.CapturesReused)
		}
		return rep
	}
	closed, open := run(true), run(false)
	if open.PeakDevice < closed.PeakDevice+8*MiB {
		t.Fatalf("peak device with the graph open %d, closed first %d: want at least 8 MiB more while the graph holds the recorded slice", open.PeakDevice, closed.PeakDevice)
	}
}
