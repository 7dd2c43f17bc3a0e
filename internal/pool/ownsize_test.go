package pool

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// pageBytes is the size of page i of the arena pool at index.
func pageBytes(t *testing.T, a *Arena, index uint8, i int) uint64 {
	t.Helper()
	p := a.Pool(index)
	if p == nil || i >= len(p.pages) {
		t.Fatalf("no page %d in arena pool %d", i, index)
	}
	return p.pages[i].size()
}

// PL30: a page of the current size that the device refuses is asked again
// at the reservation's own effective size; that page belongs to the pool
// from then on and serves whatever it holds, and the page size stays.
func TestRefusedPageIsAskedAgainAtTheReservationsOwnSize(t *testing.T) {
	st := hoststorage.NewSim(32, storage.NewBudget(24*MiB))
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	arenaReserve(t, a, st, 9*MiB, nil) // grows to 10 MiB pages
	arenaReserve(t, a, st, 9*MiB, nil) // a second 10 MiB page: 1 MiB free on each
	cur := a.Current().Index()
	// 3 MiB: a third 10 MiB page would need 30 of 24 MiB; its own 3 MiB fits.
	h := arenaReserve(t, a, st, 3*MiB, nil)
	if loc := h.Location(); loc.Pool() != cur || loc.Page() != 2 {
		t.Fatalf("3 MiB at %v, want page 2 of the current pool %d", loc, cur)
	}
	if got := pageBytes(t, a, cur, 2); got != 3*MiB {
		t.Fatalf("own-size page of %d bytes, want 3 MiB", got)
	}
	if a.PageSize() != 10*MiB || a.Growths() != 1 || st.BytesAllocated() != 23*MiB {
		t.Fatalf("page size %d, %d growths, %d bytes held; want 10 MiB, 1, 23 MiB", a.PageSize(), a.Growths(), st.BytesAllocated())
	}
	a.Check()
	// Freed, its room serves what it holds: two 1.5 MiB reservations land
	// there (after the 1 MiB the 10 MiB pages hold), nothing is added.
	h.Release()
	for range 2 {
		g := arenaReserve(t, a, st, 3*MiB/2, nil)
		if loc := g.Location(); loc.Page() != 2 {
			t.Fatalf("1.5 MiB at %v, want the own-size page 2", loc)
		}
	}
	if st.BytesAllocated() != 23*MiB {
		t.Fatalf("%d bytes held after reusing the own-size page, want 23 MiB", st.BytesAllocated())
	}
	a.Check()
}

// PL30 with both pages refused: the error is the own-size page's (what the
// device lacks for the smallest page that could serve the reservation),
// and nothing changed.
func TestRefusedOwnSizePageReturnsItsErrorChangingNothing(t *testing.T) {
	st := hoststorage.NewSim(32, storage.NewBudget(22*MiB))
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	arenaReserve(t, a, st, 9*MiB, nil)
	arenaReserve(t, a, st, 9*MiB, nil) // 20 MiB held, 2 MiB left
	_, err := a.Reserve(st, 3*MiB, nil, Bind{})
	var oom *storage.OutOfMemoryError
	if !errors.As(err, &oom) || oom.Requested != 3*MiB {
		t.Fatalf("3 MiB with 2 MiB left = %v, want an *OutOfMemoryError for the own 3 MiB", err)
	}
	if s := a.State(); s.Shape.CurrentPages != 2 || st.BytesAllocated() != 20*MiB {
		t.Fatalf("refused pages changed the arena: %+v, %d bytes", s, st.BytesAllocated())
	}
	// The own-size page is at least the smallest page: a 64 KiB + 1
	// reservation on a 1 MiB budget is refused at 2 MiB, not below.
	tiny := hoststorage.NewSim(32, storage.NewBudget(1*MiB))
	b := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	if _, err := b.Reserve(tiny, 64<<10+1, nil, Bind{}); !errors.As(err, &oom) || oom.Requested != 2*MiB {
		t.Fatalf("64 KiB + 1 on a 1 MiB budget = %v, want a refusal of the 2 MiB smallest page", err)
	}
	a.Check()
}

// PL30 on a growth: the new pool's first page is the reservation's own size
// when its page is refused; the page size is what the growth chose (PL27:
// it holds the reservation), as it would be with the bytes to spare.
func TestRefusedGrowthPageIsAskedAgainAtTheReservationsOwnSize(t *testing.T) {
	history := func(a *Arena, st storage.Storage) {
		for range 3 {
			arenaReserve(t, a, st, 4*MiB, nil) // 4 MiB pages, served 12 MiB of 4 MiB
		}
	}
	twinSt := hoststorage.NewSim(32, nil)
	twin := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	history(twin, twinSt)
	arenaReserve(t, twin, twinSt, 6*MiB, nil)
	tiled := twin.PageSize()
	if tiled <= 6*MiB {
		t.Fatalf("setup: the growth took %d-byte pages, want more than the 6 MiB asked", tiled)
	}

	st := hoststorage.NewSim(32, storage.NewBudget(12*MiB+6*MiB+MiB))
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	history(a, st)
	h := arenaReserve(t, a, st, 6*MiB, nil)
	if a.PageSize() != tiled || a.Growths() != 2 {
		t.Fatalf("page size %d after %d growths, want %d (the growth's choice) after 2", a.PageSize(), a.Growths(), tiled)
	}
	if got := pageBytes(t, a, h.Location().Pool(), 0); got != 6*MiB {
		t.Fatalf("growth's first page of %d bytes, want the own 6 MiB", got)
	}
	if st.BytesAllocated() != 18*MiB {
		t.Fatalf("%d bytes held, want 18 MiB", st.BytesAllocated())
	}
	a.Check()
}

// PL31: on granular storage a growth takes the largest page, whatever the
// arena served; on whole pages the tiled size (here the smallest page that
// holds the reservation, the history being too thin to tile).
func TestGranularGrowthTakesTheLargestPage(t *testing.T) {
	sizing := NewPageSizing(64*MiB, 32)
	granular := NewArena(sizing, Limits{}, nil)
	gst := hoststorage.NewGranularSim(32, 2*MiB, nil)
	arenaReserve(t, granular, gst, 1*MiB, nil)
	h := arenaReserve(t, granular, gst, 10*MiB, nil)
	if granular.PageSize() != 64*MiB || granular.Growths() != 1 || gst.BytesAllocated() != 2*MiB+10*MiB {
		t.Fatalf("granular: page size %d after %d growths, %d mapped; want 64 MiB, 1, the two reservations' granules", granular.PageSize(), granular.Growths(), gst.BytesAllocated())
	}
	// Everything up to the largest page now fits: no further growth.
	arenaReserve(t, granular, gst, 40*MiB, nil)
	if granular.Growths() != 1 || h.Location().Pool() != granular.Current().Index() {
		t.Fatalf("granular: %d growths after 40 MiB, want still 1", granular.Growths())
	}
	granular.Check()

	whole := NewArena(sizing, Limits{}, nil)
	st := hoststorage.NewSim(32, nil)
	arenaReserve(t, whole, st, 1*MiB, nil)
	arenaReserve(t, whole, st, 10*MiB, nil)
	if whole.PageSize() != 10*MiB {
		t.Fatalf("whole pages: page size %d, want the tiled 10 MiB", whole.PageSize())
	}
}

// PL31's fallback: a largest page whose address space the storage refuses
// (a host under strict overcommit counts a reservation in full) is asked
// again at the tiled size, so the arena still grows.
func TestRefusedLargestGranularPageFallsBackToTheTiledSize(t *testing.T) {
	st := hoststorage.NewFaulty(hoststorage.NewGranularSim(32, 2*MiB, nil))
	st.RefuseAllocIf(func(size uint64) bool { return size > 32*MiB })
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	arenaReserve(t, a, st, 1*MiB, nil)
	h := arenaReserve(t, a, st, 10*MiB, nil)
	if a.PageSize() != 10*MiB || a.Growths() != 1 || h.Location().Pool() != a.Current().Index() {
		t.Fatalf("page size %d after %d growths, want the tiled 10 MiB after one", a.PageSize(), a.Growths())
	}
	a.Check()
}

// PL32: on whole pages a reservation that needs a new page and more than
// half of the pool's gets a page of its own size (rounded up to TileStep),
// whatever the device has left; one of half a page or less gets the pool's
// page; the page size stays, and the own-size page serves what it holds
// once freed.
func TestLargeReservationGetsAPageOfItsOwnSize(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	arenaReserve(t, a, st, 30*MiB, nil) // grows to 30 MiB pages, one full page
	page := a.PageSize()
	cur := a.Current().Index()
	h := arenaReserve(t, a, st, page/2+MiB+1, nil) // more than half a page
	want := ceilTo(page/2+MiB+1, TileStep)
	if got := pageBytes(t, a, cur, 1); got != want {
		t.Fatalf("page for %d bytes on %d-byte pages: %d bytes, want its own size rounded to 2 MiB, %d", page/2+MiB+1, page, got, want)
	}
	arenaReserve(t, a, st, page/2, nil) // half a page: the pool's page
	if got := pageBytes(t, a, cur, 2); got != page {
		t.Fatalf("page for half a page: %d bytes, want the pool's %d", got, page)
	}
	if a.PageSize() != page || a.LargeOwnSizePages() != 1 || a.OwnSizePages() != 0 {
		t.Fatalf("page size %d, large own-size pages %d, refused own-size pages %d; want %d, 1, 0", a.PageSize(), a.LargeOwnSizePages(), a.OwnSizePages(), page)
	}
	h.Release()
	held := st.BytesAllocated()
	// 16 MiB: more than page 2's free half, so the emptied own-size page
	// serves it (a smaller one would go to page 2's tighter hole, PL33).
	if g := arenaReserve(t, a, st, 16*MiB, nil); g.Location().Page() != 1 || st.BytesAllocated() != held {
		t.Fatalf("16 MiB after the free at %v with %d bytes held (was %d): want the own-size page 1, nothing added", g.Location(), st.BytesAllocated(), held)
	}
	a.Check()

	// Granular storage maps the same granules on any page: the pool's.
	gst := hoststorage.NewGranularSim(32, 2*MiB, nil)
	b := NewArena(NewPageSizing(64*MiB, 32), Limits{}, nil)
	arenaReserve(t, b, gst, 40*MiB, nil) // grows to the largest page (PL31)
	arenaReserve(t, b, gst, 40*MiB, nil) // more than half: still the pool's page
	if got := pageBytes(t, b, b.Current().Index(), 1); got != 64*MiB || b.LargeOwnSizePages() != 0 {
		t.Fatalf("granular: second page %d bytes, %d own-size pages; want 64 MiB, 0", got, b.LargeOwnSizePages())
	}
	b.Check()
}

// PL32 below half a page: a reservation needing a new page and more than an
// eighth of the pool's gets a page of its own size when the reservations of
// its size that fit one page would each leave more of it unused than the
// own-size page's rounding to 2 MiB; one whose size tiles the page shares
// it, and one of an eighth or less always shares, however badly it tiles.
func TestNonTilingReservationGetsAPageOfItsOwnSize(t *testing.T) {
	for _, c := range []struct {
		size, want uint64
		why        string
	}{
		{12 * MiB, 12 * MiB, "two to a 34 MiB page leave 10 MiB, 5 each, against no rounding"},
		{13 * MiB, 14 * MiB, "two leave 8 MiB, 4 each, against 1 MiB of rounding"},
		{17 * MiB, 34 * MiB, "half a page tiles it"},
		{17 * MiB / 2, 34 * MiB, "a quarter tiles it, though its own page would be 10 MiB"},
		{11 * MiB, 34 * MiB, "three leave 1 MiB, 341 KiB each, against 1 MiB of rounding"},
		{5 * MiB, 34 * MiB, "six leave 4 MiB, 683 KiB each, against 1 MiB of rounding"},
		{4*MiB - 4096, 34 * MiB, "an eighth or less: shares, though eight leave 256 KiB each against 4 KiB of rounding"},
	} {
		st := hoststorage.NewSim(32, nil)
		a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
		arenaReserve(t, a, st, 34*MiB, nil) // 34 MiB pages, one full page
		if a.PageSize() != 34*MiB {
			t.Fatalf("page size %d after a 34 MiB reservation, want 34 MiB", a.PageSize())
		}
		h := arenaReserve(t, a, st, c.size, nil)
		if got := h.Location().Page(); got != 1 {
			t.Fatalf("%d bytes on page %d of a full page 0, want a new page 1", c.size, got)
		}
		if got := pageBytes(t, a, a.Current().Index(), 1); got != c.want {
			t.Fatalf("%d bytes on 34 MiB pages: a page of %d bytes, want %d (%s)", c.size, got, c.want, c.why)
		}
		wantOwn := uint64(0)
		if c.want != 34*MiB {
			wantOwn = 1
		}
		if a.PageSize() != 34*MiB || a.LargeOwnSizePages() != wantOwn || a.OwnSizePages() != 0 {
			t.Fatalf("%d bytes: page size %d, large own-size pages %d, refused own-size pages %d; want 34 MiB, %d, 0", c.size, a.PageSize(), a.LargeOwnSizePages(), a.OwnSizePages(), wantOwn)
		}
		a.Check()
	}
}
