package vulkan

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// Benchmarks on the machine's Vulkan device (lavapipe on CPU-only
// machines, where "device" copies are CPU memcpy). Each reports its floor,
// measured in the same run, and the ratio as x-floor. Without a device they
// skip (fail under CI=true).
//
//	go test -run '^$' -bench . -benchtime 20x ./vulkan/

func benchBackend(b *testing.B) *Backend {
	b.Helper()
	be, err := NewBackend(Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatal(err)
		}
		b.Skipf("no Vulkan device: %v", err)
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
func fill(b *testing.B, buf *gpumem.Buffer, v byte) {
	b.Helper()
	if err := buf.Write(context.Background(), bytes.Repeat([]byte{v}, int(buf.Size()))); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRelocationThroughput measures bytes relocated per second through
// Device.Cleanup: one live buffer of the size on an outdated page (a larger
// allocation grew the arena, then was freed) moves into the current page.
// The floor is one vkCmdCopyBuffer of the same bytes between two
// allocations, submitted and waited for, in the same run. Metrics: B/s,
// floor-B/s, x-floor = relocation ÷ copy throughput (target ≥ 0.8).
func BenchmarkRelocationThroughput(b *testing.B) {
	for _, size := range []uint64{16 << 20, 64 << 20} {
		b.Run(sizeName(size), func(b *testing.B) { benchRelocation(b, size) })
	}
}

// floorCopies is how many floor copies each iteration measures: one copy
// of a few milliseconds is at the mercy of a shared machine.
const floorCopies = 4

func benchRelocation(b *testing.B, size uint64) {
	ctx := context.Background()
	fl := benchBackend(b)
	defer fl.Close()
	fq, err := fl.NewQueue(0)
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
	fl.register(src)
	fl.register(dst)
	defer func() {
		fq.Close()
		fl.unregister(src.id)
		fl.unregister(dst.id)
		fl.free(src)
		fl.free(dst)
	}()
	floorCopy := func() time.Duration {
		t0 := time.Now()
		s := storage.Resource{Region: storage.Region{ID: src.id, Size: size}}
		t := storage.Resource{Region: storage.Region{ID: dst.id, Size: size}}
		if err := fl.CopyOnDevice(fq, s, t); err != nil {
			b.Fatal(err)
		}
		f, err := fq.Fence()
		if err != nil {
			b.Fatal(err)
		}
		if err := fq.Wait(ctx, f); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	floorCopy() // warm

	var reloc, floor time.Duration
	var moved uint64
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		be := benchBackend(b)
		d, err := gpumem.OpenBackend(be)
		if err != nil {
			b.Fatal(err)
		}
		s := d.DefaultStream()
		keep, err := s.Alloc(ctx, size)
		if err != nil {
			b.Fatal(err)
		}
		v := byte(i*7 + 1)
		fill(b, keep, v)
		grow, err := s.Alloc(ctx, 2*size+2<<20) // grows the arena: keep's page is outdated
		if err != nil {
			b.Fatal(err)
		}
		// Used before it is freed, as a page in steady use is: the first
		// write into fresh memory costs a page fault per 4 KiB on lavapipe
		// (host memory), which no GPU pays and the floor would not either.
		fill(b, grow, 0)
		if err := grow.Free(); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		before := d.Stats().Relocation.BytesMoved

		b.StartTimer()
		t0 := time.Now()
		err = d.Cleanup(ctx)
		el := time.Since(t0)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if got := d.Stats().Relocation.BytesMoved - before; got != size {
			b.Fatalf("Cleanup moved %d bytes, want %d", got, size)
		}
		reloc += el
		moved += size
		got, err := keep.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(got, bytes.Repeat([]byte{v}, int(size))) {
			b.Fatalf("bytes after relocation differ from the fill %#x", v)
		}
		if err := d.Close(); err != nil {
			b.Fatal(err)
		}
		for range floorCopies {
			floor += floorCopy()
		}
		b.StartTimer()
	}
	b.StopTimer()
	relocBps := float64(moved) / reloc.Seconds()
	floorBps := float64(moved*floorCopies) / floor.Seconds()
	b.ReportMetric(relocBps, "B/s")
	b.ReportMetric(floorBps, "floor-B/s")
	b.ReportMetric(relocBps/floorBps, "x-floor")
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
				mai := &vkMemoryAllocateInfo{SType: stMemoryAllocateInfo, AllocationSize: size, MemoryTypeIndex: typ}
				var mem uint64
				if err := check("vkAllocateMemory", call(dv.fn.AllocateMemory, dv.h, uintptr(unsafe.Pointer(mai)), 0, uintptr(unsafe.Pointer(&mem)))); err != nil {
					b.Fatal(err)
				}
				call(dv.fn.FreeMemory, dv.h, uintptr(mem), 0)
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
	open := func(pooled bool) (*gpumem.Device, *gpumem.Buffer) {
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
	write := func(buf *gpumem.Buffer) time.Duration {
		t0 := time.Now()
		if err := buf.Write(ctx, src); err != nil {
			b.Fatal(err)
		}
		if err := buf.Stream().Synchronize(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	read := func(buf *gpumem.Buffer) time.Duration {
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
	rounds := max(1, int((64<<20)/size))
	var floor, wp, rp, wu, ru time.Duration
	for b.Loop() {
		for range rounds {
			t0 := time.Now()
			copy(dst, src)
			floor += time.Since(t0)
			wp += write(bp)
			rp += read(bp)
			wu += write(bu)
			ru += read(bu)
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
