package hoststorage_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

const granule = 2 * mib

// granularStorages are the granular backends under test, each with a fresh
// budget of capacity bytes.
func granularStorages(capacity uint64) map[string]interface {
	storage.Granular
	MappedGranules(storage.ID) []bool
} {
	return map[string]interface {
		storage.Granular
		MappedGranules(storage.ID) []bool
	}{
		"sim":  hoststorage.NewGranularSim(32, granule, storage.NewBudget(capacity)),
		"host": hoststorage.NewGranularHost(32, granule, storage.NewBudget(capacity)),
	}
}

func TestReserveTakesAddressSpaceButNoBudgetAndMapChargesWholeGranules(t *testing.T) {
	for name, st := range granularStorages(0) {
		t.Run(name, func(t *testing.T) {
			if st.Granule() != granule {
				t.Skipf("granule %d: this system maps no granules", st.Granule())
			}
			r, err := st.Reserve(7 * mib) // 4 granules, the last one partial
			if err != nil {
				t.Fatal(err)
			}
			if r.Offset != 0 || r.Size != 7*mib {
				t.Fatalf("Reserve(7 MiB) = %+v", r)
			}
			if st.BytesAllocated() != 0 || st.BytesReserved() != 8*mib {
				t.Fatalf("after Reserve: allocated %d reserved %d, want 0 and 8 MiB", st.BytesAllocated(), st.BytesReserved())
			}
			if err := st.Map(r.ID, 1, 3); err != nil {
				t.Fatal(err)
			}
			if st.BytesAllocated() != 6*mib {
				t.Fatalf("3 granules mapped: allocated %d, want 6 MiB (whole granules, G1)", st.BytesAllocated())
			}
			if got := st.MappedGranules(r.ID); !slices.Equal(got, []bool{false, true, true, true}) {
				t.Fatalf("mapped granules %v", got)
			}
			st.Unmap(r.ID, 2, 1)
			if st.BytesAllocated() != 4*mib {
				t.Fatalf("after unmapping one: allocated %d, want 4 MiB", st.BytesAllocated())
			}
			plain, err := st.Alloc(100)
			if err != nil {
				t.Fatal(err)
			}
			if st.BytesAllocated() != 4*mib+100 || st.BytesReserved() != 8*mib+100 {
				t.Fatalf("a plain allocation is backed whole (G4): allocated %d reserved %d", st.BytesAllocated(), st.BytesReserved())
			}
			st.Dealloc(r.ID)
			st.Dealloc(plain.ID)
			if st.BytesAllocated() != 0 || st.BytesReserved() != 0 || st.MappedGranules(r.ID) != nil {
				t.Fatalf("after Dealloc: allocated %d reserved %d", st.BytesAllocated(), st.BytesReserved())
			}
		})
	}
}

func TestResolveRefusesAWindowTouchingAnUnmappedGranule(t *testing.T) {
	for name, st := range granularStorages(0) {
		t.Run(name, func(t *testing.T) {
			if st.Granule() == 0 {
				t.Skip("this system maps no granules")
			}
			r, _ := st.Reserve(6 * mib)
			if err := st.Map(r.ID, 0, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Resolve(r.Sub(0, 2*mib)); err != nil {
				t.Fatalf("window on the mapped granule: %v", err)
			}
			if _, err := st.Resolve(r.Sub(mib, 2*mib)); !errors.Is(err, storage.ErrUnknownRegion) {
				t.Fatalf("window reaching granule 1: %v, want ErrUnknownRegion (G3)", err)
			}
			if _, err := st.Resolve(r.Sub(4*mib, 0)); err != nil {
				t.Fatalf("an empty window touches no granule: %v", err)
			}
			if _, err := st.Resolve(r.Sub(5*mib, 2*mib)); !errors.Is(err, storage.ErrUnknownRegion) {
				t.Fatalf("window past the end: %v", err)
			}
		})
	}
}

func TestRefusedMapChangesNothing(t *testing.T) {
	for name, st := range granularStorages(5 * mib) {
		t.Run(name, func(t *testing.T) {
			if st.Granule() == 0 {
				t.Skip("this system maps no granules")
			}
			r, _ := st.Reserve(8 * mib)
			if err := st.Map(r.ID, 0, 2); err != nil {
				t.Fatal(err)
			}
			err := st.Map(r.ID, 2, 1) // 6 MiB > 5 MiB budget
			if !errors.Is(err, storage.ErrOutOfMemory) {
				t.Fatalf("Map beyond the budget: %v, want ErrOutOfMemory", err)
			}
			if err := st.Map(r.ID, 3, 2); !errors.Is(err, storage.ErrUnknownRegion) {
				t.Fatalf("Map past the reservation: %v, want ErrUnknownRegion", err)
			}
			if err := st.Map(storage.ID(1<<62), 0, 1); !errors.Is(err, storage.ErrUnknownRegion) {
				t.Fatalf("Map of an unknown reservation: %v", err)
			}
			if st.BytesAllocated() != 4*mib || !slices.Equal(st.MappedGranules(r.ID), []bool{true, true, false, false}) {
				t.Fatalf("refusals changed the mapping: %d bytes, %v", st.BytesAllocated(), st.MappedGranules(r.ID))
			}
			st.Dealloc(r.ID)
		})
	}
}

func TestMappingAGranuleTwicePanics(t *testing.T) {
	st := hoststorage.NewGranularSim(32, granule, nil)
	r, _ := st.Reserve(4 * mib)
	if err := st.Map(r.ID, 0, 1); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("mapping a mapped granule did not panic")
		}
	}()
	_ = st.Map(r.ID, 0, 2)
}

func TestPlainHidesGranulesAndGranulateReplacesFreshHostAndSim(t *testing.T) {
	g := hoststorage.NewGranularSim(32, granule, nil)
	if storage.GranuleOf(g) != granule || storage.GranuleOf(hoststorage.Plain(g)) != 0 {
		t.Fatal("Plain did not hide the granule")
	}
	if storage.GranuleOf(hoststorage.NewSim(32, nil)) != 0 || storage.GranuleOf(hoststorage.NewFaulty(hoststorage.NewSim(32, nil))) != 0 {
		t.Fatal("a plain storage reports a granule")
	}
	b := storage.NewBudget(10 * mib)
	st, ok := hoststorage.Granulate(hoststorage.NewSim(50, b), 0)
	if !ok || storage.GranuleOf(st) != hoststorage.DefaultGranule || st.Alignment() != 50 {
		t.Fatalf("Granulate(Sim) = %T granule %d alignment %d", st, storage.GranuleOf(st), st.Alignment())
	}
	r, _ := st.(storage.Granular).Reserve(4 * mib)
	if err := st.(storage.Granular).Map(r.ID, 0, 2); err != nil || b.Used() != 4*mib {
		t.Fatalf("the granular storage does not draw on the old budget: %v, used %d", err, b.Used())
	}
	if _, ok := hoststorage.Granulate(hoststorage.NewFaulty(hoststorage.NewSim(32, nil)), 0); ok {
		t.Fatal("Granulate replaced a wrapped storage")
	}
	if _, ok := hoststorage.Plain(g).(storage.Granular); ok {
		t.Fatal("Plain's result still offers Reserve")
	}
}

func TestFaultyRefusesMappingsOnCueAndForwardsGranules(t *testing.T) {
	inner := hoststorage.NewGranularSim(32, granule, nil)
	f := hoststorage.NewFaulty(inner)
	if f.Granule() != granule {
		t.Fatalf("Faulty granule %d", f.Granule())
	}
	f.RefuseNextAllocs(1)
	if _, err := f.Reserve(4 * mib); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Reserve on RefuseNextAllocs: %v", err)
	}
	r, err := f.Reserve(8 * mib)
	if err != nil {
		t.Fatal(err)
	}
	f.RefuseNextMaps(1)
	if err := f.Map(r.ID, 0, 1); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Map on RefuseNextMaps: %v", err)
	}
	if err := f.Map(r.ID, 0, 1); err != nil {
		t.Fatalf("second Map: %v", err)
	}
	f.RefuseAllocAbove(5 * mib)
	if err := f.Map(r.ID, 1, 2); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Map above RefuseAllocAbove: %v", err)
	}
	if err := f.Map(r.ID, 1, 1); err != nil {
		t.Fatalf("Map up to the limit: %v", err)
	}
	f.Unmap(r.ID, 0, 2)
	if f.Refusals() != 3 || inner.BytesAllocated() != 0 || f.BytesReserved() != 8*mib {
		t.Fatalf("refusals %d allocated %d reserved %d", f.Refusals(), inner.BytesAllocated(), f.BytesReserved())
	}
	plain := hoststorage.NewFaulty(hoststorage.NewSim(32, nil))
	if _, err := plain.Reserve(mib); !errors.Is(err, storage.ErrNotGranular) {
		t.Fatalf("Reserve through Faulty over a plain storage: %v", err)
	}
}
