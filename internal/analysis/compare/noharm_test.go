package compare

import (
	"context"
	"flag"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/storage"
)

var noHarmSeeds = flag.Int("noharm.seeds", 40, "generated traces per workload for the do-no-harm properties")

// relocationPairs are the policies with and without relocation.
var relocationPairs = [][2]string{{Adaptive, AdaptiveNoRelocate}, {AdaptivePages, AdaptivePagesNoRelocate}}

// noHarmViolations checks the do-no-harm properties on one trace and
// returns what broke: (1) a policy run at a capacity at or above its own
// unlimited peak reserved never fails an allocation; (2) relocation never
// raises the smallest capacity: the relocating policy runs clean at the
// smallest capacity its norelocate twin needs; (3) nor does compaction: the
// compacting policy runs clean at the smallest capacity it needs
// WithoutCompaction (-nocompact).
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
			rep, err := replayOnce(ctx, policy, events, 0, maxPage, deviceOptions{}, fullReplay, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []uint64{storage.RoundUp(rep.PeakDevice, capacityGranule), storage.RoundUp(rep.PeakDevice, capacityGranule) + capacityGranule, storage.RoundUp(rep.PeakDevice*11/10, capacityGranule)} {
				if !runsClean(t, policy, events, c, maxPage) {
					bad = append(bad, fmt.Sprintf("%s/%s fails at %d MiB, above its unlimited peak %d MiB", name, policy, c>>20, rep.PeakDevice>>20))
					break
				}
			}
		}
		norel, err := replayOnce(ctx, pair[1], events, 0, maxPage, deviceOptions{}, fullReplay, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, _, err := minCapacity(ctx, pair[1], events, peak, norel.PeakDevice, maxPage, deviceOptions{}, func(string) func(int, int) { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if res != nil && !runsClean(t, pair[0], events, res.capacity, maxPage) {
			bad = append(bad, fmt.Sprintf("%s/%s fails at %d MiB, where %s runs clean", name, pair[0], res.capacity>>20, pair[1]))
		}
		noCompact := deviceOptions{noCompact: true}
		nocomp, err := replayOnce(ctx, pair[0], events, 0, maxPage, noCompact, fullReplay, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, _, err = minCapacity(ctx, pair[0], events, peak, nocomp.PeakDevice, maxPage, noCompact, func(string) func(int, int) { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if res != nil && !runsClean(t, pair[0], events, res.capacity, maxPage) {
			bad = append(bad, fmt.Sprintf("%s fails at %d MiB, where it runs clean with -nocompact", name+"/"+pair[0], res.capacity>>20))
		}
	}
	return bad
}

// noHarmAllocs is the size of each generated trace: small enough that the
// suite checks 200 traces under -race in well under a minute, large enough
// for growth, outdated pages and failed reservations at the smallest
// capacity. The pre-emptive pressure trigger this test was written against
// broke 132 of these 200 traces.
const noHarmAllocs = 80

// The do-no-harm properties on generated training-like and serving-like
// workloads, many seeds each (issue 13 asks for at least 200 traces; the
// capture and metadata workloads joined when captures came to reuse room
// in the recording and large reservations to take own-size pages, so 280).
func TestRelocationDoesNoHarmOnGeneratedWorkloads(t *testing.T) {
	t.Parallel()
	for _, w := range []string{"transformer", "llm-server", "growth", "churn", "multistream", "capture", "metadata"} {
		t.Run(w, func(t *testing.T) {
			t.Parallel()
			n, bad := 0, 0
			for seed := uint64(1); seed <= uint64(*noHarmSeeds); seed++ {
				events := synthEvents(t, w, seed, trace.SynthParams{Allocs: noHarmAllocs})
				for _, b := range noHarmViolations(t, fmt.Sprintf("%s-%d", w, seed), events) {
					t.Error(b)
					bad++
				}
				n++
			}
			t.Logf("%d traces, %d violations", n, bad)
		})
	}
}

// The same properties on every shared PyTorch snapshot. The replay is
// deterministic and the generated traces already exercise it under the
// race detector, so the snapshots (a minute there) are checked without it.
func TestRelocationDoesNoHarmOnSharedSnapshots(t *testing.T) {
	if raceDetector {
		t.Skip("checked by go test without -race: the snapshots' replays take a minute under the race detector")
	}
	t.Parallel()
	for _, name := range []string{"transformer-ctx128-forward.pickle", "transformer-ctx128-fullstep.pickle", "unet-snapshot.pickle"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := sharedSource(t, name)
			for _, b := range noHarmViolations(t, name, src.Events) {
				t.Error(b)
			}
		})
	}
}

// movesOnlyToGiveBack checks the third do-no-harm property on a comparison:
// at each relocating policy's smallest capacity, a replay that relocated
// gave pages back, and moved at most one byte per byte it gave back (a
// plan empties whole pages or none, R4). It returns the worst ratio seen.
func movesOnlyToGiveBack(t *testing.T, name string, c *Comparison) float64 {
	t.Helper()
	worst := 0.0
	for _, p := range c.Policies {
		r := p.MinCapacityReport
		if r == nil || r.Relocations == 0 {
			continue
		}
		// Compaction's moves are its own (a hole frees no page; it runs
		// only where the reservation would fail otherwise).
		moved := r.BytesMoved - r.CompactBytesMoved
		if r.PagesReleased == 0 || moved > r.BytesReleased {
			t.Errorf("%s/%s at its smallest capacity: %d relocations moved %d bytes and gave back %d pages (%d bytes)",
				name, p.Name, r.Relocations, moved, r.PagesReleased, r.BytesReleased)
			continue
		}
		worst = max(worst, float64(moved)/float64(r.BytesReleased))
	}
	return worst
}

// A relocation runs only to give pages back: on generated workloads and the
// shared snapshots, every relocating replay at its smallest capacity gave
// pages back and moved no more than it gave back (100 traces; with tiled
// page sizes the worst is 1.000 bytes moved per byte given back: an
// outdated page that one allocation of its own size fills moves whole into
// room current pages held).
func TestRelocationMovesOnlyToGiveBack(t *testing.T) {
	t.Parallel()
	worst, runs := 0.0, 0
	for _, w := range []string{"transformer", "llm-server", "growth", "churn", "multistream", "capture", "metadata"} {
		for seed := uint64(1); seed <= 20; seed++ {
			events := synthEvents(t, w, seed, trace.SynthParams{Allocs: noHarmAllocs})
			c, err := Run(context.Background(), Source{Name: w, Events: events}, Options{Policies: []string{Adaptive, AdaptivePages}})
			if err != nil {
				t.Fatal(err)
			}
			worst = max(worst, movesOnlyToGiveBack(t, fmt.Sprintf("%s-%d", w, seed), c))
			runs++
		}
	}
	if !raceDetector {
		for _, name := range []string{"transformer-ctx128-forward.pickle", "transformer-ctx128-fullstep.pickle", "unet-snapshot.pickle"} {
			src := sharedSource(t, name)
			c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive, AdaptivePages}})
			if err != nil {
				t.Fatal(err)
			}
			worst = max(worst, movesOnlyToGiveBack(t, name, c))
		}
	}
	t.Logf("%d traces, worst %.3f bytes moved per byte given back", runs, worst)
}
