package replay

import (
	"context"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// R3: a timeline of far fewer buckets than events still reaches the exact
// peaks of live and device bytes, at the events where they happened, and
// its points stay in event order.
func TestTimelineKeepsEveryBucketsExtremes(t *testing.T) {
	seq, err := trace.Synth("churn", 4, trace.SynthParams{Allocs: 3000})
	if err != nil {
		t.Fatal(err)
	}
	events := slices.Collect(seq)
	rep, err := Run(context.Background(), simDevice(t), slices.Values(events), Options{Total: len(events), Timeline: 37})
	if err != nil {
		t.Fatal(err)
	}
	var maxLive, maxDev uint64
	peakAt := -1
	for i, p := range rep.Timeline {
		if i > 0 && p.Event <= rep.Timeline[i-1].Event {
			t.Fatalf("point %d at event %d after event %d", i, p.Event, rep.Timeline[i-1].Event)
		}
		if p.T != events[p.Event].T {
			t.Fatalf("point at event %d has time %d, the event %d", p.Event, p.T, events[p.Event].T)
		}
		maxLive = max(maxLive, p.Live)
		if p.Device > maxDev {
			maxDev, peakAt = p.Device, p.Event
		}
	}
	if len(rep.Timeline) > 4*(37+1) || len(rep.Timeline) < 37 {
		t.Fatalf("%d points for 37 buckets", len(rep.Timeline))
	}
	if maxLive != rep.PeakLive || maxDev != rep.PeakDevice || peakAt != rep.PeakDeviceEvent {
		t.Fatalf("timeline peaks live %d device %d at event %d; report %d, %d at event %d",
			maxLive, maxDev, peakAt, rep.PeakLive, rep.PeakDevice, rep.PeakDeviceEvent)
	}
}
