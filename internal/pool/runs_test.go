package pool

import (
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
)

// tightestByLooking is PL33's answer found the way the rule reads: every
// unguarded page's smallest free run of at least need bytes (free slices
// side by side count as one run, merged or not), the smallest of them, the
// first page on a tie; -1 when no page holds need.
func tightestByLooking(p *Sliced, need uint64) int {
	best, tightest := -1, uint64(0)
	for i, pg := range p.pages {
		if pg.guarded() {
			continue
		}
		var run uint64
		end := func() {
			if run >= need && (best < 0 || run < tightest || (run == tightest && i < best)) {
				best, tightest = i, run
			}
			run = 0
		}
		for j := range pg.slices {
			if pg.slices[j].h.IsFree() {
				run += pg.slices[j].EffectiveSize()
				continue
			}
			end()
		}
		end()
	}
	return best
}

// PL33 through the run index: on random reservations, releases, guards and
// page releases over many pages, each reservation lands on the page a look
// at every page's free runs names, and the index stays what the pages hold
// (Check, runIndex.check). The index only follows the pages (signals that
// rise, carves); a missed change would send a reservation elsewhere.
func TestRunIndexFindsTheTightestPage(t *testing.T) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 33))
		st := hoststorage.NewSim(32, nil)
		g := handle.NewErrorGraph()
		p := NewSliced(4*MiB, 4*MiB, false, 32, ArenaFirstIndex, Limits{})
		p.tightest = true
		var live []*handle.Handle
		var guards []*PageGuard
		for step := range 400 {
			switch r := rng.IntN(20); {
			case r < 10 || len(live) == 0:
				size := uint64(1 + rng.IntN(int(MiB)))
				if rng.IntN(6) == 0 {
					size = uint64(MiB + rng.IntN(int(3*MiB)))
				}
				_, need := padded(size, p.align)
				want := tightestByLooking(p, need)
				h := p.TryReserve(st, size, g, Bind{})
				switch {
				case h == nil && want >= 0:
					t.Fatalf("seed %d step %d: %d bytes found no page; page %d holds a run for them", seed, step, need, want)
				case h != nil && len(p.pages) >= 2 && int(h.Location().Page()) != want:
					t.Fatalf("seed %d step %d: %d bytes on page %d, the tightest is page %d", seed, step, need, h.Location().Page(), want)
				case h == nil:
					var err error
					if h, err = p.Alloc(st, size); err != nil {
						t.Fatal(err)
					}
				}
				live = append(live, h)
			case r < 17:
				i := rng.IntN(len(live))
				live[i].Release()
				live = append(live[:i], live[i+1:]...)
			case r < 18 && len(p.pages) > 0:
				pg, ok := p.Guard(handle.MustLocation(p.index, rng.IntN(len(p.pages)), 0))
				if ok {
					guards = append(guards, pg)
				}
			case r < 19 && len(guards) > 0:
				guards[0].Release()
				guards = guards[1:]
			default:
				p.ReleaseEmpty(st, g)
			}
			p.Check()
		}
		if p.runs == nil {
			t.Fatalf("seed %d: no reservation asked the run index", seed)
		}
	}
}
