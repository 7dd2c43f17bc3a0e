package pool

import (
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
)

// BenchmarkReserveAcrossPages measures a free-then-reserve of 1 MiB on a
// pool of 64 pages of 16 MiB whose 1 MiB slices are live but for holes of
// 1 MiB (every fourth slice free) or 2 MiB (two of every four): first fit
// stops at the first page with room; the tightest page (PL33) stops at an
// exact fit, so with 1 MiB holes on the first page, and with 2 MiB holes
// looks at all 64 pages, its worst case. Compare the sub-benchmarks of one
// run (ns/op ratio against first-fit of the same holes).
func BenchmarkReserveAcrossPages(b *testing.B) {
	for _, tc := range []struct {
		name     string
		hole     int // free slices of every four
		tightest bool
	}{
		{"holes-1MiB/first-fit", 1, false}, {"holes-1MiB/tightest", 1, true},
		{"holes-2MiB/first-fit", 2, false}, {"holes-2MiB/tightest", 2, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			st := hoststorage.NewSim(32, nil)
			p := NewSliced(16*MiB, 16*MiB, false, 32, ArenaFirstIndex, Limits{})
			p.tightest = tc.tightest
			g := handle.NewErrorGraph()
			var live []*handle.Handle
			for range 64 {
				h, err := p.Alloc(st, MiB)
				if err != nil {
					b.Fatal(err)
				}
				live = append(live, h)
				for range 15 {
					live = append(live, p.TryReserve(st, MiB, g, Bind{}))
				}
			}
			// Holes of tc.hole MiB on every page.
			for i := range live {
				if i%4 < tc.hole {
					live[i].Release()
					live[i] = nil
				}
			}
			b.ResetTimer()
			for b.Loop() {
				h := p.TryReserve(st, MiB, g, Bind{})
				if h == nil {
					b.Fatal("no room")
				}
				h.Release()
			}
		})
	}
}
