package memory_test

import (
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// BenchmarkAllocFreeGranular measures steady Alloc + Free (reserve, bind,
// release) of sizes cycling over 64 KiB … 4 MiB on granular Sim storage,
// and in the same run the same loop with pages backed whole (the floor):
// x-pages is granular time over page-granular time. Without a MaxMemory
// figure nothing is unmapped, so the steady state costs the granule check
// of each reservation.
func BenchmarkAllocFreeGranular(b *testing.B) {
	sizes := []uint64{64*kib + 32, 256 * kib, mib, 4 * mib, 3*mib + 7}
	run := func(st storage.Storage, n int) time.Duration {
		m, err := memory.New(st, memory.Properties{MaxPageSize: gib, Alignment: 32}, memory.Config{}, nil, "bench", nil)
		if err != nil {
			b.Fatal(err)
		}
		live := make([]*handle.Handle, 8)
		step := func(i int) {
			if h := live[i%len(live)]; h != nil {
				h.Release()
			}
			reserved, err := m.Reserve(sizes[i%len(sizes)], memory.Allow, pool.Bind{})
			if err != nil {
				b.Fatal(err)
			}
			h := handle.New(handle.Uninit)
			if err := m.Bind(reserved, h, 0); err != nil {
				b.Fatal(err)
			}
			reserved.Release()
			live[i%len(live)] = h
		}
		for i := range 1000 { // warm up: pages and granules in place
			step(i)
		}
		start := time.Now()
		for i := range n {
			step(i)
		}
		return time.Since(start)
	}
	floor := run(hoststorage.NewSim(32, nil), b.N)
	b.ResetTimer()
	granular := run(hoststorage.NewGranularSim(32, 2*mib, nil), b.N)
	b.StopTimer()
	b.ReportMetric(float64(granular)/float64(floor), "x-pages")
}
