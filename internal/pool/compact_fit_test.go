package pool

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
)

// A page's moves placed through the listed free slices (fits) land where
// bestFit, asked move by move, puts them: the same targets in the same
// order, on random layouts of two pools. A difference would change every
// compaction plan on whole pages.
func TestFitsPlaceAsBestFitDoes(t *testing.T) {
	for seed := range uint64(80) {
		rng := rand.New(rand.NewPCG(seed, 9))
		st := hoststorage.NewSim(32, nil)
		g := handle.NewErrorGraph()
		sc := compactScope{
			NewSliced(4*MiB, 4*MiB, false, 32, ArenaFirstIndex, Limits{}),
			NewSliced(2*MiB, 2*MiB, false, 32, ArenaFirstIndex+1, Limits{}),
		}
		var live []*handle.Handle
		for range 30 + rng.IntN(80) {
			p := sc[rng.IntN(2)]
			size := uint64(1 + rng.IntN(int(p.pageSize/4)))
			if rng.IntN(3) == 0 {
				size = uint64(1+rng.IntN(8)) << 10 // equal sizes: ties
			}
			live = append(live, slicedReserve(t, p, st, size, g))
		}
		rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		for _, h := range live[:len(live)/2] {
			h.Release()
		}
		source := sc.marks()
		checked := 0
		for k, p := range sc {
			for i, pg := range p.pages {
				pg.coalesce(g)
				ls := pg.liveSlices()
				if len(ls) == 0 {
					continue
				}
				source[k][i] = true
				moves, overflow := sc.moveWhatFits(pg, slices.Clone(ls), source, st, g, nil)
				var got []placed
				for _, m := range moves {
					got = append(got, placedAt(sc, m.Target()))
				}
				releaseMoves(moves, 0)
				// The same moves, bestFit asked for each.
				pg.largestFirst(ls)
				var want []placed
				var wantOverflow []int
				var targets []*handle.Handle
				for _, j := range ls {
					h, _ := sc.bestFit(pg.slices[j].Region.Size, source, false, st, g)
					if h == nil {
						wantOverflow = append(wantOverflow, j)
						continue
					}
					want = append(want, placedAt(sc, h))
					targets = append(targets, h)
				}
				for _, h := range targets {
					h.Release()
				}
				source[k][i] = false
				if !slices.Equal(got, want) || !slices.Equal(overflow, wantOverflow) {
					t.Fatalf("seed %d pool %d page %d: fits placed %v (left %v); bestFit places %v (left %v)", seed, k, i, got, overflow, want, wantOverflow)
				}
				checked++
			}
		}
		if checked == 0 {
			t.Fatalf("seed %d: no page with live slices to check", seed)
		}
	}
}

// placed is where a target lies: pool, page and offset (slice indices
// change as released targets merge again).
type placed struct {
	pool uint8
	page uint32
	off  uint64
}

func placedAt(sc compactScope, h *handle.Handle) placed {
	loc := h.Location()
	return placed{loc.Pool(), loc.Page(), sc[sc.index(loc.Pool())].Slice(loc).Region.Offset}
}
