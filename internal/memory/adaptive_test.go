package memory_test

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// Scenario 28, first sentence.
func TestEmptiedOutdatedPageSurvivesAddOnlyAndGoesOnNextAllow(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{}, 0)
	a := arena(t, m)
	live, large := growWithLive(t, m, 1*mib)
	defer large.Release()
	live[0].Release()

	addOnly := alloc(t, m, 512*kib, memory.AddOnly)
	defer addOnly.Release()
	if a.OutdatedPages() != 1 || m.BytesAllocated() != 12*mib {
		t.Fatalf("after AddOnly: %d outdated pages, %d bytes allocated; want the emptied 2 MiB page kept", a.OutdatedPages(), m.BytesAllocated())
	}
	allow := alloc(t, m, 256*kib, memory.Allow)
	defer allow.Release()
	if m.HasOutdated() || a.OutdatedPages() != 0 || m.BytesAllocated() != 10*mib {
		t.Fatalf("after Allow: HasOutdated %v, %d outdated pages, %d bytes allocated; want the page gone", m.HasOutdated(), a.OutdatedPages(), m.BytesAllocated())
	}
}

// Scenario 28, second sentence.
func TestOutdatedPageGoesOnAllowAfterItsLastAllocationIsFreed(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{}, 0)
	a := arena(t, m)
	live, large := growWithLive(t, m, 512*kib, 256*kib)
	defer large.Release()

	live[0].Release()
	h := alloc(t, m, 128*kib, memory.Allow)
	defer h.Release()
	if a.OutdatedPages() != 1 {
		t.Fatalf("outdated page released while it still holds an allocation")
	}
	if _, err := m.Find(live[1]); err != nil {
		t.Fatalf("surviving allocation on the outdated page no longer resolves: %v", err)
	}

	live[1].Release()
	h2 := alloc(t, m, 128*kib, memory.Allow)
	defer h2.Release()
	if m.HasOutdated() || m.BytesAllocated() != 10*mib {
		t.Fatalf("HasOutdated %v, %d bytes allocated; want the outdated page gone", m.HasOutdated(), m.BytesAllocated())
	}
}

// Scenario 29: 9 MiB grows the arena to the smallest page in 2 MiB steps
// that holds it (the 1 MiB served before is too thin a history to tile);
// 6 MiB fits that page size and takes a second page of it.
func TestArenaPageSizeFollowsLargestAllocation(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{}, 0)
	a := arena(t, m)
	for _, step := range []struct{ size, pageSize uint64 }{
		{1 * mib, 2 * mib},
		{9 * mib, 10 * mib},
		{6 * mib, 10 * mib},
	} {
		h := alloc(t, m, step.size, memory.Allow)
		defer h.Release()
		if got := a.PageSize(); got != step.pageSize {
			t.Fatalf("after %d bytes: page size %d, want %d", step.size, got, step.pageSize)
		}
		if got := arena(t, m).Pool(h.Location().Pool()).PageSize(); got != step.pageSize {
			t.Fatalf("%d bytes placed on a %d-byte page, want %d", step.size, got, step.pageSize)
		}
	}
	if got := m.Stats().Growths; got != 1 {
		t.Fatalf("growths = %d, want 1", got)
	}
}

// Scenario 29, max page 16 MiB: the arena grows to the max page, and one
// byte more is no longer ErrBufferTooBig but a dedicated allocation of its
// own (issue 24: any size the device has the bytes for), leaving the
// arena's page size and pages as they were.
func TestArenaGrowsToMaxPageAndServesOneByteMoreDedicated(t *testing.T) {
	m := newHostManager(t, memory.Properties{MaxPageSize: 16 * mib, Alignment: 32}, memory.Config{}, 0)
	h := alloc(t, m, 16*mib, memory.Allow)
	defer h.Release()
	if got := arena(t, m).PageSize(); got != 16*mib {
		t.Fatalf("page size = %d, want 16 MiB", got)
	}
	pages := arena(t, m).Current().Pages()
	big := alloc(t, m, 16*mib+1, memory.Allow)
	if p := big.Location().Pool(); p != memory.DedicatedIndex {
		t.Fatalf("16 MiB + 1 on pool %d, want the dedicated pool %d", p, memory.DedicatedIndex)
	}
	if got := arena(t, m).PageSize(); got != 16*mib || arena(t, m).Current().Pages() != pages {
		t.Fatalf("the arena changed for a dedicated allocation: page %d, %d pages", got, arena(t, m).Current().Pages())
	}
	if d := m.Report().Dedicated.Usage; d.BytesInUse != 16*mib+1 {
		t.Fatalf("dedicated pool holds %d bytes in use, want 16 MiB + 1", d.BytesInUse)
	}
	big.Release()
	// A held reservation of that size (Forbidden) finds the freed
	// dedicated slot or nothing: never ErrBufferTooBig.
	if _, err := tryAlloc(m, 16*mib+1, memory.Forbidden); err != nil && errors.Is(err, pool.ErrBufferTooBig) {
		t.Fatalf("Forbid above the max page: %v", err)
	}
}

// Scenario 29, last sentence.
func TestHugeRequestIsTooBigAndChangesNothing(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{}, 0)
	a := arena(t, m)
	first := alloc(t, m, 1*mib, memory.Allow)
	defer first.Release()
	before, pagesBefore, allocated := usage(m), a.Current().Pages(), m.BytesAllocated()

	_, err := tryAlloc(m, 1<<50, memory.Allow)
	wantErrIs(t, err, storage.ErrOutOfMemory) // a dedicated allocation the machine cannot hold
	if usage(m) != before || a.Current().Pages() != pagesBefore || a.PageSize() != 2*mib || m.HasOutdated() {
		t.Fatalf("layout changed by a too-big request")
	}

	next := alloc(t, m, 1*mib, memory.Allow)
	defer next.Release()
	if !samePage(first.Location(), next.Location()) || m.BytesAllocated() != allocated {
		t.Fatalf("next 1 MiB at %v (first at %v), %d bytes allocated; want the existing page", next.Location(), first.Location(), m.BytesAllocated())
	}
}

// Scenario 30.
func TestNewAllocationAfterGrowthSkipsOutdatedPageWithRoom(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{}, 0)
	a := arena(t, m)
	live, large := growWithLive(t, m, 1*mib) // 1 MiB still free on the outdated page
	defer releaseAll(live[0], large)
	outdated := live[0].Location().Pool()

	h := alloc(t, m, 1*mib, memory.Allow)
	defer h.Release()
	if got := h.Location().Pool(); got == outdated || got != a.Current().Index() {
		t.Fatalf("new 1 MiB on pool %d; outdated pool %d, current %d", got, outdated, a.Current().Index())
	}
	if !samePage(h.Location(), large.Location()) {
		t.Fatalf("new 1 MiB at %v, want the current page %v", h.Location(), large.Location())
	}
}

// Scenario 31.
func TestForbiddenServesHeldRoomOnlyAndAddsNoPage(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{}, 0)
	a := arena(t, m)
	first := alloc(t, m, 1*mib, memory.Allow)
	defer first.Release()
	allocNr, allocated := m.Stats().AllocNr, m.BytesAllocated()

	held := alloc(t, m, 1*mib, memory.Forbidden)
	defer held.Release()
	if !samePage(held.Location(), first.Location()) {
		t.Fatalf("Forbidden 1 MiB at %v, want the held page %v", held.Location(), first.Location())
	}

	_, err := tryAlloc(m, 4*mib, memory.Forbidden)
	wantErrIs(t, err, memory.ErrPageUpdateForbidden)
	if memory.MaySucceedAfterReclaim(err) {
		t.Fatalf("MaySucceedAfterReclaim(%v) = true", err)
	}
	// The page is full now: even 1 MiB has no held room.
	_, err = tryAlloc(m, 1*mib, memory.Forbidden)
	wantErrIs(t, err, memory.ErrPageUpdateForbidden)

	if m.BytesAllocated() != allocated || a.Current().Pages() != 1 || a.PageSize() != 2*mib || m.HasOutdated() {
		t.Fatalf("Forbidden reservations changed the layout: %d bytes, %d pages, page size %d", m.BytesAllocated(), a.Current().Pages(), a.PageSize())
	}
	if got := m.Stats().AllocNr; got != allocNr {
		t.Fatalf("allocNr = %d after Forbidden reservations, want %d", got, allocNr)
	}
}

// Scenario 33.
func TestFreedRoomOnGuardedPageIsNotReused(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{}, 0)
	a := arena(t, m)
	h := alloc(t, m, 1*mib, memory.Allow)
	g, ok := m.Guard(h.Location())
	if !ok {
		t.Fatalf("no guard")
	}
	defer g.Release()
	if !h.CanMut() {
		t.Fatalf("a page guard made CanMut false")
	}
	guardedPage := h.Location()
	h.Release()

	next := alloc(t, m, 1*mib, memory.Allow)
	defer next.Release()
	if samePage(next.Location(), guardedPage) {
		t.Fatalf("1 MiB placed on the guarded page %v", guardedPage)
	}
	if a.Current().Pages() != 2 || m.BytesAllocated() != 4*mib {
		t.Fatalf("%d pages, %d bytes; want a second 2 MiB page", a.Current().Pages(), m.BytesAllocated())
	}
	m.Cleanup(pool.Explicit)
	if a.Current().Pages() != 2 {
		t.Fatalf("explicit cleanup released the guarded page")
	}
}

// Scenario 36.
func TestSevenMiBGoesToArenaNotSmallPool(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	h := alloc(t, m, 7*mib, memory.Allow)
	defer h.Release()
	if p := h.Location().Pool(); p < pool.ArenaFirstIndex || p >= pool.ArenaFirstIndex+pool.ArenaSlots {
		t.Fatalf("7 MiB on pool %d, want an arena pool", p)
	}
	if small := m.Report().Dynamic[1]; small.Pages != 0 {
		t.Fatalf("small pool holds %d pages, want 0", small.Pages)
	}
}

// Scenario 37. Host storage backs pages whole: the small page is
// SmallPageWhole, 2 MiB.
func TestHundredBytesTakeSmallPageWithPaddingAndReuseIt(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	h := alloc(t, m, 100, memory.Allow)
	want := pool.Usage{Allocations: 1, BytesInUse: 100, BytesPadding: 28, BytesReserved: 2 * mib}
	if got := usage(m); got != want {
		t.Fatalf("usage = %+v, want %+v", got, want)
	}
	if p := h.Location().Pool(); p != 1 {
		t.Fatalf("100 B on pool %d, want the small pool (1)", p)
	}
	h.Release()
	h = alloc(t, m, 100, memory.Allow)
	defer h.Release()
	if got := usage(m); got != want {
		t.Fatalf("usage after free and re-reserve = %+v, want %+v", got, want)
	}
}

// Scenario 41 (adaptive).
func TestAlignmentFiftyPadsFortyBytesByTen(t *testing.T) {
	p := memory.Properties{MaxPageSize: 128 * mib, Alignment: 50}
	m := newManagerOn(t, hoststorage.NewHost(50, nil), p, memory.Config{})
	h := alloc(t, m, 40, memory.Allow)
	defer h.Release()
	s, err := m.Find(h)
	if err != nil {
		t.Fatal(err)
	}
	if s.Region.Size != 40 || s.Padding != 10 || s.EffectiveSize() != 50 {
		t.Fatalf("slice size %d padding %d, want 40 and 10", s.Region.Size, s.Padding)
	}
	if u := usage(m); u.BytesPadding != 10 || u.BytesInUse != 40 {
		t.Fatalf("usage = %+v, want 40 in use, 10 padding", u)
	}
}

// Scenario 42 (whole-page Host storage: 2 MiB small pages).
func TestTwoSmallAllocationsShareOneSmallPage(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	a := alloc(t, m, 512, memory.Allow)
	defer a.Release()
	b := alloc(t, m, 512, memory.Allow)
	if !samePage(a.Location(), b.Location()) || a.Location().Pool() != 1 {
		t.Fatalf("512 B at %v and %v, want one small page", a.Location(), b.Location())
	}
	b.Release()
	b = alloc(t, m, 512, memory.Allow)
	defer b.Release()
	small := m.Report().Dynamic[1]
	if small.Pages != 1 || small.Usage.BytesReserved != 2*mib || small.Usage.Allocations != 2 {
		t.Fatalf("small pool report = %+v, want one 2 MiB page with 2 allocations", small)
	}
}

// Scenario 43.
func TestTwoOneAndAHalfMiBAllocationsTakeTwoArenaPages(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	a := alloc(t, m, 3*mib/2, memory.Allow)
	defer a.Release()
	b := alloc(t, m, 3*mib/2, memory.Allow)
	defer b.Release()
	if samePage(a.Location(), b.Location()) {
		t.Fatalf("both on %v", a.Location())
	}
	if got := arena(t, m).Current().Pages(); got != 2 {
		t.Fatalf("arena pages = %d, want 2", got)
	}
	if u := usage(m); u.BytesReserved != 4*mib || u.BytesInUse != 3*mib {
		t.Fatalf("usage = %+v, want 4 MiB reserved, 3 MiB in use", u)
	}
}

// Scenario 44.
func TestFreedArenaSliceRoomIsReusedByLargerAllocationOnSamePage(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	a := alloc(t, m, 128*kib, memory.Allow)
	loc, off := a.Location(), region(t, m, a).Offset
	a.Release()
	b := alloc(t, m, 512*kib, memory.Allow)
	defer b.Release()
	if !samePage(loc, b.Location()) || region(t, m, b).Offset != off {
		t.Fatalf("512 KiB at %v offset %d; want the freed 128 KiB's place %v offset %d", b.Location(), region(t, m, b).Offset, loc, off)
	}
	if u := usage(m); u.BytesReserved != 2*mib {
		t.Fatalf("reserved = %d, want one 2 MiB page", u.BytesReserved)
	}
}

// Scenario 45, first two sentences: 4 KiB on a 2 MiB small page (Host
// storage backs pages whole), 4 MiB on the 4 MiB arena page it grows.
func TestSmallAndLargeLandInDifferentPoolsAndReuseNeverGrowsReserved(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	sizes := []uint64{4 * kib, 4 * mib}
	var hs []*handle.Handle
	for _, s := range sizes {
		hs = append(hs, alloc(t, m, s, memory.Allow))
	}
	if hs[0].Location().Pool() == hs[1].Location().Pool() {
		t.Fatalf("4 KiB and 4 MiB both on pool %d", hs[0].Location().Pool())
	}
	want := pool.Usage{Allocations: 2, BytesInUse: 4*kib + 4*mib, BytesReserved: 2*mib + 4*mib}
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

// Scenario 45, last sentence (about 500 KB of small sizes on one 2 MiB
// small page: Host storage backs pages whole).
func TestCyclingSmallSizesKeepsOneSmallPage(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	const n = 100
	size := func(i int) uint64 { return 50 + uint64(i)*100 } // 50 … 9,950 B
	hs := make([]*handle.Handle, n)
	for i := range hs {
		hs[i] = alloc(t, m, size(i), memory.Allow)
	}
	before := usage(m)
	if before.BytesReserved != 2*mib {
		t.Fatalf("reserved = %d, want one 2 MiB small page", before.BytesReserved)
	}
	for i := 0; i < n; i += 2 {
		hs[i].Release()
	}
	for i := 0; i < n; i += 2 {
		hs[i] = alloc(t, m, size(i), memory.Allow)
	}
	after := usage(m)
	if after.BytesReserved*10 > before.BytesReserved*11 {
		t.Fatalf("reserved grew from %d to %d, more than 10 %%", before.BytesReserved, after.BytesReserved)
	}
	if small := m.Report().Dynamic[1]; small.Pages != 1 || after.BytesInUse != before.BytesInUse || after.Allocations != n {
		t.Fatalf("small pages %d, usage %+v; want one page and the same bytes in use as %+v", small.Pages, after, before)
	}
	releaseAll(hs...)
}
