package pool

import (
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// A Held plan must find the target TryReserve finds: page 0's fit needs an
// unmapped granule the budget refuses, page 1 has mapped room.
func TestPlanPassesOverAPageWhoseGranulesTheStorageRefusesToMap(t *testing.T) {
	const mib = 1 << 20
	g := handle.NewErrorGraph()
	st := hoststorage.NewGranularSim(32, mib, storage.NewBudget(12*mib))
	// A growth on granular storage takes the largest page (PL31): 10 MiB.
	a := NewArena(PageSizing{Min: 4 * mib, Max: 10 * mib, Align: 32}, Limits{}, nil)
	x, err := a.Reserve(st, mib, g, Bind{})
	if err != nil {
		t.Fatal(err)
	}
	// Grow to 10 MiB pages; x's pool outdated, page 0 keeps a 1 MiB
	// unmapped tail.
	big, err := a.Reserve(st, 9*mib, g, Bind{})
	if err != nil || a.PageSize() != 10*mib {
		t.Fatal(err, a.PageSize())
	}
	y, err := a.Reserve(st, 2*mib, g, Bind{}) // page 1 of the current pool, granules 0-1 mapped
	if err != nil || y.Location().Page() != 1 {
		t.Fatal(err, y.Location())
	}
	y.Release()
	t.Logf("allocated %d of 12 MiB", st.BytesAllocated()/mib)
	// What TryReserve answers for x's move:
	probe := a.Current().TryReserve(st, mib, g, Bind{})
	t.Logf("TryReserve(1 MiB) -> %v", probe.Location())
	probe.Release()
	plan := a.Plan(relocation.Held, st, g)
	if plan.IsEmpty() {
		t.Fatalf("Held plan found no target for x, although TryReserve places it on page 1")
	}
	plan.Abandon()
	x.Release()
	big.Release()
}
