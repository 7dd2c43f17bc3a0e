//go:build linux

package cuda

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// fakeGranule is the fake's recommended granularity (twice its 2 MiB
// minimum), the granule of its granular storages.
const fakeGranule = 4 * mib

// granularBackend opens a backend on a fresh fake and returns one of its
// storages as a granularStorage drawing on budget.
func granularBackend(t *testing.T, budget *storage.Budget) (*fakeDriver, *Backend, *granularStorage) {
	t.Helper()
	f := buildFake(t)
	b, err := NewBackend(Options{Library: f.path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	st, err := b.NewStorage(budget)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := st.(*granularStorage)
	if !ok || g.Granule() != fakeGranule || storage.GranuleOf(st) != fakeGranule {
		t.Fatalf("NewStorage on a driver with virtual memory = %T (granule %d), want a *GranularStorage with %d-byte granules",
			st, storage.GranuleOf(st), fakeGranule)
	}
	return f, b, g
}

// fakeCounts is what the fake holds of virtual memory.
type fakeCounts struct{ reservations, physicals, mappings int }

func counts(t *testing.T, f *fakeDriver) fakeCounts {
	t.Helper()
	return fakeCounts{f.liveCount(t, "reservations"), f.liveCount(t, "physicals"), f.liveCount(t, "mappings")}
}

// ptrs returns the ptr argument of every logged call of name.
func ptrs(t *testing.T, f *fakeDriver, name string) []string {
	t.Helper()
	var out []string
	for _, c := range f.named(t, name) {
		out = append(out, c.args["ptr"])
	}
	return out
}

// A page with live buffers at both ends and a freed middle gives the
// middle's granules back on an explicit cleanup; the ends keep their
// granules and their bytes, and the middle maps again on reuse.
func TestGranularPageGivesBackItsFreedMiddle(t *testing.T) {
	f := buildFake(t)
	d, b := openDevice(t, Options{Library: f.path}, gpumem.WithPageGranular(true))
	g := b.Granule()
	if g != fakeGranule {
		t.Fatalf("Granule = %d, want the fake's recommended %d", g, fakeGranule)
	}
	s := d.DefaultStream()
	ctx := context.Background()

	// A buffer of four and a half granules (18 MiB) grows the arena to the
	// largest page (on granular storage a page is address space: pool
	// PL31) and maps granules 0–4; freed, its page stays and serves the
	// three buffers below, which fill those granules.
	mustFree(t, mustAlloc(t, s, 4*g+g/2))
	if got := f.mappedBytes(); got != 5*g {
		t.Fatalf("fake maps %d bytes after a %d-byte buffer, want %d", got, 4*g+g/2, 5*g)
	}
	reserve := f.last(t, "cuMemAddressReserve")
	if want := strconv.FormatUint(b.Properties().MaxPageSize, 10); reserve.args["size"] != want {
		t.Fatalf("page reservation %v: want the largest page (%s bytes)", reserve, want)
	}
	base := reserve.args["ptr"]
	front := mustAlloc(t, s, g) // granule 0
	mid := mustAlloc(t, s, 3*g) // granules 1–3
	end := mustAlloc(t, s, g/2) // the used half of granule 4
	wantFront, wantEnd := pattern(g, 11), pattern(g/2, 12)
	mustWrite(t, front, wantFront)
	mustWrite(t, mid, pattern(3*g, 13))
	mustWrite(t, end, wantEnd)
	if got := f.mappedBytes(); got != 5*g {
		t.Fatalf("the three buffers map %d bytes, want the five granules already mapped (%d)", got, 5*g)
	}
	mustFree(t, mid)
	if got := f.mappedBytes(); got != 5*g {
		t.Fatalf("freeing the middle unmapped before any cleanup: %d bytes mapped", got)
	}

	f.logClear()
	if err := d.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if got := f.mappedBytes(); got != 2*g {
		t.Fatalf("after Cleanup the fake maps %d bytes, want the two end granules (%d)", got, 2*g)
	}
	if c := counts(t, f); c != (fakeCounts{1, 2, 2}) {
		t.Fatalf("after Cleanup the fake holds %+v, want one reservation, two physical allocations, two mappings", c)
	}
	if got := d.BytesAllocated(); got != 2*g {
		t.Fatalf("device BytesAllocated %d after Cleanup, want %d", got, 2*g)
	}
	// Exactly the middle granules went, each its own mapping, after the
	// device was waited on.
	var want []string
	for i := uintptr(1); i <= 3; i++ {
		want = append(want, hex(mustParsePtr(t, base)+i*uintptr(g)))
	}
	got := ptrs(t, f, "cuMemUnmap")
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("unmapped %v, want the middle granules %v", got, want)
	}
	calls := f.calls(t)
	if sync, unmap := indexOf(calls, "cuCtxSynchronize", 0), indexOf(calls, "cuMemUnmap", 0); sync < 0 || sync > unmap {
		t.Fatalf("cuCtxSynchronize at %d, first cuMemUnmap at %d: want the device waited on first\n%v", sync, unmap, calls)
	}
	if n := len(f.named(t, "cuMemRelease")); n != 3 {
		t.Fatalf("%d cuMemRelease calls, want one per unmapped granule (3)", n)
	}
	wantBytes(t, front, wantFront)
	wantBytes(t, end, wantEnd)

	// The middle serves again: its granules map afresh, and a copy across
	// the granule boundaries (separate physical allocations) works.
	again := mustAlloc(t, s, 3*g)
	if got := f.mappedBytes(); got != 5*g {
		t.Fatalf("reusing the middle maps %d bytes, want %d", got, 5*g)
	}
	wantAgain := pattern(3*g, 14)
	mustWrite(t, again, wantAgain)
	wantBytes(t, again, wantAgain)
	wantBytes(t, front, wantFront)
	wantBytes(t, end, wantEnd)

	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if c := counts(t, f); c != (fakeCounts{}) || f.mappedBytes() != 0 {
		t.Fatalf("after Close the fake holds %+v and maps %d bytes, want nothing", c, f.mappedBytes())
	}
}

// mustParsePtr parses a pointer the fake logged.
func mustParsePtr(t *testing.T, s string) uintptr {
	t.Helper()
	var p uintptr
	if len(s) < 3 || s[:2] != "0x" {
		t.Fatalf("pointer %q", s)
	}
	for _, c := range s[2:] {
		p <<= 4
		switch {
		case c >= '0' && c <= '9':
			p |= uintptr(c - '0')
		case c >= 'a' && c <= 'f':
			p |= uintptr(c-'a') + 10
		default:
			t.Fatalf("pointer %q", s)
		}
	}
	return p
}

// Unmap only queues: the granule reads as unmapped at once, its memory and
// budget go back at Flush (after the device is waited on), a mapping of it
// in between cancels the unmap, and a recording queue holds the queue back.
func TestGranularUnmapsWaitForFlushAndRemapCancelsThem(t *testing.T) {
	budget := storage.NewBudget(0)
	f, b, st := granularBackend(t, budget)
	g := st.Granule()
	r, err := st.Reserve(3*g + 1) // four granules
	if err != nil {
		t.Fatal(err)
	}
	if st.BytesReserved() != 4*g || st.BytesAllocated() != 0 || budget.Used() != 0 {
		t.Fatalf("reservation: %d reserved, %d allocated, budget %d; want %d, 0, 0", st.BytesReserved(), st.BytesAllocated(), budget.Used(), 4*g)
	}
	base := mustParsePtr(t, f.last(t, "cuMemAddressReserve").args["ptr"])
	if uint64(base)%g != 0 {
		t.Fatalf("reservation at %#x is not granule-aligned", base)
	}
	if _, err := st.Resolve(r.Sub(0, 16)); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatalf("Resolve of an unmapped granule = %v, want ErrUnknownRegion", err)
	}
	if err := st.Map(r.ID, 0, 4); err != nil {
		t.Fatal(err)
	}
	if c := counts(t, f); c != (fakeCounts{1, 4, 4}) || f.mappedBytes() != 4*g {
		t.Fatalf("four granules mapped: fake holds %+v, maps %d; want 4 physical allocations and mappings", c, f.mappedBytes())
	}
	if len(f.named(t, "cuMemSetAccess")) != 4 {
		t.Fatal("a granule was mapped without cuMemSetAccess")
	}
	if st.BytesAllocated() != 4*g || budget.Used() != 4*g {
		t.Fatalf("mapped: %d allocated, budget %d; want %d", st.BytesAllocated(), budget.Used(), 4*g)
	}
	res, err := st.Resolve(r.Sub(g+5, 2*g-5))
	if err != nil || res.Ptr != base+uintptr(g)+5 || res.Bytes != nil {
		t.Fatalf("Resolve across granules = %+v, %v; want Ptr base+g+5", res, err)
	}

	st.Unmap(r.ID, 1, 2)
	if c := counts(t, f); c.mappings != 4 || len(f.named(t, "cuMemUnmap")) != 0 {
		t.Fatalf("Unmap took effect before Flush: fake holds %+v", c)
	}
	if _, err := st.Resolve(r.Sub(g, 16)); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatalf("Resolve of a granule whose unmap is queued = %v, want ErrUnknownRegion", err)
	}
	if st.QueuedUnmaps() != 2 || st.BytesAllocated() != 4*g || budget.Used() != 4*g {
		t.Fatalf("queued: %d unmaps, %d allocated, budget %d; want 2 queued, still %d counted", st.QueuedUnmaps(), st.BytesAllocated(), budget.Used(), 4*g)
	}
	if got := st.MappedGranules(r.ID); !slices.Equal(got, []bool{true, false, false, true}) {
		t.Fatalf("MappedGranules = %v", got)
	}

	// Mapping granule 1 again cancels its unmap: no driver call.
	creates := len(f.named(t, "cuMemCreate"))
	if err := st.Map(r.ID, 1, 1); err != nil {
		t.Fatal(err)
	}
	if n := len(f.named(t, "cuMemCreate")); n != creates || st.QueuedUnmaps() != 1 || budget.Used() != 4*g {
		t.Fatalf("remapping a queued granule: %d new cuMemCreate, %d queued, budget %d; want the unmap cancelled", n-creates, st.QueuedUnmaps(), budget.Used())
	}
	if _, err := st.Resolve(r.Sub(g, 16)); err != nil {
		t.Fatalf("Resolve of the remapped granule: %v", err)
	}

	// While a queue records, Flush keeps the unmap.
	nq, err := b.NewQueue(0)
	if err != nil {
		t.Fatal(err)
	}
	q := nq.(stream.Recorder)
	if err := q.BeginCapture(1); err != nil {
		t.Fatal(err)
	}
	st.Flush()
	if n := len(f.named(t, "cuMemUnmap")); n != 0 || st.QueuedUnmaps() != 1 {
		t.Fatalf("while recording: %d unmaps, %d queued; want the unmap kept", n, st.QueuedUnmaps())
	}
	if _, err := q.EndCapture(1, nil); err != nil {
		t.Fatal(err)
	}
	f.logClear()
	st.Flush()
	calls := f.calls(t)
	unmap := indexOf(calls, "cuMemUnmap", 0)
	if sync := indexOf(calls, "cuCtxSynchronize", 0); sync < 0 || unmap < 0 || sync > unmap {
		t.Fatalf("Flush: cuCtxSynchronize at %d, cuMemUnmap at %d; want the wait first\n%v", sync, unmap, calls)
	}
	if got := calls[unmap].args["ptr"]; got != hex(base+2*uintptr(g)) {
		t.Fatalf("Flush unmapped %s, want granule 2 at %s", got, hex(base+2*uintptr(g)))
	}
	if c := counts(t, f); c != (fakeCounts{1, 3, 3}) || st.BytesAllocated() != 3*g || budget.Used() != 3*g || st.QueuedUnmaps() != 0 {
		t.Fatalf("after Flush: fake holds %+v, %d allocated, budget %d, %d queued", c, st.BytesAllocated(), budget.Used(), st.QueuedUnmaps())
	}

	// Dealloc queues the reservation whole; Flush unmaps the rest and frees
	// the address range.
	st.Dealloc(r.ID)
	if c := counts(t, f); c.reservations != 1 || c.mappings != 3 {
		t.Fatalf("Dealloc took effect before Flush: fake holds %+v", c)
	}
	if _, err := st.Resolve(r.Sub(0, 16)); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatalf("Resolve of a deallocated reservation = %v, want ErrUnknownRegion", err)
	}
	st.Flush()
	if c := counts(t, f); c != (fakeCounts{}) || st.BytesAllocated() != 0 || st.BytesReserved() != 0 || budget.Used() != 0 {
		t.Fatalf("after Flush: fake holds %+v, %d allocated, %d reserved, budget %d; want nothing", c, st.BytesAllocated(), st.BytesReserved(), budget.Used())
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// A refused cuMemCreate in the middle of a Map leaves nothing of the call
// mapped, the budget untouched; a refused budget calls no driver.
func TestGranularMapRefusalLeavesNothingHalfMapped(t *testing.T) {
	budget := storage.NewBudget(3 * fakeGranule)
	f, _, st := granularBackend(t, budget)
	g := st.Granule()
	r, err := st.Reserve(4 * g)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Map(r.ID, 0, 4); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Map beyond the budget = %v, want ErrOutOfMemory", err)
	}
	if n := len(f.named(t, "cuMemCreate")); n != 0 {
		t.Fatalf("%d cuMemCreate calls after the budget refused", n)
	}
	if err := st.Map(r.ID, 0, 1); err != nil {
		t.Fatal(err)
	}
	// The device holds room for one more granule: the second of this call
	// is refused, the one it created goes back.
	f.setTotalMem(2 * g)
	err = st.Map(r.ID, 1, 2)
	var de *DriverError
	if !errors.Is(err, storage.ErrOutOfMemory) || !errors.As(err, &de) || de.Op != "cuMemCreate" || de.Code != 2 {
		t.Fatalf("Map with the device full = %v, want a cuMemCreate CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if n := len(f.named(t, "cuMemCreate")); n != 3 {
		t.Fatalf("%d cuMemCreate calls, want 3 (one granule, then one created and one refused)", n)
	}
	if c := counts(t, f); c != (fakeCounts{1, 1, 1}) || f.mappedBytes() != g {
		t.Fatalf("after the refusal the fake holds %+v, maps %d; want only the first granule", c, f.mappedBytes())
	}
	if st.BytesAllocated() != g || budget.Used() != g || !slices.Equal(st.MappedGranules(r.ID), []bool{true, false, false, false}) {
		t.Fatalf("after the refusal: %d allocated, budget %d, mapped %v; want granule 0 alone", st.BytesAllocated(), budget.Used(), st.MappedGranules(r.ID))
	}
	f.setTotalMem(1 << 30)
	if err := st.Map(r.ID, 1, 2); err != nil {
		t.Fatalf("Map once the device has room: %v", err)
	}
	if c := counts(t, f); c.mappings != 3 || budget.Used() != 3*g {
		t.Fatalf("after the retry: fake holds %+v, budget %d", c, budget.Used())
	}
	if _, err := st.Reserve(0); err != nil {
		t.Fatalf("empty reservation: %v", err)
	}
	if err := st.Map(r.ID, 3, 2); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatalf("Map past the reservation = %v, want ErrUnknownRegion", err)
	}
}

// Through the device: a page whose granules the device refuses fails the
// allocation with ErrOutOfMemory (after the retry), maps nothing, and its
// reservation goes back at the next cleanup.
func TestGranularDeviceRefusalFailsTheAllocationAndMapsNothing(t *testing.T) {
	f := buildFake(t)
	d, b := openDevice(t, Options{Library: f.path}, gpumem.WithPageGranular(true))
	g := b.Granule()
	f.setTotalMem(2 * g) // two granules fit; a 5-granule buffer does not
	_, err := d.DefaultStream().Alloc(context.Background(), 5*g)
	if !errors.Is(err, gpumem.ErrOutOfMemory) {
		t.Fatalf("Alloc beyond the device = %v, want ErrOutOfMemory", err)
	}
	var de *DriverError
	if !errors.As(err, &de) || de.Op != "cuMemCreate" {
		t.Fatalf("Alloc beyond the device = %v, want the cuMemCreate refusal", err)
	}
	if c := counts(t, f); c.physicals != 0 || c.mappings != 0 || f.mappedBytes() != 0 || d.BytesAllocated() != 0 {
		t.Fatalf("refused allocation left the fake holding %+v, %d mapped; device counts %d", c, f.mappedBytes(), d.BytesAllocated())
	}
	if st := d.Stats(); st.ReserveRetries != 1 {
		t.Fatalf("ReserveRetries = %d, want 1", st.ReserveRetries)
	}
	if err := d.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := counts(t, f); c != (fakeCounts{}) {
		t.Fatalf("after Cleanup the fake holds %+v, want nothing", c)
	}
	f.setTotalMem(1 << 30)
	buf := mustAlloc(t, d.DefaultStream(), 5*g)
	mustWrite(t, buf, pattern(5*g, 15))
	wantBytes(t, buf, pattern(5*g, 15))
}

// Without the VMM symbols, on a device without virtual memory management,
// or with GPUMEM_CUDA_GRANULAR=0, storages are plain, and a device asking
// for granular pages backs them whole with cuMemAlloc_v2.
func TestStorageIsPlainWithoutVirtualMemory(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) *fakeDriver
	}{
		{"no VMM symbols", func(t *testing.T) *fakeDriver { return buildFake(t, "FAKE_NO_VMM") }},
		{"device without VMM", func(t *testing.T) *fakeDriver {
			f := buildFake(t)
			f.setAttribute(int32(attrVirtualMemoryManagementSupported), 0)
			return f
		}},
		{EnvGranular + "=0", func(t *testing.T) *fakeDriver {
			t.Setenv(EnvGranular, "0")
			return buildFake(t)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := c.setup(t)
			d, b := openDevice(t, Options{Library: f.path}, gpumem.WithPageGranular(true))
			if b.Granule() != 0 {
				t.Fatalf("Granule = %d, want 0", b.Granule())
			}
			st, err := b.NewStorage(nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := st.(storage.Granular); ok || storage.GranuleOf(st) != 0 {
				t.Fatalf("NewStorage = %T, want a plain storage", st)
			}
			buf := mustAlloc(t, d.DefaultStream(), 5*mib)
			mustWrite(t, buf, pattern(5*mib, 16))
			wantBytes(t, buf, pattern(5*mib, 16))
			if n := len(f.named(t, "cuMemAlloc_v2")); n == 0 || len(f.named(t, "cuMemAddressReserve")) != 0 {
				t.Fatalf("%d cuMemAlloc_v2 calls, %d reservations; want pages backed whole", n, len(f.named(t, "cuMemAddressReserve")))
			}
		})
	}
}
