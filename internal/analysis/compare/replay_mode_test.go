package compare

import (
	"context"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// The torch model's capacity probe stops at the first failed allocation
// with the failure alone (what minCapacity reads), where a verdict's replay
// describes the state there; at a capacity that runs clean, both report as
// the verdict does, its peak event included.
func TestTorchProbeReportsTheFailureAlone(t *testing.T) {
	events := synthEvents(t, "llm-server", 3, trace.SynthParams{Allocs: 600})
	maxPage := maxPageFor(events)
	full, err := replayOnce(context.Background(), Torch, events, 0, maxPage, deviceOptions{}, fullReplay, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	tight := full.PeakDevice / 2
	probe, err := replayOnce(context.Background(), Torch, events, tight, maxPage, deviceOptions{}, probeReplay, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	verdict, err := replayOnce(context.Background(), Torch, events, tight, maxPage, deviceOptions{}, failFastReplay, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if probe.FailedAllocs != 1 || probe.FirstFailure != verdict.FirstFailure || verdict.FirstFailure < 0 {
		t.Fatalf("at half the peak: probe failed %d allocations, first at %d; verdict's first at %d; want one, the same",
			probe.FailedAllocs, probe.FirstFailure, verdict.FirstFailure)
	}
	if probe.FirstFailureState != nil || verdict.FirstFailureState == nil {
		t.Fatalf("failure state: probe %v, verdict %v; want the verdict's alone", probe.FirstFailureState, verdict.FirstFailureState)
	}
	probe, err = replayOnce(context.Background(), Torch, events, full.PeakDevice, maxPage, deviceOptions{}, probeReplay, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if probe.FailedAllocs != 0 || probe.PeakDeviceEvent != full.PeakDeviceEvent || probe.PeakDevice != full.PeakDevice {
		t.Fatalf("at the unlimited peak: probe failed %d, peak %d at event %d; want none, %d at %d",
			probe.FailedAllocs, probe.PeakDevice, probe.PeakDeviceEvent, full.PeakDevice, full.PeakDeviceEvent)
	}
}
