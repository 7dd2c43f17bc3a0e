package compare

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/trace"
)

var noHarmSeeds = flag.Int("noharm.seeds", 40, "generated traces per workload for the do-no-harm properties")

// relocationPairs are the policies with and without relocation.
var relocationPairs = [][2]string{{Adaptive, AdaptiveNoRelocate}, {AdaptivePages, AdaptivePagesNoRelocate}}

// noHarmViolations checks the do-no-harm properties on one trace and
// returns what broke: (1) a policy run at a capacity at or above its own
// unlimited peak reserved never fails an allocation; (2) relocation never
// raises the smallest capacity: the relocating policy runs clean at the
// smallest capacity its norelocate twin needs.
func noHarmViolations(t *testing.T, name string, events []trace.Event) []string {
	t.Helper()
	ctx := context.Background()
	maxPage := maxPageFor(events)
	peak, err := peakLive(events)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, pair := range relocationPairs {
		for _, policy := range pair {
			rep, err := replayOnce(ctx, policy, events, 0, maxPage, deviceOptions{}, false, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []uint64{storage.RoundUp(rep.PeakDevice, capacityGranule), storage.RoundUp(rep.PeakDevice, capacityGranule) + capacityGranule, storage.RoundUp(rep.PeakDevice*11/10, capacityGranule)} {
				if !runsCleanAt(t, policy, events, c, maxPage) {
					bad = append(bad, fmt.Sprintf("%s/%s fails at %d MiB, above its unlimited peak %d MiB", name, policy, c>>20, rep.PeakDevice>>20))
					break
				}
			}
		}
		norel, err := replayOnce(ctx, pair[1], events, 0, maxPage, deviceOptions{}, false, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, _, err := minCapacity(ctx, pair[1], events, peak, norel.PeakDevice, maxPage, deviceOptions{}, func(string) func(int, int) { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if res != nil && !runsCleanAt(t, pair[0], events, res.capacity, maxPage) {
			bad = append(bad, fmt.Sprintf("%s/%s fails at %d MiB, where %s runs clean", name, pair[0], res.capacity>>20, pair[1]))
		}
	}
	return bad
}

func runsCleanAt(t *testing.T, policy string, events []trace.Event, capacity, maxPage uint64) bool {
	t.Helper()
	rep, err := replayOnce(context.Background(), policy, events, capacity, maxPage, deviceOptions{}, true, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep.FailedAllocs == 0
}

// The do-no-harm properties on generated training-like and serving-like
// workloads, many seeds each.
func TestRelocationDoesNoHarmOnGeneratedWorkloads(t *testing.T) {
	var bad []string
	n := 0
	for _, w := range []string{"transformer", "llm-server", "growth", "churn", "multistream"} {
		for seed := uint64(1); seed <= uint64(*noHarmSeeds); seed++ {
			events := synthEvents(t, w, seed, trace.SynthParams{Allocs: 300})
			bad = append(bad, noHarmViolations(t, fmt.Sprintf("%s-%d", w, seed), events)...)
			n++
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d traces, %d violations", n, len(bad))
}

// The same properties on every shared PyTorch snapshot.
func TestRelocationDoesNoHarmOnSharedSnapshots(t *testing.T) {
	for _, name := range []string{"transformer-ctx128-forward.pickle", "transformer-ctx128-fullstep.pickle", "unet-snapshot.pickle"} {
		src := sharedSource(t, name)
		for _, b := range noHarmViolations(t, name, src.Events) {
			t.Error(b)
		}
	}
}
