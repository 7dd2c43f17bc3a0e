package pool

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// budgetDry answers for a storage drawing on budget b, as the storage would
// (a pool test's Dry; the device's is gpumem's dryStorage).
type budgetDry struct {
	st storage.Storage
	b  *storage.Budget
}

func (d budgetDry) Granule() uint64 { return storage.GranuleOf(d.st) }

func (d budgetDry) grant(n uint64) error {
	if c := d.b.Capacity(); c != 0 && storage.SatAdd(d.b.Used(), n) > c {
		return &storage.OutOfMemoryError{Requested: n, Allocated: d.b.Used(), Capacity: c}
	}
	return nil
}

func (d budgetDry) Alloc(size uint64) error { return d.grant(size) }
func (d budgetDry) Reserve(uint64) error    { return nil }
func (d budgetDry) Map(_ storage.ID, granules []uint64) (uint64, error) {
	n := uint64(len(granules)) * d.Granule()
	return n, d.grant(n)
}
func (budgetDry) Dealloc(storage.ID)               {}
func (budgetDry) Unmap(storage.ID, uint64, uint64) {}
func (d budgetDry) Allocated() uint64              { return d.st.BytesAllocated() }

// arenaShape is what a reservation adds to an arena: its pages and sizes,
// its growths.
func arenaShape(a *Arena) (pages map[storage.ID]uint64, growths uint64) {
	pages = map[storage.ID]uint64{}
	for _, p := range a.slots {
		if p == nil {
			continue
		}
		for _, pg := range p.pages {
			pages[pg.region.ID] = pg.size()
		}
	}
	return pages, a.Growths()
}

// releaseOne releases one of live, at random, and returns the rest.
func releaseOne(rng *rand.Rand, live []*handle.Handle) []*handle.Handle {
	i := rng.IntN(len(live))
	live[i].Release()
	live[i] = live[len(live)-1]
	return live[:len(live)-1]
}

// reserveAsWould reserves size on a and fails t (naming where) unless w,
// the dry run's answer on the arena as it is now, said what happened: it
// would succeed ⇔ Reserve does; a growth ⇔ the arena grew; held room ⇔ no
// page was added, else one page of w.Alloc bytes. It returns the
// reservation, nil when refused.
func reserveAsWould(t *testing.T, a *Arena, st storage.Storage, g *handle.ErrorGraph, size uint64, w Would, where string) *handle.Handle {
	t.Helper()
	before, growths := arenaShape(a)
	h, err := a.Reserve(st, size, g, Bind{})
	if w.OK() != (err == nil) {
		t.Fatalf("%s: WouldReserve(%d) = %+v, Reserve: %v", where, size, w, err)
	}
	if err != nil {
		return nil
	}
	after, grown := arenaShape(a)
	var added []uint64
	for id, bytes := range after {
		if _, ok := before[id]; !ok {
			added = append(added, bytes)
		}
	}
	switch {
	case (grown > growths) != (w.Way == WouldGrow):
		t.Fatalf("%s: WouldReserve(%d) = %+v, the arena grew %d times", where, size, w, grown-growths)
	case w.Way == WouldHeld && len(added) != 0, w.Way != WouldHeld && (len(added) != 1 || added[0] != w.Alloc):
		t.Fatalf("%s: WouldReserve(%d) = %+v, Reserve added pages of %v bytes", where, size, w, added)
	}
	return h
}

// The arena's dry run agrees with its reservation over random sequences on
// whole and granular pages at capacities that refuse pages: it would
// succeed ⇔ Reserve does, from held room ⇔ no page was added, on a new
// page or a growth of the size it says; and it changes nothing (the
// report, the page hints the invariants check, Check itself).
func TestArenaWouldReserveAgreesWithReserve(t *testing.T) {
	cases := 0
	ways := map[WouldWay]int{}
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 0xa7e4a))
		b := storage.NewBudget((24 + uint64(rng.IntN(64))) * MiB)
		var st storage.Storage = hoststorage.NewSim(256, b)
		if rng.IntN(2) == 0 {
			st = hoststorage.NewGranularSim(256, hoststorage.DefaultGranule, b)
		}
		a := NewArena(NewPageSizing(16*MiB, 256), Limits{}, nil)
		g := handle.NewErrorGraph()
		var live []*handle.Handle
		for step := range 200 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				live = releaseOne(rng, live)
				continue
			}
			size := 1 + uint64(rng.IntN(int(6*MiB)))
			if rng.IntN(8) == 0 {
				size = 6*MiB + uint64(rng.IntN(int(12*MiB)))
			}
			report := a.Report()
			w := a.WouldReserve(NewView(budgetDry{st, b}, nil), size)
			if !reflect.DeepEqual(report, a.Report()) {
				t.Fatalf("seed %d step %d: WouldReserve(%d) changed the report", seed, step, size)
			}
			a.Check()
			cases++
			ways[w.Way]++
			h := reserveAsWould(t, a, st, g, size, w, fmt.Sprintf("seed %d step %d", seed, step))
			if h == nil {
				continue
			}
			live = append(live, h)
			a.Check()
		}
		for _, h := range live {
			h.Release()
		}
	}
	t.Logf("%d reservations: %v", cases, ways)
	for _, way := range []WouldWay{WouldFail, WouldHeld, WouldPage, WouldGrow} {
		if ways[way] == 0 {
			t.Errorf("no reservation answered %v: %v", way, ways)
		}
	}
}
