package compare

import (
	"context"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// Adaptive memory reports its tiny and small pools before the arena's, so
// the arena's outdated pools are the ones after its current (adaptive)
// pool, not after the first pool listed. Here an 8 MiB buffer pins the
// arena's first page while a 200 MiB one makes the arena grow; without
// relocation the old page stays, outdated, with the room the freed 8 MiB
// buffer left: that room is free in outdated pages, never in current ones.
func TestBreakdownCountsFreeRoomInTheArenasOutdatedPages(t *testing.T) {
	const MiB = 1 << 20
	events := []trace.Event{
		{Op: trace.OpAlloc, T: 0, ID: 1, Size: 8 * MiB},
		{Op: trace.OpAlloc, T: 1, ID: 2, Size: 8 * MiB},
		{Op: trace.OpFree, T: 2, ID: 2},
		{Op: trace.OpAlloc, T: 3, ID: 3, Size: 200 * MiB},
	}
	b, err := breakdownAt(context.Background(), AdaptivePagesNoRelocate, events, len(events)-1, 1<<30, deviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b == nil {
		t.Fatal("no breakdown at the last event")
	}
	if b.FreeInOutdatedPages < 8*MiB {
		t.Errorf("free in outdated pages %d B, want at least the freed 8 MiB buffer's room (breakdown %+v)", b.FreeInOutdatedPages, *b)
	}
	if b.Live != 208*MiB {
		t.Errorf("live %d B, want 208 MiB", b.Live)
	}
}
