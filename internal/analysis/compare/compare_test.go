package compare

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/storage"
)

func synthEvents(t *testing.T, workload string, seed uint64, p trace.SynthParams) []trace.Event {
	t.Helper()
	seq, err := trace.Synth(workload, seed, p)
	if err != nil {
		t.Fatal(err)
	}
	var ev []trace.Event
	for e := range seq {
		ev = append(ev, e)
	}
	return ev
}

// runsClean reports whether events replay under policy at capacity without
// a failed allocation.
func runsClean(t *testing.T, policy string, events []trace.Event, capacity, maxPage uint64) bool {
	t.Helper()
	rep, err := replayOnce(context.Background(), policy, events, capacity, maxPage, deviceOptions{}, failFastReplay, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rep.FailedAllocs == 0
}

// A trace whose live bytes peak at 0 has a smallest capacity of at least
// 1 MiB: capacity 0 means unlimited and must never be reported.
func TestMinCapacityOfZeroByteTraceIsAtLeast1MiB(t *testing.T) {
	events := []trace.Event{
		{Op: trace.OpAlloc, T: 0, ID: 1, Size: 0},
		{Op: trace.OpFree, T: 1, ID: 1},
	}
	c, err := Run(context.Background(), Source{Name: "zero", Events: events}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Policies {
		if p.FailedAllocs == 0 && p.MinCapacity < capacityGranule {
			t.Errorf("%s: min capacity %d, want at least 1 MiB", p.Name, p.MinCapacity)
		}
	}
}

// Out-of-memory is not monotonic in capacity: exclusive on this trace runs
// clean at 527 MiB, fails at 560 and runs at 561, where bisection alone
// stopped. The refinement finds the true smallest capacity, which a scan of
// every MiB from the peak live bytes confirms.
func TestMinCapacityRefinesBelowANonMonotonicBisection(t *testing.T) {
	events := synthEvents(t, "multistream", 3, trace.SynthParams{Allocs: 600})
	c, err := Run(context.Background(), Source{Name: "multistream", Events: events}, Options{Policies: []string{Exclusive}})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policies[0]
	if p.MinCapacity == 0 || !runsClean(t, Exclusive, events, p.MinCapacity, c.MaxPage) {
		t.Fatalf("min capacity %d did not run clean", p.MinCapacity)
	}
	if runsClean(t, Exclusive, events, p.MinCapacity-capacityGranule, c.MaxPage) {
		t.Fatalf("min capacity %d runs clean 1 MiB lower", p.MinCapacity)
	}
	for mib := storage.RoundUp(c.PeakLive, capacityGranule) / capacityGranule; mib*capacityGranule < p.MinCapacity; mib++ {
		if runsClean(t, Exclusive, events, mib*capacityGranule, c.MaxPage) {
			t.Fatalf("min capacity %d MiB, but %d MiB runs clean", p.MinCapacity>>20, mib)
		}
	}
	if p.CapacityProbes > 110 {
		t.Fatalf("%d probes", p.CapacityProbes)
	}
}

// Every policy's result ran clean, 1 MiB less failed, and the search stays
// within about 100 probes.
func TestMinCapacityIsCleanMinimalAndBounded(t *testing.T) {
	for _, w := range []string{"churn", "growth", "transformer", "llm-server"} {
		events := synthEvents(t, w, 5, trace.SynthParams{Allocs: 400})
		c, err := Run(context.Background(), Source{Name: w, Events: events}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.Policies {
			if p.FailedAllocs > 0 {
				continue
			}
			if p.MinCapacity < c.PeakLive || !runsClean(t, p.Name, events, p.MinCapacity, c.MaxPage) {
				t.Errorf("%s/%s: min capacity %d (peak live %d) did not run clean", w, p.Name, p.MinCapacity, c.PeakLive)
			}
			if below := p.MinCapacity - capacityGranule; below >= c.PeakLive && runsClean(t, p.Name, events, below, c.MaxPage) {
				t.Errorf("%s/%s: min capacity %d runs clean 1 MiB lower", w, p.Name, p.MinCapacity)
			}
			if p.CapacityProbes > 110 {
				t.Errorf("%s/%s: %d probes", w, p.Name, p.CapacityProbes)
			}
		}
	}
}

// Live bytes past 2^63 are refused naming the event, not wrapped.
func TestRunRefusesLiveBytesBeyond2To63(t *testing.T) {
	var events []trace.Event
	for i := range 5 {
		events = append(events, trace.Event{Op: trace.OpAlloc, T: int64(i), ID: uint64(i + 1), Size: trace.MaxSize - 2<<20})
	}
	_, err := Run(context.Background(), Source{Name: "huge", Events: events}, Options{})
	if !errors.Is(err, trace.ErrInvalidEvent) || !strings.Contains(err.Error(), "event 2") {
		t.Fatalf("got %v, want ErrInvalidEvent naming event 2", err)
	}
	if _, err := peakLive([]trace.Event{{Op: trace.OpAlloc, Stream: trace.MaxStreams}}); !errors.Is(err, trace.ErrInvalidEvent) || !strings.Contains(err.Error(), "event 0") {
		t.Fatalf("invalid event: %v", err)
	}
}

// A Source built in code (not decoded) with negative or decreasing times is
// refused before any replay: the report's span and timelines assume
// non-decreasing, non-negative t, and the int64 extremes made the span
// negative.
func TestRunRefusesNegativeAndDecreasingTimes(t *testing.T) {
	cases := map[string][]trace.Event{
		"negative":   {{Op: trace.OpAlloc, T: -5, ID: 1, Size: 10}},
		"decreasing": {{Op: trace.OpAlloc, T: 7, ID: 1, Size: 10}, {Op: trace.OpFree, T: 3, ID: 1}},
		"extremes":   {{Op: trace.OpAlloc, T: -1 << 63, ID: 1, Size: 10}, {Op: trace.OpFree, T: 1<<63 - 1, ID: 1}},
	}
	for name, events := range cases {
		_, err := Run(context.Background(), Source{Name: name, Events: events}, Options{})
		if !errors.Is(err, trace.ErrInvalidEvent) || !strings.Contains(err.Error(), "event ") {
			t.Errorf("%s: got %v, want ErrInvalidEvent naming the event", name, err)
		}
	}
}

// An alloc of a live ID is an implied free under every policy, the torch
// model included, and counted in the report.
func TestImpliedFreesAreCountedUnderEveryPolicy(t *testing.T) {
	events := []trace.Event{
		{Op: trace.OpAlloc, T: 0, ID: 1, Size: 1 << 20},
		{Op: trace.OpAlloc, T: 1, ID: 1, Size: 2 << 20},
		{Op: trace.OpFree, T: 2, ID: 1},
	}
	c, err := Run(context.Background(), Source{Name: "dup", Events: events}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Policies {
		if p.Report.ImpliedFrees != 1 || p.Report.Frees != 1 || p.FailedAllocs != 0 {
			t.Errorf("%s: implied frees %d frees %d failed %d", p.Name, p.Report.ImpliedFrees, p.Report.Frees, p.FailedAllocs)
		}
	}
}
