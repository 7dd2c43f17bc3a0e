package compare

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// benchTraces returns the shared PyTorch snapshots' events, or a
// synthetic transformer step when ../shared is absent.
func benchTraces(b *testing.B) map[string][]trace.Event {
	out := map[string][]trace.Event{}
	for _, name := range []string{"transformer-ctx128-fullstep", "transformer-ctx128-forward", "unet-snapshot"} {
		f, err := os.Open(filepath.Join("..", "..", "..", "..", "shared", "traces", name+".pickle"))
		if err != nil {
			continue
		}
		snap, err := trace.ReadSnapshot(f, trace.SnapshotOptions{})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		out[name] = snap.Events
	}
	if len(out) == 0 {
		b.Log("../shared/traces absent: benchmarking a synthetic transformer step")
		seq, err := trace.Synth("transformer", 1, trace.SynthParams{Allocs: 20000})
		if err != nil {
			b.Fatal(err)
		}
		out["synthetic-transformer"] = slices.Collect(seq)
	}
	return out
}

// floorPerEvent is the least any replay must do per event, timed here
// (testing.Benchmark cannot nest): one map insert or delete to track IDs,
// the best of a few passes.
func floorPerEvent(events []trace.Event) float64 {
	best := 0.0
	for range 5 {
		start := time.Now()
		m := make(map[uint64]uint64)
		for _, e := range events {
			if e.Op == trace.OpAlloc {
				m[e.ID] = e.Size
			} else {
				delete(m, e.ID)
			}
		}
		per := float64(time.Since(start).Nanoseconds()) / float64(len(events))
		if best == 0 || per < best {
			best = per
		}
	}
	return best
}

// BenchmarkReplay measures the replay engine per policy on Sim storage, on
// every shared snapshot, in events per second, against the floor measured
// in the same run (x-floor).
func BenchmarkReplay(b *testing.B) {
	traces := benchTraces(b)
	names := slices.Sorted(maps.Keys(traces))
	for _, name := range names {
		events := traces[name]
		floor := floorPerEvent(events)
		maxPage := maxPageFor(events)
		for _, policy := range Policies() {
			b.Run(name+"/"+policy, func(b *testing.B) {
				for b.Loop() {
					rep, err := replayOnce(context.Background(), policy, events, 0, maxPage, deviceOptions{}, fullReplay, 0, nil)
					if err != nil {
						b.Fatal(err)
					}
					if rep.FailedAllocs > 0 {
						b.Fatalf("%d failed allocations", rep.FailedAllocs)
					}
				}
				perEvent := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(len(events))
				b.ReportMetric(1e9/perEvent, "events/s")
				b.ReportMetric(perEvent/floor, "x-floor")
			})
		}
	}
}
