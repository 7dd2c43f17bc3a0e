package memory_test

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// granularManager builds an adaptive manager (1 GiB max page, 2 MiB arena
// floor, alignment 32) on st, granular Sim storage with 2 MiB granules,
// judging pressure against maxMemory (0: never under pressure). On granular
// storage the small page is SmallPage, 8 MiB.
func granularManager(t *testing.T, st storage.Storage, maxMemory uint64, c memory.Config) *memory.Manager {
	t.Helper()
	return granularManagerMax(t, st, maxMemory, gib, c)
}

// granularManagerMax is granularManager with a max page of maxPage: on
// granular storage the arena's first growth takes the largest page (pool
// PL31), so a test that wants 20 MiB pages says so here.
func granularManagerMax(t *testing.T, st storage.Storage, maxMemory, maxPage uint64, c memory.Config) *memory.Manager {
	t.Helper()
	return newManagerOn(t, st, memory.Properties{MaxPageSize: maxPage, Alignment: 32, MaxMemory: maxMemory}, c)
}

func TestManagerCountsMappedBytesAndUnmapsOnExplicitCleanup(t *testing.T) {
	st := hoststorage.NewGranularSim(32, 2*mib, nil)
	m := granularManagerMax(t, st, 0, 20*mib, memory.Config{})
	if m.Granule() != 2*mib {
		t.Fatalf("manager granule %d", m.Granule())
	}
	big := alloc(t, m, 19*mib, memory.Allow) // grows to the largest page, 20 MiB: 10 granules, all touched
	if st.BytesAllocated() != 20*mib || st.BytesReserved() != 20*mib {
		t.Fatalf("one 19 MiB allocation: %d mapped, %d reserved", st.BytesAllocated(), st.BytesReserved())
	}
	small := alloc(t, m, 1*mib, memory.Allow) // [19, 20) MiB: granule 9, mapped already
	if !samePage(small.Location(), big.Location()) || st.BytesAllocated() != 20*mib {
		t.Fatalf("1 MiB at %v (19 MiB at %v), %d mapped; want the last MiB of the page", small.Location(), big.Location(), st.BytesAllocated())
	}
	big.Release()
	m.Cleanup(pool.Periodic) // no MaxMemory: never under pressure
	if st.BytesAllocated() != 20*mib {
		t.Fatalf("periodic cleanup without pressure unmapped: %d mapped", st.BytesAllocated())
	}
	m.Cleanup(pool.Explicit)
	if st.BytesAllocated() != 2*mib {
		t.Fatalf("explicit cleanup: %d mapped, want one granule", st.BytesAllocated())
	}
	u := m.Report().Usage()
	if u.BytesReserved != 20*mib || u.BytesMapped() != 2*mib || u.BytesUnmapped != 18*mib {
		t.Fatalf("usage %+v: want 20 MiB reserved, the 2 MiB of granule 9 mapped", u)
	}
	if m.Stats().BytesUnmapped != 0 {
		t.Fatalf("explicit unmapping counted as periodic: %d", m.Stats().BytesUnmapped)
	}
	small.Release()
}

func TestPeriodicCleanupUnmapsOnlyUnderPressureAndNeverWithoutAllow(t *testing.T) {
	st := hoststorage.NewGranularSim(32, 2*mib, nil)
	// Capacity 64 MiB, current page 20 MiB (20 MiB grows it to the largest
	// page): High ⇔ mapped + 20 > 64 − 20.
	m := granularManagerMax(t, st, 64*mib, 20*mib, memory.Config{})
	big := alloc(t, m, 20*mib, memory.Allow)
	keep := alloc(t, m, 1*mib, memory.Allow) // a second 20 MiB page, one granule mapped
	big.Release()
	// Mapped 22 MiB: 22 + 20 = 42 > 44? no → not under pressure.
	alloc(t, m, 0, memory.Allow).Release()
	if st.BytesAllocated() != 22*mib {
		t.Fatalf("unmapped without pressure: %d mapped", st.BytesAllocated())
	}
	// Fill the freed first page from held room (its granules are still
	// mapped), so the next 4 MiB goes beside keep on the second page and
	// maps two granules there: 26 MiB mapped.
	front := alloc(t, m, 19*mib, memory.Allow)
	other := alloc(t, m, 4*mib, memory.Allow)
	front.Release()
	other.Release()
	// Under AddOnly and Forbidden nothing is unmapped, pressure or not.
	for _, u := range []memory.PageUpdate{memory.AddOnly, memory.Forbidden} {
		h := alloc(t, m, 1*mib, u)
		h.Release()
		if st.BytesAllocated() != 26*mib {
			t.Fatalf("%v reservation unmapped: %d mapped", u, st.BytesAllocated())
		}
	}
	// Mapped 26: 26 + 20 = 46 > 44 → High: an Allow reservation's periodic
	// cleanup unmaps every free granule first (the first page's 20 MiB and
	// the second's 4 MiB).
	h := alloc(t, m, 32, memory.Allow) // small pool: 8 MiB page, one granule
	if got := st.BytesAllocated(); got != 2*mib+2*mib {
		t.Fatalf("under pressure: %d mapped, want keep's granule and the small page's", got)
	}
	if m.Stats().BytesUnmapped != 24*mib {
		t.Fatalf("Stats.BytesUnmapped = %d, want 24 MiB", m.Stats().BytesUnmapped)
	}
	h.Release()
	keep.Release()
}

func TestGuardedPageKeepsItsGranulesThroughCleanups(t *testing.T) {
	st := hoststorage.NewGranularSim(32, 2*mib, nil)
	m := granularManager(t, st, 0, memory.Config{})
	big := alloc(t, m, 19*mib, memory.Allow)  // a 20 MiB page
	small := alloc(t, m, 1*mib, memory.Allow) // its last MiB: the page big leaves guarded
	if !samePage(small.Location(), big.Location()) {
		t.Fatalf("1 MiB at %v, 19 MiB at %v: want one page", small.Location(), big.Location())
	}
	g, ok := m.Guard(small.Location())
	if !ok {
		t.Fatal("no guard")
	}
	big.Release()
	m.Cleanup(pool.Explicit)
	if st.BytesAllocated() != 20*mib {
		t.Fatalf("explicit cleanup unmapped a guarded page: %d mapped", st.BytesAllocated())
	}
	g.Release()
	m.Cleanup(pool.Explicit)
	if st.BytesAllocated() != 2*mib {
		t.Fatalf("after the guard went: %d mapped", st.BytesAllocated())
	}
	small.Release()
}

func TestRefusedMappingFailsTheReservationWithOutOfMemoryAndChangesNothing(t *testing.T) {
	inner := hoststorage.NewGranularSim(32, 2*mib, nil)
	st := hoststorage.NewFaulty(inner)
	m := granularManager(t, st, 0, memory.Config{})
	big := alloc(t, m, 20*mib, memory.Allow)
	big.Release()
	m.Cleanup(pool.Explicit) // the page goes back: nothing held
	before := m.Report()
	st.RefuseNextMaps(1)
	_, err := m.Reserve(20*mib, memory.Allow, pool.Bind{})
	if !errors.Is(err, storage.ErrOutOfMemory) || !memory.MaySucceedAfterReclaim(err) {
		t.Fatalf("Reserve with its mapping refused: %v, want a retryable ErrOutOfMemory", err)
	}
	if inner.BytesAllocated() != 0 || inner.BytesReserved() != 0 {
		t.Fatalf("refused reservation left %d mapped, %d reserved", inner.BytesAllocated(), inner.BytesReserved())
	}
	if after := m.Report(); after.Usage() != before.Usage() {
		t.Fatalf("usage changed: %+v → %+v", before.Usage(), after.Usage())
	}
	h := alloc(t, m, 20*mib, memory.Allow)
	h.Release()
}

func TestPageGranularOffBacksPagesWhole(t *testing.T) {
	st := hoststorage.NewGranularSim(32, 2*mib, nil)
	m := granularManager(t, st, 0, memory.Config{PageGranular: memory.GranulesOff})
	if m.Granule() != 0 {
		t.Fatalf("granule %d with PageGranular off", m.Granule())
	}
	h := alloc(t, m, 20*mib, memory.Allow) // a 20 MiB page
	// No room beside it: a second 20 MiB page, of which granular storage
	// would map one granule.
	one := alloc(t, m, 1*mib, memory.Allow)
	if st.BytesAllocated() != 40*mib {
		t.Fatalf("%d bytes allocated, want both 20 MiB pages whole", st.BytesAllocated())
	}
	// On pages backed whole the small page is SmallPageWhole, 2 MiB.
	tiny := alloc(t, m, 32, memory.Allow)
	if small := m.Report().Dynamic[1]; small.Usage.BytesReserved != memory.SmallPageWhole || st.BytesAllocated() != 42*mib {
		t.Fatalf("small pool report %+v, %d bytes allocated; want one whole 2 MiB small page", small, st.BytesAllocated())
	}
	releaseAll(h, one, tiny)
}

func TestPageGranularityIsValidatedAndParsed(t *testing.T) {
	p := adaptivePreset(0)
	if err := (memory.Config{PageGranular: 2}).Validate(p); !errors.Is(err, memory.ErrInvalidConfig) {
		t.Fatalf("unknown PageGranular: %v", err)
	}
	for _, want := range []memory.PageGranularity{memory.GranulesAuto, memory.GranulesOff} {
		got, err := memory.ParsePageGranularity(want.String())
		if err != nil || got != want {
			t.Fatalf("ParsePageGranularity(%q) = %v, %v", want.String(), got, err)
		}
	}
	if _, err := memory.ParsePageGranularity("on"); !errors.Is(err, memory.ErrInvalidConfig) {
		t.Fatalf("ParsePageGranularity(on): %v", err)
	}
}

// The pressure margin is the largest reservation the arena served, not its
// page: with the cuda backend's default, a max page of a quarter of the
// device, a page-sized margin would unmap every free granule once half the
// device is mapped, on every reservation, and nothing would stay cached.
func TestPressureKeepsRoomForTheLargestReservationNotAPage(t *testing.T) {
	st := hoststorage.NewGranularSim(32, 2*mib, nil)
	m := granularManagerMax(t, st, 256*mib, 64*mib, memory.Config{})
	var held []*handle.Handle
	for range 18 { // 144 MiB mapped on 64 MiB pages: over half the device
		held = append(held, alloc(t, m, 8*mib, memory.Allow))
	}
	held[5].Release() // 8 MiB of mapped granules free in the middle of a page
	alloc(t, m, 32, memory.Allow).Release()
	if got := st.BytesAllocated(); got != 144*mib+2*mib {
		t.Fatalf("at 144 MiB of 256 with 8 MiB reservations: %d mapped, want the freed granules kept (and the small page's)", got)
	}
	for range 12 { // 240 MiB: 240 + 8 > 256 − 8
		held = append(held, alloc(t, m, 8*mib, memory.Allow))
	}
	if got := st.BytesAllocated(); got > 242*mib {
		t.Fatalf("under pressure: %d mapped, want the free granules unmapped", got)
	}
	for i, h := range held {
		if i != 5 {
			h.Release()
		}
	}
}
