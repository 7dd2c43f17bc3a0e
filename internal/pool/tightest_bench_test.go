package pool

import (
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// BenchmarkReserveAcrossPages measures a free-then-reserve of 1 MiB on a
// pool of 64 pages of 16 MiB, each holding 12 live 1 MiB slices with free
// holes between them: first fit stops at the first page with room, the
// tightest page (PL33) looks at every page with room. Compare the two
// sub-benchmarks of one run (ns/op ratio).
func BenchmarkReserveAcrossPages(b *testing.B) {
	for _, tc := range []struct {
		name     string
		tightest bool
	}{{"first-fit", false}, {"tightest", true}} {
		b.Run(tc.name, func(b *testing.B) {
			st := storage.NewSim(32, nil)
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
					live = append(live, p.TryReserve(st, MiB, g))
				}
			}
			// Free every fourth slice: holes of 1 MiB on every page.
			for i := 0; i < len(live); i += 4 {
				live[i].Release()
				live[i] = nil
			}
			b.ResetTimer()
			for b.Loop() {
				h := p.TryReserve(st, MiB, g)
				if h == nil {
					b.Fatal("no room")
				}
				h.Release()
			}
		})
	}
}
