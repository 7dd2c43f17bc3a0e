//go:build linux

package cuda

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// Benchmarks against the real driver when one is found; otherwise (unless
// GPUMEM_REQUIRE_CUDA=1, which makes that a failure) against the fake, so
// that `go test -bench . ./cuda/` exercises the same code anywhere. Figures
// from the fake measure host bookkeeping only. Each reports its floor,
// measured in the same run, and the ratio as x-floor.

// benchLibrary returns the driver to measure and whether it is the real one.
func benchLibrary(b *testing.B) (path string, real bool) {
	b.Helper()
	path = libraryPath(inheritedLibrary)
	err := available(path)
	if err == nil {
		return path, true
	}
	if os.Getenv(envRequireCUDA) == "1" {
		b.Fatalf("%s=1 but no usable CUDA driver: %v", envRequireCUDA, err)
	}
	b.Logf("no usable CUDA driver (%v): measuring the fake driver; figures are host overhead only", err)
	return buildFake(b).path, false
}

// fillOp enqueues fill_u8 over the whole buffer, in launches of at most
// 1 GiB (the kernels index bytes with 32 bits).
func fillOp(be *Backend, s *gpumem.Stream, buf gpumem.Buffer, v byte) error {
	return s.Enqueue("fill", []gpumem.Use{{Buffer: buf, Access: gpumem.Write}}, func(res []storage.Resource) error {
		const chunk = 1 << 30
		for off := uint64(0); off < res[0].Size; off += chunk {
			n := min(chunk, res[0].Size-off)
			if err := be.launch(s.Queue(), kernelFillU8, res[0].Ptr+uintptr(off), n, uint32(v)); err != nil {
				return err
			}
		}
		return nil
	})
}

// readWindow copies n bytes at off of buf to the host, in stream order.
func readWindow(be *Backend, s *gpumem.Stream, buf gpumem.Buffer, off, n uint64) ([]byte, error) {
	out := make([]byte, n)
	err := s.Enqueue("read window", []gpumem.Use{{Buffer: buf, Access: gpumem.Read, Offset: off, Size: n}}, func(res []storage.Resource) error {
		return be.CopyToHost(s.Queue(), out, res[0])
	})
	if err != nil {
		return nil, err
	}
	return out, s.Synchronize(context.Background())
}

func sizeName(n uint64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%dGiB", n>>30)
	}
	return fmt.Sprintf("%dMiB", n>>20)
}

// BenchmarkRelocationThroughput measures bytes relocated per second through
// Device.Cleanup: one live buffer of the size on an outdated page (a larger
// allocation grew the arena, then was freed) moves into the current page,
// and the outdated page goes back. One such Cleanup makes these driver
// calls, and no others: cuCtxSynchronize (every stream's work done first),
// one cuMemcpyDtoDAsync_v2 of the whole buffer, cuEventRecord and its
// cuEventSynchronize (the watcher's), cuMemFree_v2 of the outdated page.
//
// Two floors, measured in the same run on the same bytes: the copy alone
// (cuMemcpyDtoD_v2 followed by cuCtxSynchronize), and the copy plus a
// cuMemFree_v2 of an allocation of the same size (its cuMemAlloc_v2 not
// timed): what any relocation must at least spend, since it gives the page
// back. Metrics:
//
//   - B/s: relocation throughput (size ÷ Cleanup's time); floor-B/s: the
//     copy floor's; x-floor = B/s ÷ floor-B/s (against the copy alone;
//     target ≥ 0.8).
//   - x-copy-free-floor = (floor-copy-ns + floor-free-ns) ÷ cleanup-ns:
//     against the copy and the free together (1: nothing spent beyond the
//     two driver calls a relocation cannot avoid).
//   - x-floor-less-release = floor-copy-ns ÷ (cleanup-ns − release-ns):
//     the relocation without the free that ends it against the copy, as
//     the vulkan benchmark's x-floor is defined.
//   - Cleanup's phases, per op, as the backend's phaseClock saw them:
//     sync-ns (cuCtxSynchronize before anything moves), copy-ns (from the
//     copy's enqueue until the watcher saw its event complete), release-ns
//     (Flush's cuMemFree_v2), rest-ns (the remainder: the device's
//     bookkeeping, wake-ups); with the floors' own floor-copy-ns and
//     floor-free-ns, and copy-x-floor = floor-copy-ns ÷ copy-ns,
//     release-x-floor = floor-free-ns ÷ release-ns.
//
// Setup, and a check of the first and last 4 KiB moved, are not timed.
func BenchmarkRelocationThroughput(b *testing.B) {
	path, real := benchLibrary(b)
	sizes := []uint64{16 << 20, 64 << 20}
	if real {
		sizes = []uint64{1 << 30, 4 << 30, 16 << 30}
	}
	c, err := openContext(Options{Library: path}) // holds the primary context across devices; measures the floors
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, size := range sizes {
		b.Run(sizeName(size), func(b *testing.B) {
			if 4*size > c.TotalMem() {
				b.Skipf("%s needs about %d bytes; the device has %d", sizeName(size), 4*size, c.TotalMem())
			}
			benchRelocation(b, c, path, size)
		})
	}
}

func benchRelocation(b *testing.B, c *primaryContext, path string, size uint64) {
	ctx := context.Background()
	src, err := c.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Free(src)
	dst, err := c.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Free(dst)
	floorCopy := func() time.Duration {
		t0 := time.Now()
		if err := c.CopyDtoD(dst, src, size); err != nil {
			b.Fatal(err)
		}
		if err := c.Synchronize(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	// floorFree frees an allocation of size; only the cuMemFree_v2 is timed.
	floorFree := func() time.Duration {
		p, err := c.Alloc(size)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Synchronize(); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := c.Free(p); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	floorCopy() // warm
	floorFree()

	var reloc, fCopy, fFree time.Duration
	var ph phases
	var moved uint64
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		// Whole pages: on granular pages the arena's first growth takes
		// the largest page (pool PL31), so no later one outdates keep's.
		d, err := OpenDevice(Options{Library: path}, gpumem.WithPageGranular(false))
		if err != nil {
			b.Fatal(err)
		}
		be := d.Backend().(*Backend)
		s := d.DefaultStream()
		keep, err := s.Alloc(ctx, size) // page of size rounded up to 2 MiB
		if err != nil {
			b.Fatal(err)
		}
		v := byte(i*7 + 1)
		if err := fillOp(be, s, keep, v); err != nil {
			b.Fatal(err)
		}
		grow, err := s.Alloc(ctx, size+2<<20) // grows the arena: keep's page is outdated
		if err != nil {
			b.Fatal(err)
		}
		if err := grow.Free(); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		before := d.Stats().Relocation.BytesMoved
		p0 := be.clock.snapshot()

		b.StartTimer()
		t0 := time.Now()
		err = d.Cleanup(ctx)
		el := time.Since(t0)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		p := be.clock.snapshot().sub(p0)
		if got := d.Stats().Relocation.BytesMoved - before; got != size {
			b.Fatalf("Cleanup moved %d bytes, want %d", got, size)
		}
		reloc += el
		ph.sync += p.sync
		ph.copy += p.copy
		ph.release += p.release
		moved += size
		want := bytes.Repeat([]byte{v}, 4096)
		for _, off := range []uint64{0, size - 4096} {
			got, err := readWindow(be, s, keep, off, 4096)
			if err != nil {
				b.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				b.Fatalf("bytes at %d after relocation differ from the fill %#x", off, v)
			}
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
		fCopy += floorCopy()
		fFree += floorFree()
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	perOp := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n }
	relocBps := float64(moved) / reloc.Seconds()
	floorBps := float64(moved) / fCopy.Seconds()
	rest := reloc - ph.sync - ph.copy - ph.release
	b.ReportMetric(relocBps, "B/s")
	b.ReportMetric(floorBps, "floor-B/s")
	b.ReportMetric(relocBps/floorBps, "x-floor")
	b.ReportMetric((fCopy+fFree).Seconds()/reloc.Seconds(), "x-copy-free-floor")
	if moving := reloc - ph.release; moving > 0 {
		b.ReportMetric(fCopy.Seconds()/moving.Seconds(), "x-floor-less-release")
	}
	b.ReportMetric(perOp(reloc), "cleanup-ns/op")
	b.ReportMetric(perOp(ph.sync), "sync-ns/op")
	b.ReportMetric(perOp(ph.copy), "copy-ns/op")
	b.ReportMetric(perOp(ph.release), "release-ns/op")
	b.ReportMetric(perOp(rest), "rest-ns/op")
	b.ReportMetric(perOp(fCopy), "floor-copy-ns/op")
	b.ReportMetric(perOp(fFree), "floor-free-ns/op")
	if ph.copy > 0 {
		b.ReportMetric(fCopy.Seconds()/ph.copy.Seconds(), "copy-x-floor")
	}
	if ph.release > 0 {
		b.ReportMetric(fFree.Seconds()/ph.release.Seconds(), "release-x-floor")
	}
	b.Logf("%s per Cleanup: %v = sync %v + copy %v + release %v + rest %v; floors: copy %v, free %v",
		sizeName(size), reloc/time.Duration(b.N), ph.sync/time.Duration(b.N), ph.copy/time.Duration(b.N),
		ph.release/time.Duration(b.N), rest/time.Duration(b.N), fCopy/time.Duration(b.N), fFree/time.Duration(b.N))
}

// BenchmarkAllocFree measures a steady Stream.Alloc + Buffer.Free (the page
// stays cached, so no driver call) against a raw cuMemAlloc_v2 +
// cuMemFree_v2 of the same size in the same run. Metrics: raw-ns/op (the
// floor) and x-floor = gpumem ns/op ÷ raw ns/op (below 1: cheaper than the
// driver).
func BenchmarkAllocFree(b *testing.B) {
	path, _ := benchLibrary(b)
	for _, size := range []uint64{4 << 10, 1 << 20, 64 << 20} {
		name := fmt.Sprintf("%dKiB", size>>10)
		b.Run(name, func(b *testing.B) {
			d, err := OpenDevice(Options{Library: path})
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			c := d.Backend().(*Backend).devContext()
			const rawN = 200
			rawOnce := func() {
				p, err := c.Alloc(size)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.Free(p); err != nil {
					b.Fatal(err)
				}
			}
			rawOnce() // warm
			t0 := time.Now()
			for range rawN {
				rawOnce()
			}
			raw := time.Since(t0) / rawN

			ctx := context.Background()
			s := d.DefaultStream()
			warm, err := s.Alloc(ctx, size)
			if err != nil {
				b.Fatal(err)
			}
			if err := warm.Free(); err != nil {
				b.Fatal(err)
			}
			allocs := d.Stats().StorageAllocs
			for b.Loop() {
				buf, err := s.Alloc(ctx, size)
				if err != nil {
					b.Fatal(err)
				}
				if err := buf.Free(); err != nil {
					b.Fatal(err)
				}
			}
			if got := d.Stats().StorageAllocs; got != allocs {
				b.Fatalf("steady Alloc + Free made %d driver allocations, want none", got-allocs)
			}
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(raw.Nanoseconds()), "raw-ns/op")
			b.ReportMetric(float64(per)/float64(raw), "x-floor")
		})
	}
}

// BenchmarkGraphReplayAfterRelocation runs TestGraphReplayAfterRelocation's
// scenario as a benchmark, so the GPU check times it on the device.
func BenchmarkGraphReplayAfterRelocation(b *testing.B) {
	path, _ := benchLibrary(b)
	for i := 0; i < b.N; i++ {
		d, err := OpenDevice(Options{Library: path})
		if err != nil {
			b.Fatal(err)
		}
		graphReplayAfterRelocation(b, d, d.Backend().(*Backend))
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// graphSteps is the number of ops in BenchmarkGraphLaunch's step: enough
// that per-op launch costs, which a graph saves, dominate.
const graphSteps = 16

// BenchmarkGraphLaunch measures one launch of a captured step of
// graphSteps user-kernel ops (saxpy over 1 MiB, launched through Op.Launch)
// against the same ops enqueued directly, each followed by
// Stream.Synchronize, in the same run. Metrics: direct-ns/op (the floor)
// and x-floor = graph ns/op ÷ direct ns/op (below 1: the graph is cheaper).
// The result is checked after both.
func BenchmarkGraphLaunch(b *testing.B) {
	path, _ := benchLibrary(b)
	d, err := OpenDevice(Options{Library: path})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	be := d.Backend().(*Backend)
	saxpy, _ := loadUser(b, be)
	ctx := context.Background()
	s := d.DefaultStream()
	const n = 256 << 10
	x, y := saxpyInputs(n)
	xb, yb := mustAlloc(b, s, 4*n), mustAlloc(b, s, 4*n)
	mustWrite(b, xb, floats(x))
	mustWrite(b, yb, floats(y))
	stepOps := func(s *gpumem.Stream) error {
		for range graphSteps {
			if err := enqueueSaxpy(b, s, saxpy, 0, xb, yb); err != nil { // a = 0: y stays y
				return err
			}
		}
		return nil
	}
	const directN = 50
	if err := stepOps(s); err != nil { // warm
		b.Fatal(err)
	}
	t0 := time.Now()
	for range directN {
		if err := stepOps(s); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
	}
	direct := time.Since(t0) / directN

	g, err := s.Capture(ctx, func(_ context.Context, s *gpumem.Stream) error { return stepOps(s) })
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	for b.Loop() {
		if err := g.Launch(ctx); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if got := unfloats(mustRead(b, yb)); !reflect.DeepEqual(got, y) {
		b.Fatal("y changed under saxpy with a = 0")
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(direct.Nanoseconds()), "direct-ns/op")
	b.ReportMetric(float64(per)/float64(direct), "x-floor")
}

// BenchmarkTransfers measures Buffer.Write (waited for with Synchronize)
// and Buffer.Read against raw cuMemcpyHtoDAsync_v2 and cuMemcpyDtoHAsync_v2
// of the same bytes, from and to pageable Go memory as gpumem's are,
// between the same host slices and a cuMemAlloc_v2 allocation, on a
// stream of the same context followed by cuStreamSynchronize, interleaved
// in one run. Read returns a new slice each time, as the API does; the
// floor reads into one warmed slice. 1 GiB runs on the real driver only.
// Metrics: write-B/s, read-B/s, raw-write-B/s, raw-read-B/s, and
// write-x-floor, read-x-floor = gpumem throughput ÷ the raw one's (1: as
// fast as the driver's copy). Every copy is checked at both ends.
//
// The backend's part of each is one driver copy from or to the Go slice
// (CopyToDevice, CopyToHost: no staging, no chunks), plus the op's event;
// package gpumem's Write first copies the caller's bytes into a new slice,
// and Read allocates the slice it returns. Two more floors measure what
// those cost on their own: raw-write-copy-B/s (a copy into a new slice,
// then the raw write of it) and raw-read-fresh-B/s (the raw read into a
// new slice each time, the driver faulting its pages in), with
// write-x-copy-floor and read-x-fresh-floor = gpumem's throughput ÷ theirs
// (1: gpumem adds nothing to what its API's copies cost; above 1 for Read
// where CopyToHost's prefault beats the driver's own page faulting).
func BenchmarkTransfers(b *testing.B) {
	path, real := benchLibrary(b)
	sizes := []uint64{1 << 20, 64 << 20}
	if real {
		sizes = append(sizes, 1<<30)
	}
	for _, size := range sizes {
		b.Run(sizeName(size), func(b *testing.B) { benchTransfers(b, path, size) })
	}
}

// benchTransfers holds a raw allocation and a buffer of size (its page
// perhaps larger): it skips on a device of less than four times that.

func benchTransfers(b *testing.B, path string, size uint64) {
	ctx := context.Background()
	d, err := OpenDevice(Options{Library: path})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	c := d.Backend().(*Backend).devContext()
	if 4*size > c.TotalMem() {
		b.Skipf("%s needs about %d bytes; the device has %d", sizeName(size), 4*size, c.TotalMem())
	}
	raw, err := c.Alloc(size)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Free(raw)
	rs, err := c.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	s := d.DefaultStream()
	buf, err := s.Alloc(ctx, size)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	src := bytes.Repeat([]byte{0x5a}, int(size))
	src[0], src[size-1] = 0x11, 0x22
	dst := make([]byte, size)
	ends := func(got []byte, what string) {
		if got[0] != 0x11 || got[size-1] != 0x22 || got[size/2] != 0x5a {
			b.Fatalf("%s: other bytes than written", what)
		}
	}
	write := func() time.Duration {
		t0 := time.Now()
		if err := buf.Write(ctx, src); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	read := func() time.Duration {
		t0 := time.Now()
		got, err := buf.Read(ctx)
		el := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		ends(got, "Read")
		return el
	}
	rawWrite := func() time.Duration {
		t0 := time.Now()
		if err := rs.CopyHtoD(raw, src); err != nil {
			b.Fatal(err)
		}
		if err := rs.Synchronize(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	rawRead := func() time.Duration {
		t0 := time.Now()
		if err := rs.CopyDtoH(dst, raw); err != nil {
			b.Fatal(err)
		}
		if err := rs.Synchronize(); err != nil {
			b.Fatal(err)
		}
		el := time.Since(t0)
		ends(dst, "the raw read")
		return el
	}
	// rawWriteCopy copies src into a new slice, as Buffer.Write does, and
	// writes that.
	rawWriteCopy := func() time.Duration {
		t0 := time.Now()
		c := append([]byte(nil), src...)
		if err := rs.CopyHtoD(raw, c); err != nil {
			b.Fatal(err)
		}
		if err := rs.Synchronize(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	// rawReadFresh reads into a new slice, as Buffer.Read returns one.
	rawReadFresh := func() time.Duration {
		t0 := time.Now()
		out := make([]byte, size)
		if err := rs.CopyDtoH(out, raw); err != nil {
			b.Fatal(err)
		}
		if err := rs.Synchronize(); err != nil {
			b.Fatal(err)
		}
		el := time.Since(t0)
		ends(out, "the raw read into a new slice")
		return el
	}
	write() // warm
	read()
	rawWrite()
	rawRead()
	rawWriteCopy()
	rawReadFresh()
	rounds := max(1, int((64<<20)/size))
	var w, r, rw, rr, rwc, rrf time.Duration
	for b.Loop() {
		for k := range rounds {
			// Alternate which runs first, so a slow moment of the machine
			// costs both alike.
			if k%2 == 0 {
				w += write()
				r += read()
				rw += rawWrite()
				rr += rawRead()
				rwc += rawWriteCopy()
				rrf += rawReadFresh()
			} else {
				rwc += rawWriteCopy()
				rrf += rawReadFresh()
				rw += rawWrite()
				rr += rawRead()
				w += write()
				r += read()
			}
		}
	}
	n := float64(b.N*rounds) * float64(size)
	bps := func(el time.Duration) float64 { return n / el.Seconds() }
	b.ReportMetric(bps(w), "write-B/s")
	b.ReportMetric(bps(r), "read-B/s")
	b.ReportMetric(bps(rw), "raw-write-B/s")
	b.ReportMetric(bps(rr), "raw-read-B/s")
	b.ReportMetric(rw.Seconds()/w.Seconds(), "write-x-floor")
	b.ReportMetric(rr.Seconds()/r.Seconds(), "read-x-floor")
	b.ReportMetric(bps(rwc), "raw-write-copy-B/s")
	b.ReportMetric(bps(rrf), "raw-read-fresh-B/s")
	b.ReportMetric(rwc.Seconds()/w.Seconds(), "write-x-copy-floor")
	b.ReportMetric(rrf.Seconds()/r.Seconds(), "read-x-fresh-floor")
}
