package torch

import (
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// FailFast stops at the first failed allocation, with the figures up to it;
// without it the replay goes on.
func TestReplayFailFastStopsAtTheFirstFailure(t *testing.T) {
	events := []trace.Event{
		{Op: trace.OpAlloc, T: 0, ID: 1, Size: 30 << 20},
		{Op: trace.OpAlloc, T: 1, ID: 2, Size: 30 << 20},
		{Op: trace.OpFree, T: 2, ID: 1},
		{Op: trace.OpAlloc, T: 3, ID: 3, Size: 1 << 20},
	}
	all, err := Replay(slices.Values(events), Config{Capacity: 40 << 20})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := Replay(slices.Values(events), Config{Capacity: 40 << 20, FailFast: true})
	if err != nil {
		t.Fatal(err)
	}
	if all.FirstFailure != 1 || all.Events != 4 || all.Allocs != 2 {
		t.Fatalf("without FailFast: first failure %d, %d events, %d allocs", all.FirstFailure, all.Events, all.Allocs)
	}
	if fast.FirstFailure != 1 || fast.Events != 2 || fast.FailedAllocs != 1 || fast.Allocs != 1 {
		t.Fatalf("with FailFast: first failure %d, %d events, %d failed, %d allocs", fast.FirstFailure, fast.Events, fast.FailedAllocs, fast.Allocs)
	}
}
