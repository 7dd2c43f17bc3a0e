package torch

import (
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// A held free is PyTorch's free of a block with other streams' uses
// pending: the requested bytes drop at once, the block is not reused until
// its release, and the model then takes it back.
func TestHeldFreeKeepsTheBlockUntilItsRelease(t *testing.T) {
	run := func(held bool) Result {
		t.Helper()
		events := []trace.Event{
			{Op: trace.OpAlloc, T: 0, ID: 1, Size: 20 * MiB},
			{Op: trace.OpFree, T: 1, ID: 1, Held: held},
			{Op: trace.OpAlloc, T: 2, ID: 2, Size: 20 * MiB},
			{Op: trace.OpRelease, T: 3, ID: 1},
			{Op: trace.OpHold, T: 3},
			{Op: trace.OpPass, T: 4},
			{Op: trace.OpFree, T: 5, ID: 2},
			{Op: trace.OpCleanup, T: 6},
		}
		res, err := ReplayTorch(slices.Values(events), 0)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	plain, held := run(false), run(true)
	if plain.PeakReserved != 20*MiB || held.PeakReserved != 40*MiB {
		t.Fatalf("peak reserved: plain %d, held %d; want 20 MiB (reused) and 40 MiB (a second segment)", plain.PeakReserved, held.PeakReserved)
	}
	if plain.PeakLive != 20*MiB || held.PeakLive != 20*MiB || held.PeakAllocated != 20*MiB {
		t.Fatalf("peak live: plain %d, held %d, held peak allocated %d; want 20 MiB each (PyTorch's allocated bytes drop at free_requested)", plain.PeakLive, held.PeakLive, held.PeakAllocated)
	}
	if held.HeldFrees != 1 || held.IgnoredReleases != 0 || plain.IgnoredReleases != 1 || held.Skipped != 2 {
		t.Fatalf("held: %d held frees, %d ignored releases, %d skipped; plain: %d ignored releases", held.HeldFrees, held.IgnoredReleases, held.Skipped, plain.IgnoredReleases)
	}
	if held.FinalReserved != 0 || held.FinalAllocated != 0 || held.Stats.Requested != 0 {
		t.Fatalf("after the release, the frees and the cleanup: reserved %d, allocated %d, requested %d; want 0", held.FinalReserved, held.FinalAllocated, held.Stats.Requested)
	}
}
