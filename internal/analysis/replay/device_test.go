package replay

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// A failed allocation the recording device saw is tried and never counted
// live: served with room to spare (and freed at once), refused again at a
// capacity that cannot hold it, counted both ways. A defragment runs.
func TestAllocFailedStaysOutOfLiveBytesAndDefragmentRuns(t *testing.T) {
	events := []trace.Event{
		{Op: trace.OpAlloc, T: 0, ID: 1, Size: 6 * MiB},
		{Op: trace.OpAllocFailed, T: 1, ID: 2, Size: 12 * MiB},
		{Op: trace.OpAlloc, T: 2, ID: 3, Size: 3 * MiB},
		{Op: trace.OpFree, T: 3, ID: 1},
		{Op: trace.OpDefragment, T: 4, MaxMoves: 4},
	}
	rep, err := replayEvents(t, events)
	if err != nil {
		t.Fatal(err)
	}
	if rep.PeakLive != 9*MiB || rep.FinalLive != 3*MiB || rep.FailedAllocs != 0 || rep.RecordedFailedAllocs != 1 || rep.RecordedFailedAllocsServed != 1 ||
		rep.Defragments != 1 || rep.IgnoredFrees != 0 || rep.EventsByOp["alloc_failed"] != 1 || rep.EventsByOp["defragment"] != 1 {
		t.Fatalf("with room: %+v", rep)
	}
	dev, err := gpumem.Open(gpumem.WithSim(), gpumem.WithCapacity(16*MiB))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err = Run(t.Context(), dev, slices.Values(events), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.PeakLive != 9*MiB || rep.FailedAllocs != 1 || rep.FirstFailure != 1 || rep.RecordedFailedAllocs != 1 || rep.RecordedFailedAllocsServed != 0 {
		t.Fatalf("at 16 MiB: %+v", rep)
	}
}

// DeviceOptions opens a device as the trace's recording device ran, and
// refuses a device it cannot reproduce naming what is wrong.
func TestDeviceOptionsOpenTheRecordingDevice(t *testing.T) {
	d := trace.Device{Backend: "host", Capacity: 2 << 30, MaxPage: 512 << 20, Alignment: 512, MaxMemory: 2 << 30, Granule: 2 << 20,
		Dynamic: "adaptive", Persistent: "size-match", BaseMode: "persistent", NoCompact: true}
	opts, err := DeviceOptions(d)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := gpumem.Open(append(opts, gpumem.WithSim())...)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if p := dev.Properties(); p != (gpumem.Properties{MaxPageSize: 512 << 20, Alignment: 512, MaxMemory: 2 << 30}) {
		t.Fatalf("properties %+v", p)
	}
	for _, bad := range []trace.Device{
		{MaxPage: 0},
		{MaxPage: 1 << 20, Alignment: 3},
		{MaxPage: 1 << 20, Dynamic: "lru"},
		{MaxPage: 1 << 20, Persistent: "sometimes"},
		{MaxPage: 1 << 20, BaseMode: "eager"},
	} {
		if _, err := DeviceOptions(bad); !errors.Is(err, trace.ErrBadHeader) && !errors.Is(err, gpumem.ErrInvalidConfig) {
			t.Errorf("%+v: %v, want ErrBadHeader or gpumem.ErrInvalidConfig", bad, err)
		}
	}
}
