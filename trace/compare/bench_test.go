package compare

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpumem/gpumem/trace"
)

// benchEvents returns the shared full training-step snapshot's events, or a
// synthetic transformer step when ../shared is absent.
func benchEvents(b *testing.B) (string, []trace.Event) {
	path := filepath.Join("..", "..", "..", "shared", "traces", "transformer-ctx128-fullstep.pickle")
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		snap, err := trace.ReadSnapshot(f, trace.SnapshotOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return "fullstep", snap.Events
	}
	seq, err := trace.Synth("transformer", 1, trace.SynthParams{Allocs: 20000})
	if err != nil {
		b.Fatal(err)
	}
	var events []trace.Event
	for e := range seq {
		events = append(events, e)
	}
	return "synthetic-transformer", events
}

// BenchmarkReplay measures replay speed per policy on Sim storage, in
// events per second, against a floor measured in the same run: one map
// insert or delete per event (the least any replay must do to track IDs).
func BenchmarkReplay(b *testing.B) {
	name, events := benchEvents(b)
	// The floor, timed here (testing.Benchmark cannot nest): the best of a
	// few passes.
	floorPerEvent := 0.0
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
		if floorPerEvent == 0 || per < floorPerEvent {
			floorPerEvent = per
		}
	}
	maxPage := maxPageFor(events)
	for _, policy := range Policies() {
		b.Run(name+"/"+policy, func(b *testing.B) {
			for b.Loop() {
				rep, err := replayOnce(context.Background(), policy, events, 0, maxPage, deviceOptions{}, false, 0, nil)
				if err != nil {
					b.Fatal(err)
				}
				if rep.FailedAllocs > 0 {
					b.Fatalf("%d failed allocations", rep.FailedAllocs)
				}
			}
			perEvent := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / float64(len(events))
			b.ReportMetric(1e9/perEvent, "events/s")
			b.ReportMetric(perEvent/floorPerEvent, "x-floor")
		})
	}
}
