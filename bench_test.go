package gpumem

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"
)

// Benchmarks report domain units and a ratio to a floor measured in the
// same run (metric "x-floor"), so results survive a change of machine.

// allocFreeFloor returns the ns of the floor for one Alloc+Free pair: an
// uncontended sync.Mutex Lock/Unlock around a map insert and delete — the
// least bookkeeping a locked allocator can do.
func allocFreeFloor() float64 {
	var mu sync.Mutex
	m := make(map[uint64]uint64, 16)
	const n = 1 << 20
	start := time.Now()
	for i := range uint64(n) {
		mu.Lock()
		m[i] = i
		delete(m, i)
		mu.Unlock()
	}
	return float64(time.Since(start).Nanoseconds()) / n
}

// BenchmarkAllocFree measures a steady-state Alloc + Free pair on the host
// device. Once warm a pair must not reach the storage (storage-calls/op 0):
// the freed slice is reused; nor the Go heap (allocs/op 0, with -benchmem):
// the freed buffer's descriptor is (H6).
func BenchmarkAllocFree(b *testing.B) {
	for _, size := range []uint64{4 * kib, 256 * kib} {
		b.Run(fmt.Sprintf("%dKiB", size/kib), func(b *testing.B) {
			d := openHost(b)
			s := d.DefaultStream()
			ctx := context.Background()
			for range 3 { // warm: the page exists and the slice is cached
				mustFree(b, mustAlloc(b, s, size))
			}
			floor := allocFreeFloor()
			before := d.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				buf, err := s.Alloc(ctx, size)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := d.Stats()
			calls := (after.StorageAllocs + after.StorageDeallocs) - (before.StorageAllocs + before.StorageDeallocs)
			nsPerOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(calls)/float64(b.N), "storage-calls/op")
			b.ReportMetric(floor, "floor-ns/op")
			b.ReportMetric(nsPerOp/floor, "x-floor")
		})
	}
}

// BenchmarkPairAmongLiveBuffers is the steady 4 KiB Alloc + Free pair with
// 10^3 and 10^4 other buffers live on the stream's pages: what a device in
// use sees. A reservation rescans a page only from the slice a release
// freed, so the pair should cost about what it costs alone (x-floor as in
// BenchmarkAllocFree); it once grew with the live slices before the freed
// one (2.4 µs with 10^3, 4 µs with 10^4).
func BenchmarkPairAmongLiveBuffers(b *testing.B) {
	for _, live := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("%d", live), func(b *testing.B) {
			d := openHost(b)
			s := d.DefaultStream()
			ctx := context.Background()
			keep := make([]Buffer, 0, live)
			for range live {
				keep = append(keep, mustAlloc(b, s, 4*kib))
			}
			mustFree(b, mustAlloc(b, s, 4*kib))
			floor := allocFreeFloor()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				buf, err := s.Alloc(ctx, 4*kib)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			nsPerOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(floor, "floor-ns/op")
			b.ReportMetric(nsPerOp/floor, "x-floor")
			for _, k := range keep {
				mustFree(b, k)
			}
		})
	}
}

// heapInUse returns HeapAlloc after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkHeapPerLiveBuffer measures the Go heap a live buffer costs
// (bookkeeping only: the host storage's page bytes live on the Go heap too
// and are subtracted) with 10^5 live 64-byte buffers, and the allocations
// one Alloc makes. The floor is a plain map[uint64][3]uint64 entry per
// buffer (ID → page, offset, size), measured the same way. fill-ns/Alloc
// is the mean time of the 10^5 allocations filling the device: it shows how
// an Alloc's cost grows with the live slices a page holds.
func BenchmarkHeapPerLiveBuffer(b *testing.B) {
	const live = 100_000
	floorPer := func() float64 {
		before := heapInUse()
		m := make(map[uint64][3]uint64)
		for i := range uint64(live) {
			m[i] = [3]uint64{i, i, i}
		}
		after := heapInUse()
		runtime.KeepAlive(m)
		return float64(after-before) / live
	}()
	var perBuffer, allocs, fillNs float64
	for b.Loop() {
		d, err := Open()
		if err != nil {
			b.Fatal(err)
		}
		s := d.DefaultStream()
		ctx := context.Background()
		bufs := make([]Buffer, 0, live)
		heapBefore, storageBefore := heapInUse(), d.Stats().BytesAllocated
		start := time.Now()
		for range live {
			buf, err := s.Alloc(ctx, 64)
			if err != nil {
				b.Fatal(err)
			}
			bufs = append(bufs, buf)
		}
		fillNs = float64(time.Since(start).Nanoseconds()) / live
		heapAfter, storageAfter := heapInUse(), d.Stats().BytesAllocated
		perBuffer = (float64(heapAfter-heapBefore) - float64(storageAfter-storageBefore)) / live
		more := make([]Buffer, 0, 1000)
		allocs = testing.AllocsPerRun(1000, func() {
			buf, err := s.Alloc(ctx, 64)
			if err != nil {
				b.Fatal(err)
			}
			more = append(more, buf)
		})
		for _, buf := range append(bufs, more...) {
			if err := buf.Free(); err != nil {
				b.Fatal(err)
			}
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perBuffer, "heap-B/buffer")
	b.ReportMetric(allocs, "allocs/Alloc")
	b.ReportMetric(fillNs, "fill-ns/Alloc")
	b.ReportMetric(floorPer, "floor-B/entry")
	b.ReportMetric(perBuffer/floorPer, "x-floor")
}

// copyFloor times plain copy() of len(src) bytes into dst under the cache
// conditions the relocation meets (src written first, then big, as the
// setup writes the growth buffer last): once in chunks of each bytes, one
// copy() per allocation as the relocation does, and once as one copy().
func copyFloor(src, dst, big []byte, each int) (chunked, whole time.Duration) {
	touch := func() {
		for i := range src {
			src[i] = byte(i)
		}
		for i := range big {
			big[i] = byte(i)
		}
	}
	touch()
	start := time.Now()
	for off := 0; off < len(src); off += each {
		copy(dst[off:off+each], src[off:off+each])
	}
	chunked = time.Since(start)
	touch()
	start = time.Now()
	copy(dst, src)
	return chunked, time.Since(start)
}

// BenchmarkRelocationThroughput measures Device.Cleanup relocating 64 MiB
// held in allocations of 256 KiB or 1 MiB on 2 MiB pages into one current
// page. Setup per iteration (untimed): a fresh host device; the buffers are
// allocated while the page size is 2 MiB and written; one 80 MiB allocation
// grows the arena to 80 MiB pages, is written (so its page is touched, as a
// steady-state device page would be) and freed. Timed: the Cleanup — plan,
// waits, the copies, commit, and giving back the emptied pages.
//
// Floors, measured in every iteration under the same cache conditions
// (copyFloor): x-floor compares with copy() of the same bytes in the same
// chunks (one copy() per allocation: the least a relocation can do);
// x-copy compares with one copy() of all 64 MiB, which Go's memmove runs
// with non-temporal stores from 1 MiB up, so chunks below that cannot reach it.
func BenchmarkRelocationThroughput(b *testing.B) {
	for _, each := range []uint64{256 * kib, 1 * mib} {
		b.Run(fmt.Sprintf("%dKiB", each/kib), func(b *testing.B) { benchRelocation(b, each) })
	}
}

func benchRelocation(b *testing.B, each uint64) {
	const total = 64 * mib
	ctx := context.Background()
	big := make([]byte, 80*mib)
	src, dst := make([]byte, total), make([]byte, total)
	copy(dst, src) // touch both
	var elapsed, chunked, whole time.Duration
	b.SetBytes(int64(total))
	for b.Loop() {
		b.StopTimer()
		d, err := Open()
		if err != nil {
			b.Fatal(err)
		}
		s := d.DefaultStream()
		bufs := make([]Buffer, 0, total/each)
		for range total / each {
			buf := mustAlloc(b, s, each)
			mustWrite(b, buf, pattern(each, byte(len(bufs))))
			bufs = append(bufs, buf)
		}
		g := mustAlloc(b, s, uint64(len(big)))
		mustWrite(b, g, big)
		mustFree(b, g)
		if err := s.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		moved := d.Stats().Relocation.BytesMoved
		b.StartTimer()
		start := time.Now()
		if err := d.Cleanup(ctx); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		if got := d.Stats().Relocation.BytesMoved - moved; got != total {
			b.Fatalf("relocated %d bytes, want %d", got, total)
		}
		if outdatedPages(d) != 0 {
			b.Fatal("outdated pages left after Cleanup")
		}
		for _, buf := range bufs {
			mustFree(b, buf)
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
		c, w := copyFloor(src, dst, big, int(each))
		chunked += c
		whole += w
		b.StartTimer()
	}
	rate := func(d time.Duration) float64 { return float64(total) * float64(b.N) / d.Seconds() }
	b.ReportMetric(rate(elapsed)/1e9, "reloc-GB/s")
	b.ReportMetric(rate(chunked)/1e9, "floor-GB/s")
	b.ReportMetric(rate(whole)/1e9, "copy-GB/s")
	b.ReportMetric(rate(elapsed)/rate(chunked), "x-floor")
	b.ReportMetric(rate(elapsed)/rate(whole), "x-copy")
}

// allocFreeRate runs pairs Alloc+Free pairs of size bytes on each of
// streams, one goroutine per stream, all at once, and returns the pairs per
// second they made together.
func allocFreeRate(tb testing.TB, streams []*Stream, size uint64, pairs int) float64 {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, len(streams))
	start := time.Now()
	for i, s := range streams {
		wg.Go(func() {
			for range pairs {
				buf, err := s.Alloc(ctx, size)
				if err == nil {
					err = buf.Free()
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	return float64(pairs*len(streams)) / elapsed.Seconds()
}

// BenchmarkManyGoroutines runs the steady 4 KiB Alloc + Free pair from
// 1, 2 and 4 goroutines at once, each on its own stream of one device, and
// reports their combined throughput against one goroutine's, measured on
// the same device in the same run, just before and just after (x-one). Every pair takes the device
// lock, so x-one above 1 is what the cores gain around the lock, and below
// 1 what handing the lock between cores costs (docs/decisions/2026-11-30-one-device-lock.md).
// ns/op is wall time per pair, all goroutines together.
func BenchmarkManyGoroutines(b *testing.B) {
	const size = 4 * kib
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("%d", n), func(b *testing.B) {
			d := openHost(b)
			streams := []*Stream{d.DefaultStream()}
			for len(streams) < n {
				s, err := d.NewStream()
				if err != nil {
					b.Fatal(err)
				}
				streams = append(streams, s)
			}
			for _, s := range streams { // warm: every stream has its page
				mustFree(b, mustAlloc(b, s, size))
			}
			// The baseline is measured just before and just after, and
			// averaged, so a neighbour's load during the run weighs on both.
			before := allocFreeRate(b, streams[:1], size, 1<<19)
			pairs := max(b.N/n, 1)
			b.ResetTimer()
			rate := allocFreeRate(b, streams, size, pairs)
			b.StopTimer()
			one := (before + allocFreeRate(b, streams[:1], size, 1<<19)) / 2
			b.ReportMetric(rate/1e6, "Mpairs/s")
			b.ReportMetric(one/1e6, "one-Mpairs/s")
			b.ReportMetric(rate/one, "x-one")
		})
	}
}

// BenchmarkHistoryRecording measures the steady 4 KiB Alloc + Free pair
// with the history recording (history.go) against the same pair on a
// device that does not record, in alternating rounds of the same run so
// both see the same machine: x-off is the ratio (issue 16 asks ≤ 1.5
// without stacks). "stacks" records the caller's stack with every Alloc,
// reported apart.
func BenchmarkHistoryRecording(b *testing.B) {
	for _, stacks := range []bool{false, true} {
		name := "plain"
		if stacks {
			name = "stacks"
		}
		b.Run(name, func(b *testing.B) {
			const size = 4 * kib
			const round = 1 << 12
			ctx := context.Background()
			off := openHost(b)
			on := openHost(b)
			if err := on.StartHistory(HistoryOptions{Stacks: stacks}); err != nil {
				b.Fatal(err)
			}
			pairs := func(s *Stream, n int) time.Duration {
				start := time.Now()
				for range n {
					buf, err := s.Alloc(ctx, size)
					if err != nil {
						b.Fatal(err)
					}
					if err := buf.Free(); err != nil {
						b.Fatal(err)
					}
				}
				return time.Since(start)
			}
			so, sn := off.DefaultStream(), on.DefaultStream()
			pairs(so, round)
			pairs(sn, defaultHistoryEntries+round) // warm, and wrap the ring: the steady state overwrites
			var onT, offT time.Duration
			n := 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				onT += pairs(sn, round)
				offT += pairs(so, round)
				n += round
			}
			b.ReportMetric(float64(onT.Nanoseconds())/float64(n), "on-ns/pair")
			b.ReportMetric(float64(offT.Nanoseconds())/float64(n), "off-ns/pair")
			b.ReportMetric(float64(onT)/float64(offT), "x-off")
		})
	}
}
