package compare

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// Policies replayed side by side give what each gives replayed alone, in
// the order asked, every figure alike (the wall times aside).
func TestPoliciesSideBySideGiveWhatEachGivesAlone(t *testing.T) {
	events := synthEvents(t, "llm-server", 2, trace.SynthParams{Allocs: 800})
	src := Source{Name: "llm-server", Events: events}
	names := []string{Torch, Adaptive, AdaptivePages, Exclusive, TorchExpandable}
	c, err := Run(context.Background(), src, Options{Policies: names, Capacity: 600 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policies) != len(names) {
		t.Fatalf("%d results for %d policies", len(c.Policies), len(names))
	}
	for i, name := range names {
		alone, err := Run(context.Background(), src, Options{Policies: []string{name}, Capacity: 600 << 20})
		if err != nil {
			t.Fatal(err)
		}
		got, want := timeless(c.Policies[i]), timeless(alone.Policies[0])
		if got.Name != name {
			t.Fatalf("result %d is %s, want %s: the order asked", i, got.Name, name)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s side by side: min capacity %d, peak %d, verdict %+v; alone: %d, %d, %+v",
				name, got.MinCapacity, got.PeakReserved, got.Verdict, want.MinCapacity, want.PeakReserved, want.Verdict)
		}
	}
}

// The progress callback (the CLI's bar, which is not safe for concurrent
// use) is never entered by two replays at once, though they run side by
// side; every policy reports, the torch model's included.
func TestPoliciesSideBySideReportProgressOneAtATime(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one CPU: the policies replay one after the other")
	}
	events := synthEvents(t, "llm-server", 2, trace.SynthParams{Allocs: 800})
	var inside, calls, overlapped atomic.Int32
	reported := map[string]bool{} // written one call at a time, as checked
	progress := func(policy, step string, done, total int) {
		calls.Add(1)
		reported[policy] = true
		if inside.Add(1) > 1 {
			overlapped.Add(1)
		}
		time.Sleep(time.Millisecond) // a window for another replay to enter
		inside.Add(-1)
	}
	names := []string{Adaptive, AdaptivePages, AdaptiveNoRelocate, Torch}
	if _, err := Run(context.Background(), Source{Name: "llm-server", Events: events}, Options{Policies: names, Progress: progress}); err != nil {
		t.Fatal(err)
	}
	if n := overlapped.Load(); n != 0 {
		t.Fatalf("the progress callback was entered %d times (of %d) while another replay was in it", n, calls.Load())
	}
	for _, name := range names {
		if !reported[name] {
			t.Errorf("%s reported no progress", name)
		}
	}
}

// timeless is r with the figures that measure time, not placement, zeroed.
func timeless(r PolicyResult) PolicyResult {
	r.ReplaySeconds = 0
	r.Report, r.MinCapacityReport = timelessReport(r.Report), timelessReport(r.MinCapacityReport)
	return r
}

// A run whose context ends stops every policy's replay and says why.
func TestPoliciesSideBySideStopWithTheirContext(t *testing.T) {
	events := synthEvents(t, "churn", 1, trace.SynthParams{Allocs: 400})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Run(ctx, Source{Name: "churn", Events: events}, Options{Policies: []string{Adaptive, AdaptivePages, Torch}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with its context canceled = %v, want context.Canceled", err)
	}
}

func timelessReport(r *replay.Report) *replay.Report {
	if r == nil {
		return nil
	}
	c := *r
	c.WallSeconds = 0
	return &c
}

// A context that ends while the policies replay stops every one of them,
// the torch model's search included, within the replays in flight: without
// it the torch model would run its search to the end (about sixty replays
// here), each reporting progress.
func TestPoliciesSideBySideStopWhenTheirContextEnds(t *testing.T) {
	events := synthEvents(t, "llm-server", 2, trace.SynthParams{Allocs: 800})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ended atomic.Bool
	var after atomic.Int32
	progress := func(policy, step string, done, total int) {
		if ended.Load() {
			after.Add(1)
			return
		}
		if policy == Torch && step == "capacity search" {
			cancel()
			ended.Store(true)
		}
	}
	_, err := Run(ctx, Source{Name: "llm-server", Events: events}, Options{Policies: []string{Torch, AdaptivePages}, Progress: progress})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run whose context ended mid-search = %v, want context.Canceled", err)
	}
	if n := after.Load(); n > 4 {
		t.Fatalf("%d progress reports after the context ended, want at most the replays in flight's", n)
	}
}
