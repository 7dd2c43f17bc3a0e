package pool

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// discardCopies is a copy queue that copies nothing: it keeps storage copies
// out of a measurement of the arena's bookkeeping.
type discardCopies struct{}

func (discardCopies) WaitDevice() error                                  { return nil }
func (discardCopies) Copy(storage.Storage, relocation.StorageCopy) error { return nil }
func (discardCopies) WaitCopies() error                                  { return nil }

// outdatedArena returns an arena (Sim storage) whose outdated pool of
// pageSize pages holds n live allocations of size bytes, packed front to
// back, and whose current pool has grown past it with no pages of room.
// The pages are filled directly, not through Reserve: Reserve's first fit
// over every page would make the setup quadratic in n.
func outdatedArena(b *testing.B, n int, size, pageSize uint64) (*Arena, storage.Storage, []*handle.Handle) {
	b.Helper()
	st := hoststorage.NewSim(32, nil)
	a := NewArena(PageSizing{Min: pageSize, Max: GiB, Align: 32}, Limits{}, nil)
	cur := a.Current()
	hs := make([]*handle.Handle, 0, n)
	for len(hs) < n {
		var h *handle.Handle
		if len(cur.pages) > 0 {
			h, _ = cur.pages[len(cur.pages)-1].tryReserve(st, len(cur.pages[len(cur.pages)-1].slices)-1, size, Bind{}, nil)
		}
		if h == nil {
			var err error
			if h, err = cur.Alloc(st, size); err != nil {
				b.Fatal(err)
			}
		}
		hs = append(hs, h)
	}
	if _, err := a.Reserve(st, pageSize+1, nil, Bind{}); err != nil { // grow
		b.Fatal(err)
	}
	return a, st, hs
}

// BenchmarkPlanCommit measures the arena's share of a relocation: Plan,
// Copy through a queue that copies nothing, and Commit (with its Drain), per
// moved allocation. The floor is a map insert and delete per allocation,
// timed in the same run: the least bookkeeping a move could cost.
func BenchmarkPlanCommit(b *testing.B) {
	const n = 100_000
	cases := []struct{ size, pageSize uint64 }{
		{4 << 10, 64 << 10},
		{4 << 10, 2 * MiB},
	}
	for _, c := range cases {
		b.Run(fmt.Sprintf("%dKiB-in-%dKiB-pages", c.size>>10, c.pageSize>>10), func(b *testing.B) {
			var moves int
			var floor time.Duration
			for b.Loop() {
				b.StopTimer()
				a, st, _ := outdatedArena(b, n, c.size, c.pageSize)
				floor += mapFloor(n)
				b.StartTimer()

				plan := a.Plan(relocation.MayAllocate, st, nil)
				landed, err := plan.Copy(st, discardCopies{})
				if err != nil {
					b.Fatal(err)
				}
				a.Commit(landed, st, nil)

				b.StopTimer()
				if plan.Len() != n || a.HasOutdated() {
					b.Fatalf("%d moves, outdated %v; want %d moves emptying every outdated page", plan.Len(), a.HasOutdated(), n)
				}
				moves += plan.Len()
				b.StartTimer()
			}
			perMove := float64(b.Elapsed().Nanoseconds()) / float64(moves)
			floorPerMove := float64(floor.Nanoseconds()) / float64(moves)
			b.ReportMetric(perMove, "ns/move")
			b.ReportMetric(floorPerMove, "floor-ns/move")
			b.ReportMetric(perMove/floorPerMove, "x-floor")
		})
	}
}

// mapSink keeps the floor's map from being optimised away.
var mapSink int

// mapFloor times one map insert and one delete for each of n allocations.
func mapFloor(n int) time.Duration {
	start := time.Now()
	m := make(map[handle.ID]storage.Region)
	for i := range n {
		m[handle.ID(i)] = storage.Region{ID: storage.ID(i), Size: 4 << 10}
	}
	mapSink += len(m)
	for i := range n {
		delete(m, handle.ID(i))
	}
	return time.Since(start)
}
