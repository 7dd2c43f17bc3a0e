//go:build invariants

package memory

import (
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/pool"
)

// The invariants build checks every mutation of a small memory, and one
// routine mutation in 1 + n/invariantSampleSlices once it holds n live
// allocations; a cleanup that is not periodic is checked every time.
func TestInvariantChecksAreSampledOnlyOnALargeMemory(t *testing.T) {
	m, err := New(hoststorage.NewSim(32, nil), Properties{MaxPageSize: 1 << 30, Alignment: 32}, Config{}, nil, "s0", nil)
	if err != nil {
		t.Fatal(err)
	}
	var live []*handle.Handle
	reserve := func() {
		h, err := m.Reserve(4<<10, Allow, pool.Bind{})
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, h)
	}
	defer func() {
		for _, h := range live {
			h.Release()
		}
	}()
	for range invariantSampleSlices / 2 {
		before := m.inv.checks
		reserve()
		if m.inv.checks == before {
			t.Fatalf("reservation %d of a small memory unchecked", len(live))
		}
	}
	for len(live) < 10*invariantSampleSlices {
		reserve()
	}
	checks, routines := m.inv.checks, m.inv.routines
	for range 200 {
		reserve()
	}
	// With 640 to 840 live, one routine mutation (a reservation, its
	// periodic cleanup) in 11 to 14 is checked.
	got, n := m.inv.checks-checks, m.inv.routines-routines
	if got < n/14 || got > n/11+1 {
		t.Fatalf("%d of %d routine mutations checked with %d live, want one in 11 to 14", got, n, len(live))
	}
	before := m.inv.checks
	m.Cleanup(pool.Explicit)
	if m.inv.checks != before+1 {
		t.Fatal("an explicit cleanup went unchecked")
	}
}
