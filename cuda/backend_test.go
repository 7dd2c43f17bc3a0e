//go:build linux

package cuda

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

const (
	kib = uint64(1) << 10
	mib = uint64(1) << 20
)

// target is a driver the backend tests run against: the fake (always, when
// gcc is present) and the real one (when a driver is found).
type target struct {
	name string
	open func(t *testing.T, more ...gpumem.Option) (*gpumem.Device, *Backend, *fakeDriver)
}

var targets = []target{
	{"fake", func(t *testing.T, more ...gpumem.Option) (*gpumem.Device, *Backend, *fakeDriver) {
		f := buildFake(t)
		d, b := openDevice(t, Options{Library: f.path}, more...)
		return d, b, f
	}},
	{"real", func(t *testing.T, more ...gpumem.Option) (*gpumem.Device, *Backend, *fakeDriver) {
		d, b := openDevice(t, Options{Library: realLibrary(t)}, more...)
		return d, b, nil
	}},
}

// realLibrary returns the real driver's path, skipping the test when none
// is usable unless GPUMEM_REQUIRE_CUDA=1.
func realLibrary(t testing.TB) string {
	t.Helper()
	path := libraryPath(inheritedLibrary)
	if err := available(path); err != nil {
		if os.Getenv(envRequireCUDA) == "1" {
			t.Fatalf("%s=1 but no usable CUDA driver: %v", envRequireCUDA, err)
		}
		t.Skipf("no usable CUDA driver (%v); set %s=1 to make this a failure", err, envRequireCUDA)
	}
	return path
}

// openDevice opens a device on the cuda backend and closes it when the
// test ends.
func openDevice(t testing.TB, opts Options, more ...gpumem.Option) (*gpumem.Device, *Backend) {
	t.Helper()
	d, err := OpenDevice(opts, more...)
	if err != nil {
		t.Fatalf("OpenDevice: %v", err)
	}
	b := d.Backend().(*Backend)
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Device.Close: %v", err)
		}
	})
	return d, b
}

// forEachTarget runs fn against the fake driver and the real one.
func forEachTarget(t *testing.T, fn func(t *testing.T, d *gpumem.Device, b *Backend, f *fakeDriver)) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			d, b, f := tg.open(t)
			fn(t, d, b, f)
		})
	}
}

func pattern(n uint64, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31+i>>8) ^ seed
	}
	return p
}

func mustAlloc(t testing.TB, s *gpumem.Stream, size uint64) gpumem.Buffer {
	t.Helper()
	buf, err := s.Alloc(context.Background(), size)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", size, err)
	}
	return buf
}

func mustWrite(t testing.TB, buf gpumem.Buffer, data []byte) {
	t.Helper()
	if err := buf.Write(context.Background(), data); err != nil {
		t.Fatalf("Write buffer %d: %v", buf.ID(), err)
	}
}

func mustRead(t testing.TB, buf gpumem.Buffer) []byte {
	t.Helper()
	got, err := buf.Read(context.Background())
	if err != nil {
		t.Fatalf("Read buffer %d: %v", buf.ID(), err)
	}
	return got
}

func wantBytes(t testing.TB, buf gpumem.Buffer, want []byte) {
	t.Helper()
	got := mustRead(t, buf)
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("buffer %d: %d bytes read, %d wanted, first difference at byte %d", buf.ID(), len(got), len(want), i)
	}
}

func mustFree(t testing.TB, buf gpumem.Buffer) {
	t.Helper()
	if err := buf.Free(); err != nil {
		t.Fatalf("Free buffer %d: %v", buf.ID(), err)
	}
}

// addOne enqueues an op on s that launches add_one over buf.
func addOne(b *Backend, s *gpumem.Stream, buf gpumem.Buffer) error {
	return s.Enqueue("add_one", []gpumem.Use{{Buffer: buf, Access: gpumem.ReadWrite}}, func(res []storage.Resource) error {
		return b.launch(s.Queue(), kernelAddOne, res[0].Ptr, res[0].Size)
	})
}

func plus(p []byte, k byte) []byte {
	out := make([]byte, len(p))
	for i, v := range p {
		out[i] = v + k
	}
	return out
}

// indexOf returns the index of the first call named name at or after from
// in calls, or -1.
func indexOf(calls []call, name string, from int) int {
	for i := max(from, 0); i < len(calls); i++ {
		if calls[i].name == name {
			return i
		}
	}
	return -1
}

func TestOpenDeviceWithoutDriverIsErrNotSupported(t *testing.T) {
	missing := t.TempDir() + "/libcuda.so.1"
	if _, err := NewBackend(Options{Library: missing}); !errors.Is(err, gpumem.ErrNotSupported) || !errors.Is(err, ErrNoDriver) {
		t.Fatalf("NewBackend without a driver = %v, want ErrNotSupported and ErrNoDriver", err)
	}
	d, err := OpenDevice(Options{Library: missing})
	if d != nil || !errors.Is(err, gpumem.ErrNotSupported) || !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenDevice without a driver = %v, %v; want nil and ErrNotSupported and ErrNoDriver", d, err)
	}
}

func TestBackendPropertiesFollowTheDeviceMemory(t *testing.T) {
	f := buildFake(t)
	f.setTotalMem(1<<30 + 1000) // a quarter is 2^28 + 250: rounded down to 2^28
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := b.Properties()
	if b.Name() != "cuda" || p.Alignment != 256 || p.MaxMemory != 1<<30+1000 || p.MaxPageSize != 1<<28 {
		t.Fatalf("Name %q, Properties %+v; want cuda, alignment 256, MaxMemory 2^30+1000, MaxPageSize 2^28", b.Name(), p)
	}
}

func TestDeviceWritesAndReadsDeviceMemory(t *testing.T) {
	forEachTarget(t, func(t *testing.T, d *gpumem.Device, b *Backend, f *fakeDriver) {
		s := d.DefaultStream()
		want := pattern(100*kib+3, 1)
		buf := mustAlloc(t, s, uint64(len(want)))
		mustWrite(t, buf, want)
		wantBytes(t, buf, want)
		if _, err := buf.Map(context.Background()); !errors.Is(err, gpumem.ErrNotSupported) {
			t.Fatalf("Map on device memory = %v, want ErrNotSupported", err)
		}
		if f == nil {
			return
		}
		if n := len(f.named(t, "cuMemcpyHtoDAsync_v2")); n != 1 {
			t.Fatalf("%d host-to-device copies, want 1", n)
		}
		if n := len(f.named(t, "cuMemcpyDtoHAsync_v2")); n != 1 {
			t.Fatalf("%d device-to-host copies, want 1", n)
		}
		if st := d.Stats(); st.BytesAllocated == 0 || f.liveCount(t, "allocs")+f.liveCount(t, "mappings") == 0 {
			t.Fatalf("BytesAllocated %d, fake allocations %d, mappings %d: the buffer's page is not device memory",
				st.BytesAllocated, f.liveCount(t, "allocs"), f.liveCount(t, "mappings"))
		}
	})
}

func TestOpLaunchesKernelsOnTheResolvedAddress(t *testing.T) {
	forEachTarget(t, func(t *testing.T, d *gpumem.Device, b *Backend, f *fakeDriver) {
		s := d.DefaultStream()
		want := pattern(3000, 2)
		buf := mustAlloc(t, s, uint64(len(want)))
		mustWrite(t, buf, want)
		if err := addOne(b, s, buf); err != nil {
			t.Fatal(err)
		}
		wantBytes(t, buf, plus(want, 1))
		err := s.Enqueue("fill", []gpumem.Use{{Buffer: buf, Access: gpumem.Write, Offset: 1000, Size: 10}}, func(res []storage.Resource) error {
			return b.launch(s.Queue(), kernelFillU8, res[0].Ptr, res[0].Size, uint32(0xAB))
		})
		if err != nil {
			t.Fatal(err)
		}
		want = plus(want, 1)
		copy(want[1000:1010], bytes.Repeat([]byte{0xAB}, 10))
		wantBytes(t, buf, want)
		if _, err := b.function("no_such_kernel"); err == nil {
			t.Fatal("a kernel KernelsPTX lacks was found")
		}
	})
}

func TestRelocationMovesDeviceBytesEndToEnd(t *testing.T) {
	forEachTarget(t, func(t *testing.T, d *gpumem.Device, b *Backend, f *fakeDriver) {
		s := d.DefaultStream()
		want := pattern(mib, 3)
		keep := mustAlloc(t, s, mib)
		mustWrite(t, keep, want)
		large := mustAlloc(t, s, 10*mib) // grows the arena: keep's page is outdated
		if d.Stats().Growths == 0 {
			t.Fatal("a 10 MiB allocation after a 1 MiB one did not grow the arena")
		}
		mustFree(t, large)
		before := d.Stats().BytesAllocated
		if f != nil {
			f.logClear()
		}
		if err := d.Cleanup(context.Background()); err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
		st := d.Stats()
		if st.Relocation.Moves < 1 || st.Relocation.BytesMoved < mib {
			t.Fatalf("Cleanup moved %d allocations, %d bytes; want the 1 MiB buffer moved", st.Relocation.Moves, st.Relocation.BytesMoved)
		}
		if st.BytesAllocated >= before {
			t.Fatalf("BytesAllocated %d after Cleanup, %d before: the outdated page did not go back", st.BytesAllocated, before)
		}
		wantBytes(t, keep, want)
		if f == nil {
			return
		}
		// The copy queue waits on the device before its first copy and on
		// the copy stream after its last; the outdated page is freed after.
		calls := f.calls(t)
		sync := indexOf(calls, "cuCtxSynchronize", 0)
		cp := indexOf(calls, "cuMemcpyDtoDAsync_v2", 0)
		if sync < 0 || cp < 0 || sync > cp {
			t.Fatalf("cuCtxSynchronize at %d, first device copy at %d: want the device waited on before the copy\n%v", sync, cp, calls)
		}
		if calls[cp].args["size"] != "1048576" {
			t.Fatalf("relocation copy %v: want the requested size, 1048576 bytes", calls[cp])
		}
		rec := indexOf(calls, "cuEventRecord", cp)
		if rec < 0 {
			t.Fatalf("no event recorded after the relocation copy:\n%v", calls)
		}
		ev := calls[rec].args["event"]
		waited := -1
		for i := rec; i < len(calls); i++ {
			if calls[i].name == "cuEventSynchronize" && calls[i].args["event"] == ev {
				waited = i
				break
			}
		}
		// A plain page goes back with cuMemFree_v2, a granular one with
		// cuMemUnmap of its granules (after a cuCtxSynchronize).
		free := indexOf(calls, "cuMemFree_v2", cp)
		if b.Granule() > 0 {
			free = indexOf(calls, "cuMemUnmap", cp)
		}
		if waited < 0 || free < 0 || free < waited {
			t.Fatalf("event after the copy synchronised at %d, outdated page freed at %d: want the wait before the free\n%v", waited, free, calls)
		}
	})
}

func TestCapturedGraphReplaysKernels(t *testing.T) {
	forEachTarget(t, func(t *testing.T, d *gpumem.Device, b *Backend, f *fakeDriver) {
		s := d.DefaultStream()
		want := pattern(256*kib, 4)
		buf := mustAlloc(t, s, uint64(len(want)))
		mustWrite(t, buf, want)
		g, err := s.Capture(context.Background(), func(_ context.Context, s *gpumem.Stream) error {
			return addOne(b, s, buf)
		})
		if err != nil {
			t.Fatalf("Capture: %v", err)
		}
		if g.Ops() != 1 {
			t.Fatalf("graph of %d ops, want 1", g.Ops())
		}
		wantBytes(t, buf, plus(want, 1)) // the warmup ran once
		for range 3 {
			if err := g.Launch(context.Background()); err != nil {
				t.Fatalf("Launch: %v", err)
			}
		}
		wantBytes(t, buf, plus(want, 4))
		if f != nil && f.liveCount(t, "execs") != 1 {
			t.Fatalf("%d executable graphs live, want 1", f.liveCount(t, "execs"))
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestGraphReplayAfterRelocation captures a graph, lets a relocation run
// around the page it guards, then replays it and checks every byte.
func TestGraphReplayAfterRelocation(t *testing.T) {
	forEachTarget(t, func(t *testing.T, d *gpumem.Device, b *Backend, f *fakeDriver) {
		graphReplayAfterRelocation(t, d, b)
	})
}

func graphReplayAfterRelocation(t testing.TB, d *gpumem.Device, b *Backend) {
	ctx := context.Background()
	s := d.DefaultStream()
	gwant := pattern(256*kib, 5)
	gbuf := mustAlloc(t, s, uint64(len(gwant)))
	mustWrite(t, gbuf, gwant)
	g, err := s.Capture(ctx, func(_ context.Context, s *gpumem.Stream) error { return addOne(b, s, gbuf) })
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	gwant = plus(gwant, 1) // warmup

	// A buffer on another page, then growth: both pages are outdated, the
	// graph's is guarded.
	want := pattern(mib, 6)
	keep := mustAlloc(t, s, mib)
	mustWrite(t, keep, want)
	mustFree(t, mustAlloc(t, s, 10*mib))
	if err := d.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	st := d.Stats()
	if st.Relocation.Moves < 1 {
		t.Fatalf("Cleanup moved nothing; want the 1 MiB buffer moved around the graph's guarded page")
	}
	if st.GuardedPages == 0 {
		t.Fatalf("no guarded page while the graph lives")
	}
	for range 3 {
		if err := g.Launch(ctx); err != nil {
			t.Fatalf("Launch after relocation: %v", err)
		}
	}
	wantBytes(t, gbuf, plus(gwant, 3))
	wantBytes(t, keep, want)

	// Once the graph is closed its page may move too.
	moves := st.Relocation.Moves
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup after Graph.Close: %v", err)
	}
	if got := d.Stats().Relocation.Moves; got <= moves {
		t.Fatalf("Cleanup after Graph.Close moved nothing (%d moves before, %d after)", moves, got)
	}
	wantBytes(t, gbuf, plus(gwant, 3))
	wantBytes(t, keep, want)
}

func TestDriverOutOfMemoryIsErrOutOfMemoryAfterTheRetry(t *testing.T) {
	f := buildFake(t)
	f.setTotalMem(64 * mib) // pages of at most 16 MiB
	// Pages backed whole (cuMemAlloc_v2); granular_test.go has the
	// cuMemCreate refusals.
	d, _ := openDevice(t, Options{Library: f.path}, gpumem.WithPageGranular(false))
	s := d.DefaultStream()
	for i := range 4 {
		mustAlloc(t, s, 15*mib) // one 16 MiB page each
		_ = i
	}
	_, err := s.Alloc(context.Background(), 15*mib)
	if !errors.Is(err, gpumem.ErrOutOfMemory) {
		t.Fatalf("Alloc beyond the device = %v, want ErrOutOfMemory", err)
	}
	var de *DriverError
	if !errors.As(err, &de) || de.Code != 2 || de.Name != "CUDA_ERROR_OUT_OF_MEMORY" || de.Op != "cuMemAlloc_v2" {
		t.Fatalf("Alloc beyond the device = %v, want a *DriverError for cuMemAlloc_v2, code 2, CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if st := d.Stats(); st.ReserveRetries != 1 || st.FailedReserves["out_of_memory"] != 1 {
		t.Fatalf("ReserveRetries %d, failed reserves %v; want one retry and one out_of_memory failure", st.ReserveRetries, st.FailedReserves)
	}
	// Four pages; the refused 16 MiB page and the page of the buffer's own
	// 15 MiB asked next (PL30); both again after the cleanup. The
	// dedicated own-size step is skipped: the arena asked that size.
	if n := len(f.named(t, "cuMemAlloc_v2")); n != 8 {
		t.Fatalf("%d cuMemAlloc_v2 calls, want 8 (four pages, page and own size refused, both again after the cleanup)", n)
	}
}

func TestOneDriverRefusalIsCuredByTheRetry(t *testing.T) {
	for _, c := range []struct {
		name     string
		granular bool
		call     string
	}{{"plain", false, "cuMemAlloc_v2"}, {"granular", true, "cuMemCreate"}} {
		t.Run(c.name, func(t *testing.T) { testOneDriverRefusalIsCuredByTheRetry(t, c.granular, c.call) })
	}
}

func testOneDriverRefusalIsCuredByTheRetry(t *testing.T, granular bool, call string) {
	f := buildFake(t)
	d, _ := openDevice(t, Options{Library: f.path}, gpumem.WithPageGranular(granular))
	f.setNextError(call, 2)
	buf := mustAlloc(t, d.DefaultStream(), mib)
	mustWrite(t, buf, pattern(mib, 7))
	wantBytes(t, buf, pattern(mib, 7))
	if st := d.Stats(); st.ReserveRetries != 1 {
		t.Fatalf("ReserveRetries = %d, want 1", st.ReserveRetries)
	}
}

func TestStickyDriverErrorPoisonsTheDevice(t *testing.T) {
	f := buildFake(t)
	d, b := openDevice(t, Options{Library: f.path})
	s := d.DefaultStream()
	want := pattern(4096, 8)
	buf := mustAlloc(t, s, uint64(len(want)))
	mustWrite(t, buf, want)
	if _, err := b.function(kernelAddOne); err != nil { // load the module before the fault
		t.Fatal(err)
	}
	f.setNextError("cuLaunchKernel", 700)
	if err := addOne(b, s, buf); err != nil {
		t.Fatalf("Enqueue: %v (a failed launch is the op's failure, not the enqueue's)", err)
	}
	_, err := buf.Read(context.Background())
	if !errors.Is(err, gpumem.ErrDevicePoisoned) {
		t.Fatalf("Read after an illegal address = %v, want ErrDevicePoisoned", err)
	}
	var de *DriverError
	if !errors.As(err, &de) || de.Code != 700 || de.Name != "CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Fatalf("Read after an illegal address = %v, want a *DriverError 700 CUDA_ERROR_ILLEGAL_ADDRESS", err)
	}
	if err := b.Poisoned(); !errors.Is(err, gpumem.ErrDevicePoisoned) {
		t.Fatalf("Poisoned() = %v, want ErrDevicePoisoned", err)
	}
	if _, err := s.Alloc(context.Background(), 20*mib); !errors.Is(err, gpumem.ErrDevicePoisoned) {
		t.Fatalf("Alloc on a poisoned device = %v, want ErrDevicePoisoned", err)
	}
	if err := s.Synchronize(context.Background()); !errors.Is(err, gpumem.ErrDevicePoisoned) {
		t.Fatalf("Synchronize on a poisoned device = %v, want ErrDevicePoisoned", err)
	}
}

func TestRelocationOnAPoisonedDeviceIsAbandoned(t *testing.T) {
	f := buildFake(t)
	d, _ := openDevice(t, Options{Library: f.path})
	s := d.DefaultStream()
	keep := mustAlloc(t, s, mib)
	mustWrite(t, keep, pattern(mib, 9))
	mustFree(t, mustAlloc(t, s, 10*mib))
	f.setNextError("cuCtxSynchronize", 719) // the wait before the first copy fails: a sticky fault
	_ = d.Cleanup(context.Background())
	st := d.Stats()
	if st.Relocation.Moves != 0 || st.Relocation.Abandoned != 1 || st.Relocation.Leaked != 0 {
		t.Fatalf("relocation stats %+v: want nothing moved, one abandoned (a poisoned wait is not a leak)", st.Relocation)
	}
	if n := len(f.named(t, "cuMemcpyDtoDAsync_v2")); n != 0 {
		t.Fatalf("%d device copies after the failed wait, want 0", n)
	}
}

func TestDeallocationsWaitWhileAQueueRecords(t *testing.T) {
	f := buildFake(t)
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	nq, err := b.NewQueue(0)
	if err != nil {
		t.Fatal(err)
	}
	q := nq.(stream.Recorder)
	r, err := st.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.BeginCapture(1); err != nil {
		t.Fatal(err)
	}
	st.Dealloc(r.ID)
	st.Flush()
	if n := len(f.named(t, "cuMemFree_v2")); n != 0 || st.BytesAllocated() != 4096 {
		t.Fatalf("while recording: %d frees, BytesAllocated %d; want none freed, 4096 still counted", n, st.BytesAllocated())
	}
	if _, err := st.Resolve(r); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatalf("Resolve of a deallocated region = %v, want ErrUnknownRegion", err)
	}
	x, err := q.EndCapture(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if x.Len() != 0 {
		t.Fatalf("empty capture has %d ops", x.Len())
	}
	st.Flush()
	if n := len(f.named(t, "cuMemFree_v2")); n != 1 || st.BytesAllocated() != 0 {
		t.Fatalf("after the capture: %d frees, BytesAllocated %d; want 1 and 0", n, st.BytesAllocated())
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStorageResolvesWindowsAndTakesTheBudget(t *testing.T) {
	f := buildFake(t)
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	budget := storage.NewBudget(8192)
	st, err := b.NewStorage(budget)
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Alloc(8192)
	if err != nil {
		t.Fatal(err)
	}
	base := f.last(t, "cuMemAlloc_v2").args["ptr"]
	res, err := st.Resolve(r.Sub(512, 1024))
	if err != nil || res.Bytes != nil || hex(res.Ptr-512) != base || res.Size != 1024 {
		t.Fatalf("Resolve window = %+v, %v; want Ptr base+512 (base %s), no bytes", res, err, base)
	}
	if _, err := st.Resolve(r.Sub(8000, 1024)); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatalf("Resolve beyond the allocation = %v, want ErrUnknownRegion", err)
	}
	if _, err := st.Alloc(1); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Alloc beyond the budget = %v, want ErrOutOfMemory", err)
	}
	if st.Alignment() != 256 {
		t.Fatalf("Alignment = %d", st.Alignment())
	}
	z, err := st.Alloc(0)
	if err != nil || z.ID == r.ID {
		t.Fatalf("zero-size Alloc = %+v, %v", z, err)
	}
	if n := len(f.named(t, "cuMemAlloc_v2")); n != 1 {
		t.Fatalf("%d driver allocations, want 1 (the zero-size one takes none)", n)
	}
	st.Dealloc(r.ID)
	st.Dealloc(z.ID)
	st.Flush()
	if budget.Used() != 0 || st.BytesAllocated() != 0 || f.liveCount(t, "allocs") != 0 {
		t.Fatalf("after Flush: budget used %d, BytesAllocated %d, fake allocations %d; want 0", budget.Used(), st.BytesAllocated(), f.liveCount(t, "allocs"))
	}
}

func TestQueueFencesWaitsAndCrossStreamWaits(t *testing.T) {
	f := buildFake(t)
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q0, err := b.NewQueue(0)
	if err != nil {
		t.Fatal(err)
	}
	q1, err := b.NewQueue(1)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ran := 0
	seq, err := q0.Enqueue(stream.Op{Name: "count", Run: func() error { ran++; return nil }})
	if err != nil || seq != 1 {
		t.Fatalf("Enqueue = %d, %v; want seq 1", seq, err)
	}
	fence, err := q0.Fence()
	if err != nil || fence.Seq != 1 {
		t.Fatalf("Fence = %+v, %v", fence, err)
	}
	if err := q0.Wait(ctx, fence); err != nil || q0.Completed() < 1 || ran != 1 {
		t.Fatalf("Wait = %v, Completed %d, ran %d", err, q0.Completed(), ran)
	}
	rec := f.last(t, "cuEventRecord").args["event"]
	// A fence of an incomplete step would make q1 wait on its event; the
	// fake completes work at once, so a passed fence adds nothing, and a
	// fence beyond what q0 issued is refused.
	if err := q1.WaitFence(fence); err != nil {
		t.Fatal(err)
	}
	if err := q1.WaitFence(stream.Fence{Q: q0, Seq: 9}); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("WaitFence beyond issued = %v, want ErrInvalid", err)
	}
	if err := q0.Wait(ctx, stream.Fence{Q: q0, Seq: 9}); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Wait beyond issued = %v, want ErrInvalid", err)
	}
	_ = rec

	boom := errors.New("boom")
	if _, err := q1.Enqueue(stream.Op{Name: "fails", Run: func() error { return boom }}); err != nil {
		t.Fatal(err)
	}
	if _, err := q1.Enqueue(stream.Op{Name: "panics", Run: func() error { panic("oops") }}); err != nil {
		t.Fatal(err)
	}
	fs := q1.TakeFailures()
	if len(fs) != 2 || !errors.Is(fs[0].Err, boom) || fs[0].Seq != 1 || !errors.Is(fs[1].Err, stream.ErrOpPanicked) || fs[1].Name != "panics" {
		t.Fatalf("failures = %+v; want boom at 1 and a panic at 2", fs)
	}
	if len(q1.TakeFailures()) != 0 {
		t.Fatal("TakeFailures did not forget")
	}
	if _, err := q0.Enqueue(stream.Op{Name: "no run"}); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Enqueue without Run = %v, want ErrInvalid", err)
	}
	if err := q0.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q0.Enqueue(stream.Op{Name: "late", Run: func() error { return nil }}); !errors.Is(err, stream.ErrClosed) {
		t.Fatalf("Enqueue after Close = %v, want ErrClosed", err)
	}
	if err := q0.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestUnobservedStepIsWaitedOnDeviceSideAndCtxIsHonoured(t *testing.T) {
	f := buildFake(t)
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q0, _ := b.NewQueue(0)
	q1, _ := b.NewQueue(1)
	w := q0.(*queue)
	w.gate.Lock() // the watcher cannot observe q0's completions
	seq, err := q0.Enqueue(stream.Op{Name: "a", Run: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ev := f.last(t, "cuEventRecord").args["event"]
	if q0.Completed() != 0 {
		t.Fatalf("Completed = %d with the watcher held", q0.Completed())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q1.Wait(ctx, stream.Fence{Q: q0, Seq: seq}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context on an unobserved step = %v, want context.Canceled", err)
	}
	if err := q1.WaitFence(stream.Fence{Q: q0, Seq: seq}); err != nil {
		t.Fatal(err)
	}
	wait := f.last(t, "cuStreamWaitEvent")
	if wait.args["event"] != ev || wait.args["stream"] != hex(q1.(*queue).s.h) {
		t.Fatalf("WaitFence called %v; want q1's stream (%s) waiting on q0's event %s", wait, hex(q1.(*queue).s.h), ev)
	}
	w.gate.Unlock()
	if err := q1.Wait(context.Background(), stream.Fence{Q: q0, Seq: seq}); err != nil || q0.Completed() != seq {
		t.Fatalf("Wait after the watcher resumed = %v, Completed %d; want nil, %d", err, q0.Completed(), seq)
	}
}

func TestCrossStreamUseThroughTheDeviceWaitsOnTheOwnersEvent(t *testing.T) {
	f := buildFake(t)
	d, b := openDevice(t, Options{Library: f.path})
	s0 := d.DefaultStream()
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	want := pattern(8192, 13)
	buf := mustAlloc(t, s0, uint64(len(want)))
	w := s0.Queue().(*queue)
	w.gate.Lock()
	mustWrite(t, buf, want)
	ev := f.last(t, "cuEventRecord").args["event"]
	if err := addOne(b, s1, buf); err != nil { // X1: s1 waits for s0's write
		w.gate.Unlock()
		t.Fatal(err)
	}
	w.gate.Unlock()
	waits := f.named(t, "cuStreamWaitEvent")
	if len(waits) != 1 || waits[0].args["event"] != ev || waits[0].args["stream"] != hex(s1.Queue().(*queue).s.h) {
		t.Fatalf("cuStreamWaitEvent calls %v; want one, s1 waiting on the write's event %s", waits, ev)
	}
	if err := s1.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantBytes(t, buf, plus(want, 1))
}

func TestRecordingQueueRefusesHostWaitsAndUnmetFences(t *testing.T) {
	f := buildFake(t)
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	nq, _ := b.NewQueue(0)
	q := nq.(stream.Recorder)
	if err := q.BeginCapture(7); err != nil {
		t.Fatal(err)
	}
	if err := q.BeginCapture(7); !errors.Is(err, stream.ErrCaptureState) {
		t.Fatalf("second BeginCapture = %v, want ErrCaptureState", err)
	}
	if !q.Recording() {
		t.Fatal("not recording after BeginCapture")
	}
	seq, err := q.Enqueue(stream.Op{Name: "recorded", Run: func() error { return nil }})
	if err != nil || seq != 0 {
		t.Fatalf("Enqueue while recording = %d, %v; want 0, nil", seq, err)
	}
	err = q.Wait(context.Background(), stream.Fence{})
	if !errors.Is(err, stream.ErrCaptureUnsupported) || !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("Wait while recording = %v, want ErrCaptureUnsupported and ErrCaptureInvalidated", err)
	}
	if _, err := q.Enqueue(stream.Op{Name: "after", Run: func() error { return nil }}); !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("Enqueue on an invalidated recording = %v", err)
	}
	x, err := q.EndCapture(7, nil)
	if x != nil || !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("EndCapture of an invalidated recording = %v, %v", x, err)
	}
	if f.liveCount(t, "graphs") != 0 || f.liveCount(t, "execs") != 0 {
		t.Fatal("a refused capture left a graph behind")
	}
	// The wrong owner tears the capture down, with no graph.
	if err := q.BeginCapture(8); err != nil {
		t.Fatal(err)
	}
	if x, err := q.EndCapture(9, nil); x != nil || !errors.Is(err, stream.ErrWrongOwner) {
		t.Fatalf("EndCapture by another owner = %v, %v", x, err)
	}
	// A doomed recording gives no graph either.
	if err := q.BeginCapture(10); err != nil {
		t.Fatal(err)
	}
	doom := errors.New("doomed")
	if x, err := q.EndCapture(10, doom); x != nil || !errors.Is(err, doom) {
		t.Fatalf("EndCapture of a doomed recording = %v, %v", x, err)
	}
	if q.Recording() {
		t.Fatal("still recording after EndCapture")
	}
	if _, err := q.EndCapture(10, nil); !errors.Is(err, stream.ErrCaptureState) {
		t.Fatalf("EndCapture with no capture = %v, want ErrCaptureState", err)
	}
	if f.liveCount(t, "graphs") != 0 || f.liveCount(t, "execs") != 0 {
		t.Fatal("a refused capture left a graph behind")
	}
}

func TestCopyOnDeviceIsCoveredByTheNextFence(t *testing.T) {
	f := buildFake(t)
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, _ := b.NewStorage(nil)
	q, _ := b.NewQueue(0)
	r1, _ := st.Alloc(4096)
	r2, _ := st.Alloc(4096)
	src, _ := st.Resolve(r1)
	dst, _ := st.Resolve(r2)
	want := pattern(4096, 10)
	var got []byte
	if _, err := q.Enqueue(stream.Op{Name: "write", Run: func() error { return b.CopyToDevice(q, src, want) }}); err != nil {
		t.Fatal(err)
	}
	before := q.(*queue).issued.Load()
	if err := b.CopyOnDevice(q, src, dst); err != nil {
		t.Fatal(err)
	}
	fence, err := q.Fence()
	if err != nil || fence.Seq != before+1 {
		t.Fatalf("Fence after a device copy = %+v, %v; want a new step (%d) covering it", fence, err, before+1)
	}
	if err := q.Wait(context.Background(), fence); err != nil {
		t.Fatal(err)
	}
	if f2, _ := q.Fence(); f2.Seq != fence.Seq {
		t.Fatalf("a second Fence with nothing new took step %d", f2.Seq)
	}
	got = make([]byte, 4096)
	if _, err := q.Enqueue(stream.Op{Name: "read", Run: func() error { return b.CopyToHost(q, got, dst) }}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the device copy did not move the bytes")
	}
	if err := b.CopyOnDevice(q, src, storage.Resource{Region: storage.Region{Size: 1}}); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("CopyOnDevice of unequal sizes = %v, want ErrInvalid", err)
	}
	if err := b.CopyOnDevice(hostqueue.NewInline(), src, dst); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("CopyOnDevice on a host queue = %v, want ErrInvalid", err)
	}
}

func TestDeviceCloseReleasesEverythingItHeld(t *testing.T) {
	f := buildFake(t)
	d, err := OpenDevice(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	b := d.Backend().(*Backend)
	s2, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	buf := mustAlloc(t, s2, mib)
	mustWrite(t, buf, pattern(mib, 11))
	g, err := s2.Capture(context.Background(), func(_ context.Context, s *gpumem.Stream) error { return addOne(b, s, buf) })
	if err != nil {
		t.Fatal(err)
	}
	_ = g // left open: the queue destroys its executable graph
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"allocs", "streams", "events", "modules", "graphs", "execs", "ctxrefs"} {
		if n := f.liveCount(t, kind); n != 0 {
			t.Errorf("%d %s live after Device.Close, want 0", n, kind)
		}
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestEveryStreamCallRunsWithTheContextCurrent(t *testing.T) {
	f := buildFake(t)
	d, b := openDevice(t, Options{Library: f.path})
	s := d.DefaultStream()
	buf := mustAlloc(t, s, 4096)
	mustWrite(t, buf, pattern(4096, 12))
	if err := addOne(b, s, buf); err != nil {
		t.Fatal(err)
	}
	mustRead(t, buf)
	for _, c := range f.calls(t) {
		if c.rc == 201 {
			t.Fatalf("%v ran without the context current", c)
		}
		if c.rc == 1 && c.name == "cuFuncGetParamInfo" {
			continue // the probe past a kernel's last parameter
		}
		if c.rc != 0 {
			t.Fatalf("%v failed", c)
		}
	}
	var names []string
	for _, c := range f.calls(t) {
		names = append(names, c.name)
	}
	if !strings.Contains(strings.Join(names, " "), "cuLaunchKernel") {
		t.Fatal("no kernel launched")
	}
}

func TestDriverErrorMatchesTheStreamSentinels(t *testing.T) {
	for _, c := range []struct {
		code   int
		target error
		want   bool
	}{
		{900, stream.ErrCaptureInvalidated, true},
		{901, stream.ErrCaptureInvalidated, true},
		{900, stream.ErrCaptureUnsupported, true},
		{901, stream.ErrCaptureUnsupported, false},
		{908, stream.ErrWrongOwner, true},
		{908, stream.ErrCaptureInvalidated, false},
		{2, gpumem.ErrOutOfMemory, true},
		{700, gpumem.ErrDevicePoisoned, true},
	} {
		err := error(&DriverError{Op: "x", Code: c.code})
		if got := errors.Is(err, c.target); got != c.want {
			t.Errorf("errors.Is(DriverError %d, %v) = %v, want %v", c.code, c.target, got, c.want)
		}
	}
}

// One Cleanup relocating a buffer off an outdated page makes exactly the
// driver calls BenchmarkRelocationThroughput's comment lists (one whole
// copy, no chunks, no memset, one free), and the backend's phase clock
// sees each of its phases.
func TestRelocationCallsAndPhases(t *testing.T) {
	f := buildFake(t)
	d, b := openDevice(t, Options{Library: f.path}, gpumem.WithPageGranular(false))
	ctx := context.Background()
	s := d.DefaultStream()
	const size = 4 << 20
	keep := mustAlloc(t, s, size)
	want := bytes.Repeat([]byte{0x5c}, size)
	mustWrite(t, keep, want)
	grow := mustAlloc(t, s, size+2<<20) // keep's page is outdated
	if err := grow.Free(); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	f.logClear()
	p0 := b.clock.snapshot()
	if err := d.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	p := b.clock.snapshot().sub(p0)
	var names []string
	for _, c := range f.calls(t) {
		names = append(names, c.name)
		if c.name == "cuMemcpyDtoDAsync_v2" && c.args["size"] != strconv.Itoa(size) {
			t.Errorf("relocation copy %v; want one copy of the whole %d bytes", c, size)
		}
	}
	wantCalls := "cuCtxSynchronize cuMemcpyDtoDAsync_v2 cuEventRecord cuEventSynchronize cuMemFree_v2"
	if got := strings.Join(names, " "); got != wantCalls {
		t.Errorf("Cleanup's driver calls: %s; want %s", got, wantCalls)
	}
	if p.sync <= 0 || p.copy <= 0 || p.release <= 0 {
		t.Errorf("phase clock over the Cleanup: %+v; want each phase seen", p)
	}
	if got := mustRead(t, keep); !bytes.Equal(got, want) {
		t.Fatal("relocated bytes differ")
	}
}

// CopyToHost prefaults a large destination and still copies every byte;
// prefault touches every page of any slice.
func TestCopyToHostPrefaultsAndCopiesEveryByte(t *testing.T) {
	f := buildFake(t)
	d, _ := openDevice(t, Options{Library: f.path})
	s := d.DefaultStream()
	const size = prefaultMin + 3<<20 + 17
	buf := mustAlloc(t, s, size)
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*31 + 7)
	}
	mustWrite(t, buf, want)
	if got := mustRead(t, buf); !bytes.Equal(got, want) {
		t.Fatal("Read of a prefaulted destination differs from what was written")
	}
	for _, n := range []int{1, 4095, 4 << 20, 9<<20 + 5} {
		b := bytes.Repeat([]byte{0xff}, n)
		prefault(b)
		if n >= 8<<20 && runtime.GOMAXPROCS(0) >= 2 && (b[0] != 0 || b[n-1] != 0 || b[4096] != 0) {
			t.Errorf("prefault of %d bytes left pages untouched", n)
		}
	}
}

// Backend.Info describes the device as the driver reported it at open, and
// MemInfo reads the free memory now: an allocation beside the device shows
// there; after Close it is refused.
func TestBackendInfoAndMemInfoDescribeTheDevice(t *testing.T) {
	f := buildFake(t)
	f.setTotalMem(64 << 20)
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	info := b.Info()
	want := DeviceInfo{Ordinal: 0, Name: "Fake CUDA Device 0", TotalMem: 64 << 20, DriverVersion: 12040,
		Features: Features{VirtualMemory: true, AsyncMemset: true, Library: true, ParamInfo: true}}
	if info != want {
		t.Fatalf("Info = %+v, want %+v", info, want)
	}
	free, total, err := b.MemInfo()
	if err != nil || free != 64<<20 || total != 64<<20 {
		t.Fatalf("MemInfo = %d, %d, %v; want all 64 MiB free", free, total, err)
	}
	p, err := b.ctx.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if free, _, err := b.MemInfo(); err != nil || free != 63<<20 {
		t.Fatalf("MemInfo after a 1 MiB allocation: free %d, %v; want 63 MiB", free, err)
	}
	if err := b.ctx.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.MemInfo(); !errors.Is(err, ErrClosed) {
		t.Fatalf("MemInfo after Close = %v, want ErrClosed", err)
	}
	if _, err := b.LoadModule([]byte(kernelsPTX)); !errors.Is(err, ErrClosed) {
		t.Fatalf("LoadModule after Close = %v, want ErrClosed", err)
	}
}
