package memory_test

import (
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
)

var exclusivePages = memory.Config{Dynamic: memory.ExclusivePages}

// design §5.1 example.
func TestBucketSizesFor128MiBMaxPageAtAlignment32(t *testing.T) {
	got := memory.BucketSizes(128*mib, 32)
	if len(got) != memory.MaxBuckets {
		t.Fatalf("%d buckets, want %d: %v", len(got), memory.MaxBuckets, got)
	}
	head := []uint64{32768, 47072, 67552, 96992}
	tail := []uint64{65116608, 93486912, 134217728}
	if !slices.Equal(got[:4], head) || !slices.Equal(got[len(got)-3:], tail) {
		t.Fatalf("buckets = %v, want %v … %v", got, head, tail)
	}
	for i, s := range got {
		if s%32 != 0 || (i > 0 && s <= got[i-1]) {
			t.Fatalf("bucket %d = %d: want ascending multiples of 32 (%v)", i, s, got)
		}
	}
}

func TestBucketSizesDropDuplicatesAndEndAtRoundedMax(t *testing.T) {
	// max 64 KiB: 24 log-uniform steps from 32 KiB to 64 KiB rounded to 4 KiB
	// collapse into few distinct sizes.
	got := memory.BucketSizes(64*kib+100, 4*kib)
	if got[0] != 32*kib || got[len(got)-1] != 64*kib {
		t.Fatalf("buckets = %v, want 32 KiB … 64 KiB", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] == got[i-1] {
			t.Fatalf("duplicate bucket %d in %v", got[i], got)
		}
	}
	if len(got) >= memory.MaxBuckets {
		t.Fatalf("%d buckets, want duplicates dropped: %v", len(got), got)
	}
}

func exclusiveBucket(t *testing.T, m *memory.Manager, h handle.Ref) *pool.Exclusive {
	t.Helper()
	p, ok := m.Dynamic().Pool(h.Descriptor().Location().Pool()).(*pool.Exclusive)
	if !ok {
		t.Fatalf("allocation at %v is not on an exclusive bucket", h.Descriptor().Location())
	}
	return p
}

// Scenario 39.
func TestExplicitCleanupReleasesFreeExclusivePagesAndRenumbersSurvivor(t *testing.T) {
	m := newHostManager(t, props128(), exclusivePages, 0)
	var hs []*handle.Handle
	for i := 0; i < 3; i++ {
		h := alloc(t, m, 1*kib, memory.Allow)
		if loc := h.Location(); loc.Pool() != 0 || loc.Page() != uint32(i) {
			t.Fatalf("allocation %d at %v, want bucket 0 page %d", i, loc, i)
		}
		hs = append(hs, h)
	}
	// avg 16,384 → 16,230.4 → 16,078.336 → 15,927.79: pages 16,256 + 16,096 + 15,936.
	if got := usage(m).BytesReserved; got != 16256+16096+15936 {
		t.Fatalf("reserved = %d, want 48,288", got)
	}
	c := hs[2]
	fill(t, m, c, 0xc3)
	b := c.Binding()
	defer b.Release()
	releaseAll(hs[0], hs[1])

	m.Cleanup(pool.Explicit)
	if loc := b.Location(); loc.Page() != 0 {
		t.Fatalf("survivor at %v, want page 0", loc)
	}
	wantBytes(t, m, b, 1*kib, 0xc3)
	if got := usage(m).BytesReserved; got != 15936 {
		t.Fatalf("reserved after cleanup = %d, want 15,936", got)
	}
	if got := m.BytesAllocated(); got != 15936 {
		t.Fatalf("allocated after cleanup = %d, want 15,936", got)
	}
	c.Release()
}

// Scenario 40.
func TestGuardedExclusivePageIsNotReusedOrReleasedUntilGuardGoes(t *testing.T) {
	m := newHostManager(t, props128(), exclusivePages, 0)
	a := alloc(t, m, 1*kib, memory.Allow)
	g, ok := m.Guard(a.Location())
	if !ok {
		t.Fatalf("no guard for %v", a.Location())
	}
	if !a.CanMut() {
		t.Fatalf("an allocation guard made CanMut false")
	}
	guarded := a.Location()
	reserved := usage(m).BytesReserved
	a.Release()

	b := alloc(t, m, 1*kib, memory.Allow)
	if b.Location() == guarded {
		t.Fatalf("new allocation reused the guarded page %v", guarded)
	}
	grown := usage(m).BytesReserved
	if grown <= reserved {
		t.Fatalf("reserved %d → %d, want it to grow", reserved, grown)
	}
	m.Cleanup(pool.Explicit)
	if got := usage(m).BytesReserved; got != grown {
		t.Fatalf("explicit cleanup changed reserved %d → %d; want the guarded page kept", grown, got)
	}
	if got := exclusiveBucket(t, m, b).Pages(); got != 2 {
		t.Fatalf("bucket pages = %d, want 2", got)
	}

	g.Release()
	g.Release() // idempotent
	b.Release()
	m.Cleanup(pool.Explicit)
	if got := usage(m).BytesReserved; got != 0 {
		t.Fatalf("reserved = %d after releasing the guard and freeing everything, want 0", got)
	}
	if got := m.BytesAllocated(); got != 0 {
		t.Fatalf("allocated = %d, want 0", got)
	}
}

// Scenario 41 (exclusive pages).
func TestAlignmentFiftyPadsFortyBytesByTenOnExclusivePages(t *testing.T) {
	p := memory.Properties{MaxPageSize: 128 * mib, Alignment: 50}
	m := newManagerOn(t, hoststorage.NewHost(50, nil), p, exclusivePages)
	h := alloc(t, m, 40, memory.Allow)
	defer h.Release()
	s, err := m.Find(h)
	if err != nil {
		t.Fatal(err)
	}
	if s.Region.Size != 40 || s.Padding != 10 {
		t.Fatalf("slice size %d padding %d, want 40 and 10", s.Region.Size, s.Padding)
	}
	if u := usage(m); u.BytesPadding != 10 || u.BytesInUse != 40 || u.BytesReserved%50 != 0 {
		t.Fatalf("usage = %+v, want 40 in use, 10 padding, reserved a multiple of 50", u)
	}
}

// Scenario 42 on exclusive pages (design §12.4 #20).
func TestTwo512ByteExclusivePagesHold16256And16096Bytes(t *testing.T) {
	m := newHostManager(t, props128(), exclusivePages, 0)
	a := alloc(t, m, 512, memory.Allow)
	defer a.Release()
	b := alloc(t, m, 512, memory.Allow)
	want := pool.Usage{Allocations: 2, BytesInUse: 1024, BytesReserved: 16256 + 16096}
	if got := usage(m); got != want {
		t.Fatalf("usage = %+v, want %+v", got, want)
	}
	freed := b.Location()
	b.Release()
	b = alloc(t, m, 512, memory.Allow)
	defer b.Release()
	if b.Location() != freed {
		t.Fatalf("re-reserved 512 B at %v, want the freed page %v", b.Location(), freed)
	}
	if got := usage(m); got != want {
		t.Fatalf("usage after re-reserve = %+v, want %+v", got, want)
	}
	if got := exclusiveBucket(t, m, a).Pages(); got != 2 {
		t.Fatalf("bucket pages = %d, want 2", got)
	}
}

// Scenario 43 on exclusive pages.
func TestTwoOneAndAHalfMiBExclusivePagesHoldExactlyTheirSize(t *testing.T) {
	m := newHostManager(t, props128(), exclusivePages, 0)
	a := alloc(t, m, 3*mib/2, memory.Allow)
	defer a.Release()
	b := alloc(t, m, 3*mib/2, memory.Allow)
	defer b.Release()
	// Bucket 11 (1,750,272 B): avg ≈ 889,021 < 1.5 MiB, so each page is
	// exactly 1,572,864 bytes.
	if a.Location().Pool() != 11 || b.Location().Pool() != 11 || a.Location() == b.Location() {
		t.Fatalf("1.5 MiB allocations at %v and %v, want two pages of bucket 11", a.Location(), b.Location())
	}
	want := pool.Usage{Allocations: 2, BytesInUse: 3 * mib, BytesReserved: 3145728}
	if got := usage(m); got != want {
		t.Fatalf("usage = %+v, want %+v", got, want)
	}
}

// Scenario 45 on exclusive pages.
func TestExclusivePagesReuseSameSizesWithoutGrowingReserved(t *testing.T) {
	m := newHostManager(t, props128(), exclusivePages, 0)
	sizes := []uint64{4 * kib, 4 * mib}
	var hs []*handle.Handle
	for _, s := range sizes {
		hs = append(hs, alloc(t, m, s, memory.Allow))
	}
	// 4 KiB: bucket 0, avg 16,261.12 → 16,288 B. 4 MiB: bucket 14
	// (5,179,392 B), avg below 4 MiB → exactly 4,194,304 B.
	if hs[0].Location().Pool() != 0 || hs[1].Location().Pool() != 14 {
		t.Fatalf("4 KiB on bucket %d, 4 MiB on bucket %d; want 0 and 14", hs[0].Location().Pool(), hs[1].Location().Pool())
	}
	want := pool.Usage{Allocations: 2, BytesInUse: 4*kib + 4*mib, BytesReserved: 16288 + 4194304}
	if got := usage(m); got != want {
		t.Fatalf("usage = %+v, want %+v", got, want)
	}
	for cycle := 0; cycle < 3; cycle++ {
		releaseAll(hs...)
		hs = hs[:0]
		for _, s := range sizes {
			hs = append(hs, alloc(t, m, s, memory.Allow))
		}
		if got := usage(m); got != want {
			t.Fatalf("cycle %d: usage = %+v, want %+v", cycle, got, want)
		}
	}
	releaseAll(hs...)
}

func TestExclusivePagesNeverWantRelocation(t *testing.T) {
	m := newHostManager(t, memory.Properties{MaxPageSize: 128 * mib, Alignment: 32, MaxMemory: 1 * mib}, exclusivePages, 0)
	h := alloc(t, m, 4*mib, memory.Allow)
	defer h.Release()
	if m.HasOutdated() {
		t.Fatalf("exclusive pages report something outdated")
	}
	wantNoRelocation(t, m)
	if out := m.Relocate(relocation.HostCopies{}, relocation.MemoryPressure); out.Kind != relocation.NothingToMove {
		t.Fatalf("outcome = %+v, want NothingToMove", out)
	}
	// Above the max page: a dedicated allocation, not an exclusive page.
	big := alloc(t, m, 128*mib+1, memory.Allow)
	defer big.Release()
	if p := big.Location().Pool(); p != memory.DedicatedIndex {
		t.Fatalf("128 MiB + 1 on pool %d, want the dedicated pool", p)
	}
}

// Scenario 47: a location copied aside goes stale when a cleanup
// renumbers pages; looking it up must never reach another allocation.
func TestStaleExclusivePageIndexNeverResolvesToAnotherAllocation(t *testing.T) {
	m := newHostManager(t, props128(), exclusivePages, 0)
	a := alloc(t, m, 1*kib, memory.Allow)
	b := alloc(t, m, 1*kib, memory.Allow)
	c := alloc(t, m, 1*kib, memory.Allow)
	defer c.Release()
	for i, h := range []*handle.Handle{a, b, c} {
		if loc := h.Location(); loc.Pool() != 0 || loc.Page() != uint32(i) {
			t.Fatalf("buffer %d at %v, want bucket 0 page %d", i, loc, i)
		}
	}
	fill(t, m, c, 0xcc)
	deferred := c.Binding() // held in a second stream's deferred list
	defer deferred.Release()
	stale := c.Location()

	releaseAll(a, b)
	m.Cleanup(pool.Explicit)
	if got := deferred.Location(); got.Page() != 0 {
		t.Fatalf("C at %v after cleanup, want page 0", got)
	}
	wantBytes(t, m, deferred, 1*kib, 0xcc)

	// New 1 KiB buffers fill pages 1 and 2, so the stale index names a live
	// page again.
	d := alloc(t, m, 1*kib, memory.Allow)
	defer d.Release()
	fill(t, m, d, 0xdd)
	e := alloc(t, m, 1*kib, memory.Allow)
	defer e.Release()
	fill(t, m, e, 0xee)
	if s, err := m.FindAt(stale, e); err != nil || s.Handle().Descriptor() != e.Descriptor() {
		t.Fatalf("stale location %v does not hold E (%v): the check below would be vacuous", stale, err)
	}

	for _, ref := range []handle.Ref{c, deferred} {
		s, err := m.FindAt(stale, ref)
		switch {
		case err != nil:
			wantErrIs(t, err, handle.ErrNotFound)
		case s.Handle().Descriptor() != c.Descriptor():
			t.Fatalf("stale location %v with C's descriptor resolved to allocation %d", stale, s.Handle().ID())
		}
	}
	wantBytes(t, m, deferred, 1*kib, 0xcc)
	wantBytes(t, m, d, 1*kib, 0xdd)
}
