package vulkan

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// Benchmarks on the machine's Vulkan device (lavapipe on CPU-only
// machines, where "device" copies are CPU memcpy). Each reports its floor,
// measured in the same run, and the ratio as x-floor. Without a device they
// skip (fail under CI=true).
//
//	go test -run '^$' -bench . -benchtime 10x -count 3 ./vulkan/

func benchBackend(b *testing.B) *Backend {
	b.Helper()
	be, err := NewBackend(Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatal(err)
		}
		b.Skipf("no Vulkan device: %v", err)
	}
	if discreteAsked() {
		simulateDiscrete(be)
	}
	return be
}

func sizeName(n uint64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%dGiB", n>>30)
	}
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// fill writes v over the whole buffer.
func fill(b *testing.B, buf gpumem.Buffer, v byte) {
	b.Helper()
	if err := buf.Write(context.Background(), bytes.Repeat([]byte{v}, int(buf.Size()))); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRelocationThroughput measures bytes relocated per second through
// Device.Cleanup: live buffers (one of the size, or chunks of it) on an
// outdated page (a larger allocation grew the arena, then was freed) move
// into the current page. The relocation's time is the Cleanup's less the
// Backend.Release that ends it (vkFreeMemory of the emptied page, not a
// copy; release-ns). Every iteration runs on one VkDevice.
//
// The floor is a raw vkCmdCopyBuffer of the same chunks, in one command
// buffer (one call, every region), submitted and waited for, between two
// fresh allocations the host wrote once, as the relocation's source and
// target were (Write fills the buffers and the page that grew): the first
// copy of memory in that state costs lavapipe about 1.3-1.8× what a copy
// between the same buffers again does (measured 3.0-4.4 ms against 2.2-2.6
// ms for 16 MiB), and a relocation copies its bytes once. x-hot-floor is
// the ratio to that repeated copy (two warmed allocations, copied right
// before and right after the relocation), the best any one-off copy could
// do. Each iteration measures both floors around its relocation, so all
// see the same moment of a shared machine, and each figure is the median
// of the relocations' ratios (relocSamples per iteration), which one slow
// moment does not move.
// Metrics: B/s and floor-B/s (medians), x-floor = relocation ÷ fresh-floor
// throughput (target ≥ 0.8), x-hot-floor, x-floor-min, x-floor-max.
//
// 256 MiB and 1 GiB run on GPUs only (a copy of 64 MiB is over in tens of
// microseconds there, too short to measure the copy and not the
// submission), where the pages allow them: the buffer that grows the
// arena (twice the size, plus 2 MiB) must fit in one page.
func BenchmarkRelocationThroughput(b *testing.B) {
	for _, c := range []struct {
		size    uint64
		chunks  int
		gpuOnly bool
	}{{16 << 20, 1, false}, {64 << 20, 1, false}, {16 << 20, 128, false}, {256 << 20, 1, true}, {1 << 30, 1, true}} {
		name := sizeName(c.size)
		if c.chunks > 1 {
			name += fmt.Sprintf("-in-%d", c.chunks)
		}
		b.Run(name, func(b *testing.B) { benchRelocation(b, c.size, c.chunks, c.gpuOnly) })
	}
}

// benchDeviceBackend is the backend one iteration's device runs on: its
// Release timed (the end of a Cleanup that is not the relocation), its
// Close left to the benchmark, so every iteration runs on one VkDevice
// (opening and destroying one per iteration, and the memory that goes with
// it, disturbed the measurements around it).
type benchDeviceBackend struct {
	*Backend
	spent time.Duration
}

func (t *benchDeviceBackend) Release() {
	t0 := time.Now()
	t.Backend.Release()
	t.spent += time.Since(t0)
}

func (t *benchDeviceBackend) Close() error { return nil }

func benchRelocation(b *testing.B, size uint64, chunks int, gpuOnly bool) {
	ctx := context.Background()
	fl := benchBackend(b)
	defer fl.Close()
	if gpuOnly {
		if fl.Info().Type == "CPU" {
			b.Skipf("%s relocations are measured on GPUs only (%s is a CPU device)", sizeName(size), fl.Info().Name)
		}
		if p := fl.Properties(); p.MaxPageSize < 2*size+2<<20 || p.MaxMemory < 8*size {
			b.Skipf("%s needs pages of %d bytes and about %d bytes of memory; the device has pages of %d and %d bytes",
				sizeName(size), 2*size+2<<20, 8*size, p.MaxPageSize, p.MaxMemory)
		}
	}
	fq, err := fl.NewQueue(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	src, err := fl.allocate(size, pageMemory)
	if err != nil {
		b.Fatal(err)
	}
	dst, err := fl.allocate(size, pageMemory)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		fq.Close()
		fl.free(src)
		fl.free(dst)
	}()
	chunk := size / uint64(chunks)
	regions := make([]vk.BufferCopy, chunks)
	for i := range regions {
		o := uint64(i) * chunk
		regions[i] = vk.BufferCopy{SrcOffset: o, DstOffset: o, Size: chunk}
	}
	q := fq.(*queue)
	// rawCopy copies the chunks from s to d with one vkCmdCopyBuffer,
	// submitted and waited for.
	rawCopy := func(s, d *allocation) time.Duration { return rawBufferCopy(b, q, s, d, regions) }
	floorCopy := func() time.Duration { return rawCopy(src, dst) }
	floorCopy() // warm: both allocations touched
	floorCopy()
	// freshPair returns two fresh allocations the host wrote once, and
	// freshCopy copies between them once, then frees them. The hot floor's
	// copy runs between the two, so the host's writes are out of the
	// caches by then, as Write's into the relocation's source are by the
	// time it runs (the page that grew was written after them).
	freshPair := func(v byte) (*allocation, *allocation) {
		s2, err := fl.allocate(size, pageMemory)
		if err != nil {
			b.Fatal(err)
		}
		d2, err := fl.allocate(size, pageMemory)
		if err != nil {
			b.Fatal(err)
		}
		if s2.mapped != nil {
			copy(s2.bytes(), bytes.Repeat([]byte{v}, int(size)))
			clear(d2.bytes())
		}
		return s2, d2
	}
	freshCopy := func(s2, d2 *allocation, v byte) time.Duration {
		defer fl.free(s2)
		defer fl.free(d2)
		el := rawCopy(s2, d2)
		if d2.mapped != nil && (d2.bytes()[0] != v || d2.bytes()[size-1] != v) {
			b.Fatal("the floor's copy did not copy")
		}
		return el
	}

	var ratios, hot, relocs, floors []float64
	var released time.Duration
	b.ResetTimer()
	for i := 0; i < b.N*relocSamples; i++ {
		b.StopTimer()
		be := &benchDeviceBackend{Backend: fl}
		d, err := gpumem.OpenBackend(be)
		if err != nil {
			b.Fatal(err)
		}
		s := d.DefaultStream()
		v := byte(i*7 + 1)
		keep := make([]gpumem.Buffer, chunks)
		for k := range keep {
			if keep[k], err = s.Alloc(ctx, chunk); err != nil {
				b.Fatal(err)
			}
			fill(b, keep[k], v)
		}
		grow, err := s.Alloc(ctx, 2*size+2<<20) // grows the arena: keep's page is outdated
		if err != nil {
			b.Fatal(err)
		}
		// Used before it is freed, as a page in steady use is: the first
		// write into fresh memory costs a page fault per 4 KiB on lavapipe
		// (host memory), which no GPU pays and the floor does not either.
		fill(b, grow, 0)
		if err := grow.Free(); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		before := d.Stats().Relocation.BytesMoved
		s2, d2 := freshPair(v)
		fBefore := floorCopy()
		fresh := freshCopy(s2, d2, v)

		b.StartTimer()
		t0 := time.Now()
		err = d.Cleanup(ctx)
		el := time.Since(t0)
		b.StopTimer()
		fAfter := floorCopy()
		if err != nil {
			b.Fatal(err)
		}
		if got := d.Stats().Relocation.BytesMoved - before; got != size {
			b.Fatalf("Cleanup moved %d bytes, want %d", got, size)
		}
		reloc := el - be.spent
		released += be.spent
		relocs = append(relocs, float64(size)/reloc.Seconds())
		floors = append(floors, float64(size)/fresh.Seconds())
		ratios = append(ratios, fresh.Seconds()/reloc.Seconds())
		hot = append(hot, ((fBefore+fAfter)/2).Seconds()/reloc.Seconds())
		for _, k := range keep {
			got, err := k.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if !bytes.Equal(got, bytes.Repeat([]byte{v}, int(chunk))) {
				b.Fatalf("bytes after relocation differ from the fill %#x", v)
			}
			if err := k.Free(); err != nil {
				b.Fatal(err)
			}
		}
		// Everything back before the next iteration, the staging buffers
		// Write and Read went through on a discrete GPU included (Cleanup
		// empties the pool): the device's Close leaves the backend open.
		if err := d.Cleanup(ctx); err != nil {
			b.Fatal(err)
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
		if n := fl.allocations(); n != 2 {
			b.Fatalf("%d device allocations after the iteration, want 2 (the floor's)", n)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(median(relocs), "B/s")
	b.ReportMetric(median(floors), "floor-B/s")
	b.ReportMetric(median(ratios), "x-floor")
	b.ReportMetric(slices.Min(ratios), "x-floor-min")
	b.ReportMetric(slices.Max(ratios), "x-floor-max")
	b.ReportMetric(median(hot), "x-hot-floor")
	b.ReportMetric(float64(released.Nanoseconds())/float64(b.N*relocSamples), "release-ns")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*relocSamples), "ns/op")
}

// rawBufferCopy copies regions from s to d with one vkCmdCopyBuffer on q
// (a loose batch, as relocation copies are), submitted and waited for, and
// returns the time it took.
func rawBufferCopy(b *testing.B, q *queue, s, d *allocation, regions []vk.BufferCopy) time.Duration {
	t0 := time.Now()
	q.mu.Lock()
	q.loose = &batch{}
	cb, err := q.commandsLocked(q.loose)
	if err != nil {
		q.mu.Unlock()
		b.Fatal(err)
	}
	vk.Call(q.b.dev.fn.CmdCopyBuffer, cb, uintptr(s.buf), uintptr(d.buf), uintptr(len(regions)), uintptr(unsafe.Pointer(&regions[0])))
	q.mu.Unlock()
	f, err := q.Fence()
	if err != nil {
		b.Fatal(err)
	}
	if err := q.Wait(context.Background(), f); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// relocSamples is how many relocations each iteration of
// BenchmarkRelocationThroughput measures: the medians want more samples
// than -benchtime 10x gives.
const relocSamples = 5

// median returns the median of v (which it sorts).
func median(v []float64) float64 {
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else {
		return (v[n/2-1] + v[n/2]) / 2
	}
}

// BenchmarkAllocFree measures a steady Stream.Alloc + Buffer.Free (the page
// stays cached: no Vulkan call) against a raw vkAllocateMemory +
// vkFreeMemory of the same size and memory type in the same run. Metrics:
// raw-ns/op (the floor), x-floor = gpumem ns/op ÷ raw ns/op (target ≤ 0.1:
// ten times faster).
func BenchmarkAllocFree(b *testing.B) {
	for _, size := range []uint64{4 << 10, 1 << 20, 64 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			be := benchBackend(b)
			d, err := gpumem.OpenBackend(be)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			typ := uint32(pageMemory.candidates(be.dev.info.MemoryTypes, ^uint32(0))[0])
			dv := be.dev
			const rawN = 200
			rawOnce := func() {
				mai := &vk.MemoryAllocateInfo{SType: vk.StMemoryAllocateInfo, AllocationSize: size, MemoryTypeIndex: typ}
				var mem uint64
				if err := check("vkAllocateMemory", vk.Call(dv.fn.AllocateMemory, dv.h, uintptr(unsafe.Pointer(mai)), 0, uintptr(unsafe.Pointer(&mem)))); err != nil {
					b.Fatal(err)
				}
				vk.Call(dv.fn.FreeMemory, dv.h, uintptr(mem), 0)
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
				b.Fatalf("steady Alloc + Free made %d device allocations, want none", got-allocs)
			}
			per := b.Elapsed() / time.Duration(b.N)
			b.ReportMetric(float64(raw.Nanoseconds()), "raw-ns/op")
			b.ReportMetric(float64(per)/float64(raw), "x-floor")
		})
	}
}

// graphSteps is the number of ops in BenchmarkGraphLaunch's step.
const graphSteps = 16

// BenchmarkGraphLaunch measures one launch of a captured step of
// graphSteps add_u32 dispatch ops over 1 MiB (a recorded command buffer
// submitted again) against the same ops recorded and submitted each time,
// each followed by Stream.Synchronize, in the same run. Metrics:
// direct-ns/op (the floor), x-floor = launch ns/op ÷ direct ns/op (below
// 1: the recorded command buffer is cheaper). The result is checked.
func BenchmarkGraphLaunch(b *testing.B) {
	be := benchBackend(b)
	d, err := gpumem.OpenBackend(be)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	add, err := be.LoadShipped(KernelAddU32)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	s := d.DefaultStream()
	const n = 256 << 10
	buf, err := s.Alloc(ctx, 4*n)
	if err != nil {
		b.Fatal(err)
	}
	fill(b, buf, 0)
	stepOps := func(s *gpumem.Stream) error {
		for range graphSteps {
			err := Enqueue(s, "add", []gpumem.Use{{Buffer: buf, Access: gpumem.ReadWrite}}, func(op *Op) error {
				return op.Dispatch(add, GroupsFor(n, 64), []Binding{Use(0)}, Push(uint32(n), uint32(1)))
			})
			if err != nil {
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
	launches := 0
	for b.Loop() {
		if err := g.Launch(ctx); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		launches++
	}
	b.StopTimer()
	if err := g.Close(); err != nil {
		b.Fatal(err)
	}
	got, err := buf.Read(ctx)
	if err != nil {
		b.Fatal(err)
	}
	want := uint32(graphSteps * (1 + directN + 1 + launches)) // warm, direct, capture warmup, launches
	if v := uint32(got[0]) | uint32(got[1])<<8 | uint32(got[2])<<16 | uint32(got[3])<<24; v != want {
		b.Fatalf("v[0] = %d after the launches, want %d", v, want)
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(direct.Nanoseconds()), "direct-ns/op")
	b.ReportMetric(float64(per)/float64(direct), "x-floor")
}

// BenchmarkStagingTransfers measures Buffer.Write (waited for with
// Synchronize) and Buffer.Read through staging buffers (Options.Staging,
// the path of discrete GPUs), pooled (staging.go) and allocated per
// transfer as before the pool, interleaved in one run against a memcpy
// floor: Go's copy of the same bytes between two warmed host buffers. A
// staging transfer copies twice (host to staging buffer, staging buffer to
// page: on lavapipe a second memcpy), so 0.5 of the floor is the most it
// could reach. Metrics: floor-B/s, and per path and direction x-floor =
// its throughput ÷ the floor's (write-pooled, read-pooled,
// write-unpooled, read-unpooled).
func BenchmarkStagingTransfers(b *testing.B) {
	for _, size := range []uint64{64 << 10, 1 << 20, 16 << 20} {
		b.Run(sizeName(size), func(b *testing.B) { benchStaging(b, size) })
	}
}

func benchStaging(b *testing.B, size uint64) {
	ctx := context.Background()
	open := func(pooled bool) (*gpumem.Device, gpumem.Buffer) {
		be, err := NewBackend(Options{Staging: true})
		if err != nil {
			if os.Getenv("CI") == "true" {
				b.Fatal(err)
			}
			b.Skipf("no Vulkan device: %v", err)
		}
		be.stage.off = !pooled
		d, err := gpumem.OpenBackend(be)
		if err != nil {
			b.Fatal(err)
		}
		buf, err := d.DefaultStream().Alloc(ctx, size)
		if err != nil {
			b.Fatal(err)
		}
		return d, buf
	}
	dp, bp := open(true)
	defer dp.Close()
	du, bu := open(false)
	defer du.Close()
	src := bytes.Repeat([]byte{0xa5}, int(size))
	dst := make([]byte, size)
	copy(dst, src) // warm: the floor pays no page faults
	write := func(buf gpumem.Buffer) time.Duration {
		t0 := time.Now()
		if err := buf.Write(ctx, src); err != nil {
			b.Fatal(err)
		}
		if err := buf.Stream().Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	read := func(buf gpumem.Buffer) time.Duration {
		t0 := time.Now()
		got, err := buf.Read(ctx)
		el := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if got[0] != 0xa5 || got[len(got)-1] != 0xa5 {
			b.Fatal("read back other bytes than written")
		}
		return el
	}
	write(bp) // warm both: the pages' first touch
	read(bp)
	write(bu)
	read(bu)
	// Each iteration runs every measurement once, so a machine's slow
	// moment costs each of them alike.
	rounds := max(2, int((64<<20)/size))
	var floor, wp, rp, wu, ru time.Duration
	for b.Loop() {
		for r := range rounds {
			t0 := time.Now()
			copy(dst, src)
			floor += time.Since(t0)
			// Whichever runs first after the floor's copy runs slower (by
			// about a tenth at 64 KiB): the order alternates.
			if r%2 == 0 {
				wp += write(bp)
				rp += read(bp)
				wu += write(bu)
				ru += read(bu)
			} else {
				wu += write(bu)
				ru += read(bu)
				wp += write(bp)
				rp += read(bp)
			}
		}
	}
	n := float64(b.N * rounds)
	floorBps := n * float64(size) / floor.Seconds()
	b.ReportMetric(floorBps, "floor-B/s")
	for _, m := range []struct {
		name string
		el   time.Duration
	}{{"write-pooled", wp}, {"read-pooled", rp}, {"write-unpooled", wu}, {"read-unpooled", ru}} {
		b.ReportMetric(n*float64(size)/m.el.Seconds()/floorBps, m.name+"-x-floor")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkTransfers measures Buffer.Write (waited for with Synchronize)
// and Buffer.Read on the backend's own path against the raw transfer of
// the same bytes through the same kinds of memory, interleaved in one run:
// where pages are host-visible (lavapipe, integrated GPUs) Write and Read
// copy through the page's mapping, and the floor is Go's copy into and out
// of a mapped page-memory allocation; where they are not (discrete GPUs)
// Write and Read go through staging buffers, and the floor is a copy into
// a mapped host-visible allocation and one vkCmdCopyBuffer to a
// page-memory allocation, submitted and waited for (the reverse for a
// read). Read returns a new slice each time, as the API does; the floor
// reads into one warmed slice. 256 MiB runs on GPUs only. Metrics:
// write-B/s, read-B/s, raw-write-B/s, raw-read-B/s, and write-x-floor,
// read-x-floor = gpumem throughput ÷ the raw one's (1: as fast as the raw
// transfer). Every copy is checked at both ends.
func BenchmarkTransfers(b *testing.B) {
	for _, c := range []struct {
		size    uint64
		gpuOnly bool
	}{{1 << 20, false}, {64 << 20, false}, {256 << 20, true}} {
		b.Run(sizeName(c.size), func(b *testing.B) { benchTransfers(b, c.size, c.gpuOnly) })
	}
}

func benchTransfers(b *testing.B, size uint64, gpuOnly bool) {
	ctx := context.Background()
	be := benchBackend(b)
	if gpuOnly && be.Info().Type == "CPU" {
		be.Close()
		b.Skipf("%s transfers are measured on GPUs only (%s is a CPU device)", sizeName(size), be.Info().Name)
	}
	if m := be.Properties().MaxMemory; 4*size > m {
		be.Close()
		b.Skipf("%s needs about %d bytes; the device has %d", sizeName(size), 4*size, m)
	}
	d, err := gpumem.OpenBackend(be)
	if err != nil {
		be.Close()
		b.Fatal(err)
	}
	defer d.Close()
	buf, err := d.DefaultStream().Alloc(ctx, size)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	page, err := be.allocate(size, pageMemory)
	if err != nil {
		b.Fatal(err)
	}
	defer be.free(page)
	var staging *allocation
	var q *queue
	if page.mapped == nil {
		if staging, err = be.allocate(size, stagingMemory); err != nil {
			b.Fatal(err)
		}
		defer be.free(staging)
		fq, err := be.NewQueue(1 << 20)
		if err != nil {
			b.Fatal(err)
		}
		defer fq.Close()
		q = fq.(*queue)
	}
	region := []vk.BufferCopy{{Size: size}}
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
		if err := buf.Stream().Synchronize(ctx); err != nil {
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
		if staging == nil {
			copy(page.bytes(), src)
			return time.Since(t0)
		}
		copy(staging.bytes(), src)
		rawBufferCopy(b, q, staging, page, region)
		return time.Since(t0)
	}
	rawRead := func() time.Duration {
		t0 := time.Now()
		if staging == nil {
			copy(dst, page.bytes())
		} else {
			rawBufferCopy(b, q, page, staging, region)
			copy(dst, staging.bytes())
		}
		el := time.Since(t0)
		ends(dst, "the raw read")
		return el
	}
	write() // warm: first touches, staging buffers pooled
	read()
	rawWrite()
	rawRead()
	rounds := max(1, int((64<<20)/size))
	var w, r, rw, rr time.Duration
	for b.Loop() {
		for k := range rounds {
			// Alternate which runs first, so a slow moment of the machine
			// costs both alike.
			if k%2 == 0 {
				w += write()
				r += read()
				rw += rawWrite()
				rr += rawRead()
			} else {
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
}
