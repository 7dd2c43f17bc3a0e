package pool

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// Helpers shared by the single-allocation pool tests (exclusive, direct,
// persistent). A test "frees" an allocation by releasing its user handle:
// only the slice's own handle is left (refs ≤ 1).

// singleReserve serves size the way the dynamic memory does: held room
// first, else a new page.
func singleReserve(t *testing.T, p Pool, st storage.Storage, size uint64) *handle.Handle {
	t.Helper()
	if h := p.TryReserve(st, size, nil, Bind{}); h != nil {
		return h
	}
	h, err := p.Alloc(st, size)
	if err != nil {
		t.Fatalf("reserve %d bytes: %v", size, err)
	}
	return h
}

// singleSlice returns the slice ref resolves to in p, failing the test when
// there is none or it belongs to another allocation (the identity check of
// design §3.4).
func singleSlice(t *testing.T, p Pool, ref handle.Ref) *Slice {
	t.Helper()
	loc := ref.Descriptor().Location()
	s := p.Slice(loc)
	if s == nil {
		t.Fatalf("no slice at %v", loc)
	}
	if s.Handle().Descriptor() != ref.Descriptor() {
		t.Fatalf("slice at %v belongs to allocation %d, want %d", loc, s.Handle().ID(), ref.Descriptor().ID())
	}
	return s
}

// singleFill writes b into every byte of ref's slice (Host storage).
func singleFill(t *testing.T, p Pool, st storage.Storage, ref handle.Ref, b byte) {
	t.Helper()
	res, err := st.Resolve(singleSlice(t, p, ref).Region)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	for i := range res.Bytes {
		res.Bytes[i] = b
	}
}

// singleExpectBytes checks that every byte of ref's slice is b.
func singleExpectBytes(t *testing.T, p Pool, st storage.Storage, ref handle.Ref, b byte) {
	t.Helper()
	res, err := st.Resolve(singleSlice(t, p, ref).Region)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if len(res.Bytes) == 0 {
		t.Fatalf("resolved to no bytes")
	}
	for i, got := range res.Bytes {
		if got != b {
			t.Fatalf("byte %d = %d, want %d", i, got, b)
		}
	}
}

// singleTaint marks the first n bytes of ref's slice with a new failure and
// returns it.
func singleTaint(t *testing.T, p Pool, g *handle.ErrorGraph, ref handle.Ref, n uint64) handle.FailureID {
	t.Helper()
	s := singleSlice(t, p, ref)
	f := g.Fail(errors.New("kernel failed"))
	tn := &handle.Taint{}
	tn.Mark(g, f, 0, n)
	s.SetTaint(tn)
	return f
}

const kib = 1024

func TestExclusivePagesFollowTheRunningAverageOfSizes(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	a := singleReserve(t, p, st, 512)
	b := singleReserve(t, p, st, 512)
	p.Check()

	for _, c := range []struct {
		h        *handle.Handle
		page     uint32
		pageSize uint64
	}{{a, 0, 16256}, {b, 1, 16096}} {
		if got := c.h.Location(); got.Pool() != 0 || got.Page() != c.page || got.Slice() != 0 {
			t.Errorf("allocation at %v, want pool 0 page %d slice 0", got, c.page)
		}
		if got := p.pages[c.page].allocSize; got != c.pageSize {
			t.Errorf("page %d holds %d bytes, want %d", c.page, got, c.pageSize)
		}
		s := singleSlice(t, p, c.h)
		if s.Region.Size != 512 || s.Padding != 0 {
			t.Errorf("page %d slice window %d + %d padding, want 512 + 0", c.page, s.Region.Size, s.Padding)
		}
	}
	r := p.Report()
	want := Usage{Allocations: 2, BytesInUse: 1024, BytesReserved: 16256 + 16096}
	if r.Usage != want {
		t.Errorf("usage %+v, want %+v", r.Usage, want)
	}
	if r.Pages != 2 || r.PagesPeak != 2 || r.LargestAlloc != 512 || r.Kind != (ExclusiveKind{MaxAlloc: 32 * kib}) {
		t.Errorf("report %+v", r)
	}
	if st.BytesAllocated() != 16256+16096 {
		t.Errorf("storage holds %d bytes, want %d", st.BytesAllocated(), 16256+16096)
	}
}

func TestExclusiveFreedPageIsReusedWithTheNewWindow(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	a := singleReserve(t, p, st, 512)
	b := singleReserve(t, p, st, 512)
	loc, id := a.Location(), singleSlice(t, p, a).Region.ID
	a.Release()

	c := p.TryReserve(st, 500, nil, Bind{})
	if c == nil {
		t.Fatal("a freed 16 KiB page did not serve 500 bytes")
	}
	if c.Location() != loc {
		t.Errorf("reuse at %v, want the freed page %v", c.Location(), loc)
	}
	s := singleSlice(t, p, c)
	if s.Region.ID != id || s.Region.Size != 500 || s.Padding != 12 {
		t.Errorf("reused slice %+v padding %d, want region %d size 500 padding 12", s.Region, s.Padding, id)
	}
	if p.Pages() != 2 || p.Report().PagesPeak != 2 {
		t.Errorf("%d pages (peak %d), want 2: reuse added a page", p.Pages(), p.Report().PagesPeak)
	}
	if p.TryReserve(st, 512, nil, Bind{}) != nil {
		t.Error("TryReserve served a page that is still live")
	}
	p.Check()
	b.Release()
	c.Release()
}

func TestExclusiveReuseTakesTheFreePageWithTheSmallestFreeCount(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	p0 := singleReserve(t, p, st, 1024)
	p1 := singleReserve(t, p, st, 1024)
	p2 := singleReserve(t, p, st, 1024)

	// Page 1 is reused twice (freeCount 4 → 3 → 2), page 0 never (4).
	loc1 := p1.Location()
	for range 2 {
		p1.Release()
		if p1 = p.TryReserve(st, 1024, nil, Bind{}); p1 == nil || p1.Location() != loc1 {
			t.Fatalf("the only free page was not reused")
		}
	}
	if p.pages[1].freeCount != 2 || p.pages[0].freeCount != 4 {
		t.Fatalf("freeCounts %d, %d, want 4, 2", p.pages[0].freeCount, p.pages[1].freeCount)
	}
	p0.Release()
	p1.Release()
	h := p.TryReserve(st, 1024, nil, Bind{})
	if h == nil || h.Location() != loc1 {
		t.Fatalf("reserve took %v, want page 1 (freeCount 2) over page 0 (freeCount 4)", h.Location())
	}
	h.Release()

	// Tie: pages 0 and 2 both at freeCount 4 → the lowest index wins.
	p.pages[1].freeCount = 4
	p2.Release()
	if h = p.TryReserve(st, 1024, nil, Bind{}); h == nil || h.Location().Page() != 0 {
		t.Fatalf("on a freeCount tie the reserve took %v, want page 0", h.Location())
	}
	if p.pages[0].freeCount != 3 {
		t.Errorf("freeCount after reuse %d, want 3", p.pages[0].freeCount)
	}
	h.Release()

	// A page smaller than the size never serves it, whatever its freeCount:
	// every page here holds about 16 KiB.
	p.pages[0].freeCount = 0
	if big := p.TryReserve(st, 20*kib, nil, Bind{}); big != nil {
		t.Fatalf("20 KiB took %v: no free page holds it", big.Location())
	}
	p.Check()
}

func TestExclusiveFreeCountSaturatesAtZero(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	h := singleReserve(t, p, st, 64)
	for range 6 {
		h.Release()
		h = p.TryReserve(st, 64, nil, Bind{})
	}
	if p.pages[0].freeCount != 0 {
		t.Errorf("freeCount %d after six reuses, want 0 (saturated)", p.pages[0].freeCount)
	}
	h.Release()
}

func TestExclusiveRefusesSizesAboveMaxAlloc(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(32*kib, 5000, 32, 3, Limits{})
	if !p.Accept(32*kib) || p.Accept(32*kib+1) {
		t.Errorf("Accept(32 KiB) = %v, Accept(32 KiB + 1) = %v, want true, false", p.Accept(32*kib), p.Accept(32*kib+1))
	}
	if p.MaxAlloc() != 32*kib || p.Index() != 3 {
		t.Errorf("MaxAlloc %d Index %d", p.MaxAlloc(), p.Index())
	}
	_, err := p.Alloc(st, 32*kib+1)
	if !errors.Is(err, ErrBufferTooBig) {
		t.Fatalf("Alloc above maxAlloc: %v, want ErrBufferTooBig", err)
	}
	if !strings.Contains(err.Error(), "32769") || !strings.Contains(err.Error(), "32768") {
		t.Errorf("error %q does not name the size and the limit", err)
	}
	if p.Pages() != 0 || st.BytesAllocated() != 0 {
		t.Errorf("a refused Alloc left %d pages, %d bytes", p.Pages(), st.BytesAllocated())
	}
	// A size the pool does not accept does not move the running average.
	if p.TryReserve(st, 1<<30, nil, Bind{}) != nil {
		t.Fatal("TryReserve served a size above maxAlloc")
	}
	if h := singleReserve(t, p, st, 512); p.pages[0].allocSize != 16256 {
		t.Errorf("page of %d bytes, want 16256: a refused size moved the average", p.pages[0].allocSize)
	} else {
		h.Release()
	}
}

func TestExclusiveAllocRefusedByStorageChangesNothing(t *testing.T) {
	st := hoststorage.NewFaulty(hoststorage.NewHost(32, nil))
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	st.RefuseNextAllocs(1)
	if _, err := p.Alloc(st, 512); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Alloc on a refusing storage: %v, want ErrOutOfMemory", err)
	}
	if p.Pages() != 0 || p.Report().PagesPeak != 0 || p.Report().LargestAlloc != 0 {
		t.Errorf("refused Alloc changed the pool: %+v", p.Report())
	}
	h := singleReserve(t, p, st, 512)
	if h.Location().Page() != 0 {
		t.Errorf("first page after a refusal at %v, want page 0", h.Location())
	}
	h.Release()
}

// A period of 5000 checks every 1000 reservations. A page freed and never
// reused starts at freeCount 4 and goes back at the first check after its
// free; a page that was reused once (freeCount 3) needs two checks.
func TestExclusivePeriodicCleanupReleasesAPageAtTheFirstCheckAfterItsFree(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	a := singleReserve(t, p, st, 1024)
	b := singleReserve(t, p, st, 1024)
	c := singleReserve(t, p, st, 1024)
	singleFill(t, p, st, c, 7)
	aSize := p.pages[0].allocSize
	held := st.BytesAllocated()
	a.Release()

	p.Cleanup(st, 999, Periodic, nil)
	if p.Pages() != 3 || st.BytesAllocated() != held {
		t.Fatalf("cleanup at reservation 999 (before the first check) released a page: %d pages", p.Pages())
	}
	if p.pages[0].freeCount != 4 {
		t.Fatalf("a skipped cleanup aged the free page to %d", p.pages[0].freeCount)
	}
	p.Cleanup(st, 1000, Periodic, nil)
	if p.Pages() != 2 || st.BytesAllocated() != held-aSize {
		t.Fatalf("after the check at 1000: %d pages, %d bytes held; want 2 pages, %d bytes", p.Pages(), st.BytesAllocated(), held-aSize)
	}
	// Survivors renumbered: b to page 0, c to page 1; both still resolve.
	if b.Location().Page() != 0 || c.Location().Page() != 1 {
		t.Errorf("survivors at %v and %v, want pages 0 and 1", b.Location(), c.Location())
	}
	singleSlice(t, p, b)
	singleExpectBytes(t, p, st, c, 7)
	p.Check()

	// b is reused once (freeCount 4 → 3), then freed: two checks to go back.
	b.Release()
	if b = p.TryReserve(st, 1024, nil, Bind{}); b == nil {
		t.Fatal("the freed page was not reused")
	}
	b.Release()
	p.Cleanup(st, 1500, Periodic, nil) // 500 since the last check: not a check
	if p.pages[0].freeCount != 3 {
		t.Fatalf("freeCount %d after a skipped check, want 3", p.pages[0].freeCount)
	}
	p.Cleanup(st, 2000, Periodic, nil)
	if p.Pages() != 2 || p.pages[0].freeCount != 4 {
		t.Fatalf("after one check the reused page: %d pages, freeCount %d; want kept, 4", p.Pages(), p.pages[0].freeCount)
	}
	p.Cleanup(st, 3000, Periodic, nil)
	if p.Pages() != 1 || c.Location().Page() != 0 {
		t.Fatalf("after the second check: %d pages, c at %v; want 1 page, c at page 0", p.Pages(), c.Location())
	}
	singleExpectBytes(t, p, st, c, 7)
	p.Check()

	// A live page never ages.
	for nr := uint64(4000); nr <= 20000; nr += 1000 {
		p.Cleanup(st, nr, Periodic, nil)
	}
	if p.Pages() != 1 || p.pages[0].freeCount != 4 {
		t.Errorf("live page: %d pages, freeCount %d; want kept, 4", p.Pages(), p.pages[0].freeCount)
	}
	c.Release()
}

// design §12.5 #39, pool level: three 1 KiB pages, two freed; an Explicit
// cleanup releases both at once and renumbers the survivor, whose held
// binding still resolves to its bytes.
func TestExclusiveExplicitCleanupReleasesEveryFreePageAndRenumbersTheSurvivor(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	a := singleReserve(t, p, st, 1024)
	b := singleReserve(t, p, st, 1024)
	c := singleReserve(t, p, st, 1024)
	singleFill(t, p, st, c, 42)
	bind := c.Binding()
	stale := c.Location()
	before := p.Report().Usage.BytesReserved
	cSize := p.pages[2].allocSize
	// b is reused once (freeCount 3): aging alone would keep it; Explicit
	// releases it anyway.
	b.Release()
	if b = p.TryReserve(st, 1024, nil, Bind{}); b == nil || b.Location().Page() != 1 || p.pages[1].freeCount != 3 {
		t.Fatal("the freed page 1 was not reused")
	}
	b.Release()
	a.Release()

	p.Cleanup(st, 1, Explicit, nil) // Explicit runs whatever allocNr says
	if p.Pages() != 1 {
		t.Fatalf("%d pages after an Explicit cleanup, want 1", p.Pages())
	}
	if got := p.Report().Usage.BytesReserved; got != cSize || got >= before {
		t.Errorf("reserved %d bytes, want %d (was %d)", got, cSize, before)
	}
	if st.BytesAllocated() != cSize {
		t.Errorf("storage holds %d bytes, want %d", st.BytesAllocated(), cSize)
	}
	if bind.Location().Page() != 0 || stale.Page() != 2 {
		t.Errorf("survivor at %v (was %v), want page 0", bind.Location(), stale)
	}
	singleExpectBytes(t, p, st, bind, 42)
	if p.Slice(stale) != nil {
		t.Errorf("the survivor's old location %v still names a slice", stale)
	}
	p.Check()
	bind.Release()
	c.Release()
	p.Cleanup(st, 2, Explicit, nil)
	if p.Pages() != 0 || st.BytesAllocated() != 0 || p.Report().Usage.BytesReserved != 0 {
		t.Errorf("after freeing everything: %d pages, %d bytes held", p.Pages(), st.BytesAllocated())
	}
	if p.Report().PagesPeak != 3 {
		t.Errorf("PagesPeak %d, want 3", p.Report().PagesPeak)
	}
}

// design §12.5 #40, pool level: a guarded freed allocation's page is neither
// reused nor released, and a guard never makes CanMut false.
func TestExclusiveGuardedPageIsNeitherReusedNorReleased(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	a := singleReserve(t, p, st, 1024)
	guard, ok := p.Guard(a.Location())
	if !ok {
		t.Fatal("Guard found no page at a live allocation")
	}
	if !a.CanMut() {
		t.Error("a guard made CanMut false")
	}
	a.Release()
	reserved := p.Report().Usage.BytesReserved

	if h := p.TryReserve(st, 1024, nil, Bind{}); h != nil {
		t.Fatalf("the guarded page served a reservation at %v", h.Location())
	}
	b := singleReserve(t, p, st, 1024)
	if p.Pages() != 2 || p.Report().Usage.BytesReserved <= reserved {
		t.Fatalf("the next 1 KiB did not grow the pool: %d pages, %d bytes", p.Pages(), p.Report().Usage.BytesReserved)
	}
	for nr := uint64(1000); nr <= 10000; nr += 1000 {
		p.Cleanup(st, nr, Periodic, nil)
	}
	p.Cleanup(st, 10001, Explicit, nil)
	if p.Pages() != 2 {
		t.Fatalf("cleanups released the guarded page: %d pages", p.Pages())
	}
	guard.Release()
	guard.Release() // idempotent
	b.Release()
	p.Cleanup(st, 10002, Explicit, nil)
	if p.Pages() != 0 || p.Report().Usage.BytesReserved != 0 || st.BytesAllocated() != 0 {
		t.Errorf("after the guard went: %d pages, %d reserved, %d held", p.Pages(), p.Report().Usage.BytesReserved, st.BytesAllocated())
	}
	if _, ok := p.Guard(handle.MustLocation(0, 5, 0)); ok {
		t.Error("Guard found a page beyond the pool")
	}
	if _, ok := p.Guard(handle.MustLocation(1, 0, 0)); ok {
		t.Error("Guard accepted another pool's location")
	}
}

func TestExclusiveReleasedPageDropsItsFailureMarks(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	g := handle.NewErrorGraph()
	p := NewExclusive(32*kib, 5000, 32, 0, Limits{})
	a := singleReserve(t, p, st, 1024)
	f := singleTaint(t, p, g, a, 16)
	a.Release()
	p.Cleanup(st, 0, Explicit, g)
	if _, live := g.Err(f); live || g.Live() != 0 {
		t.Errorf("failure %d still live (%d live) after its page was released", f, g.Live())
	}
}

// The adaptive memory's tiny pool: zero-byte allocations only; only an
// Explicit cleanup releases its free pages.
func TestExclusiveTinyPoolReleasesOnlyOnExplicitCleanup(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := NewExclusive(0, math.MaxUint64, 32, 0, Limits{})
	if p.Accept(1) || !p.Accept(0) {
		t.Fatal("tiny pool must accept exactly size 0")
	}
	h := singleReserve(t, p, st, 0)
	if s := singleSlice(t, p, h); s.EffectiveSize() != 0 || p.pages[0].allocSize != 0 {
		t.Errorf("zero-byte allocation took %d bytes", p.pages[0].allocSize)
	}
	h.Release()
	p.Cleanup(st, 1<<40, Periodic, nil)
	if p.Pages() != 1 {
		t.Fatal("a periodic cleanup released a tiny page")
	}
	p.Cleanup(st, 1<<40, Explicit, nil)
	if p.Pages() != 0 {
		t.Fatal("an Explicit cleanup kept a free tiny page")
	}
}

// design §12.4 #25, regression: page indices must not wrap. 70,000 live pages
// is more than a 16-bit index holds; page 65,536 must not alias page 0.
func TestExclusivePageIndicesDoNotWrapPast65536(t *testing.T) {
	const n = 70_000
	st := hoststorage.NewSim(32, nil)
	p := NewExclusive(4*kib, 5000, 32, 7, Limits{})
	hs := make([]*handle.Handle, n)
	seen := make(map[storage.ID]int, n)
	for i := range hs {
		h, err := p.Alloc(st, 4*kib)
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		hs[i] = h
	}
	for i, h := range hs {
		loc := h.Location()
		if loc.Pool() != 7 || int(loc.Page()) != i || loc.Slice() != 0 {
			t.Fatalf("allocation %d at %v, want pool 7 page %d slice 0", i, loc, i)
		}
		s := singleSlice(t, p, h)
		if j, dup := seen[s.Region.ID]; dup {
			t.Fatalf("allocations %d and %d share region %d", j, i, s.Region.ID)
		}
		seen[s.Region.ID] = i
		if _, err := st.Resolve(s.Region); err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
	}
	if p.Slice(hs[65536].Location()) == p.Slice(hs[0].Location()) {
		t.Fatal("page 65,536 resolves to page 0")
	}
	if st.BytesAllocated() != n*4*kib || p.Report().PagesPeak != n {
		t.Errorf("%d bytes held, peak %d pages; want %d, %d", st.BytesAllocated(), p.Report().PagesPeak, n*4*kib, n)
	}
	// Freeing page 65,536 makes exactly that page reusable.
	loc := hs[65536].Location()
	hs[65536].Release()
	if h := p.TryReserve(st, 4*kib, nil, Bind{}); h == nil || h.Location() != loc {
		t.Fatalf("the freed page 65,536 was not the one reused")
	} else {
		hs[65536] = h
	}
	for _, h := range hs {
		h.Release()
	}
}

func TestExclusiveRefusesThePageBeyondItsLimitChangingNothing(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewExclusive(4*kib, 5000, 32, 0, Limits{MaxPages: 1000})
	hs := make([]*handle.Handle, 1000)
	for i := range hs {
		h, err := p.Alloc(st, 4*kib)
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		hs[i] = h
	}
	held := st.BytesAllocated()
	_, err := p.Alloc(st, 4*kib)
	if !errors.Is(err, handle.ErrIndexOverflow) {
		t.Fatalf("page 1001: %v, want ErrIndexOverflow", err)
	}
	if !strings.Contains(err.Error(), "1000") {
		t.Errorf("error %q does not name the page count", err)
	}
	if p.Pages() != 1000 || st.BytesAllocated() != held {
		t.Errorf("refused page changed the pool: %d pages, %d bytes", p.Pages(), st.BytesAllocated())
	}
	for i, h := range hs {
		if int(h.Location().Page()) != i {
			t.Fatalf("allocation %d moved to %v", i, h.Location())
		}
		singleSlice(t, p, h)
	}
	p.Check()
	for _, h := range hs {
		h.Release()
	}
}
