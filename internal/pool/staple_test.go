package pool

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// hundredMiBPages returns an arena on whole pages whose pool's page is
// 100 MiB, that one page held by a live 100 MiB reservation (returned), on a budget
// of budget bytes (the first growth on an empty history takes its
// allocation's size: tiling.go).
func hundredMiBPages(t *testing.T, budget uint64) (*Arena, storage.Storage, *storage.Budget, *handle.Handle) {
	t.Helper()
	b := storage.NewBudget(budget)
	st := hoststorage.NewSim(32, b)
	a := NewArena(NewPageSizing(GiB, 32), Limits{}, nil)
	first := arenaReserve(t, a, st, 100*MiB, nil)
	if a.PageSize() != 100*MiB {
		t.Fatalf("page size %d MiB after a first 100 MiB reservation, want 100", a.PageSize()/MiB)
	}
	return a, st, b, first
}

// lastPage is the size and free bytes of the current pool's last page.
func lastPage(a *Arena) (size, free uint64) {
	p := a.Current()
	pg := p.pages[len(p.pages)-1]
	return pg.size(), pageFree(pg)
}

// pageFree is the bytes no slice of pg occupies.
func pageFree(pg *page) uint64 {
	u := pg.usage()
	return u.BytesReserved - u.BytesOccupied()
}

// PL36: a size the arena has served four pages' worth of, that leaves a
// tail on the pool's page, opens a page that it tiles; before it is a
// staple, its pages are the pool's.
func TestStapleSizeOpensAPageItTiles(t *testing.T) {
	a, st, _, _ := hundredMiBPages(t, 4*GiB)
	cur := a.Current().Index()
	// 12 MiB: eight to a 100 MiB page, a 4 MiB tail each. The first 32
	// (four pages' worth, 384 MiB) come before it is a staple.
	for i := range 32 {
		h := arenaReserve(t, a, st, 12*MiB, nil)
		if got := pageBytes(t, a, cur, int(h.Location().Page())); got != 100*MiB {
			t.Fatalf("12 MiB reservation %d on a %d MiB page, want the pool's 100 MiB", i, got/MiB)
		}
	}
	h := arenaReserve(t, a, st, 12*MiB, nil)
	if got := pageBytes(t, a, cur, int(h.Location().Page())); got != 96*MiB {
		t.Fatalf("the 33rd 12 MiB reservation opened a %d MiB page, want 96 MiB (eight 12s, no tail)", got/MiB)
	}
	if pg := a.Current().pages[h.Location().Page()]; pg.keptFor != 12*MiB {
		t.Fatalf("the 96 MiB page keeps its room for %d bytes, want 12 MiB (PL37)", pg.keptFor)
	}
	// A size that tiles the pool's page keeps it, staple or not: 20 MiB.
	if page, ok := a.stapleTiledPage(0, a.Current(), 20*MiB); ok {
		t.Fatalf("20 MiB (five to 100 MiB) gets a %d MiB page, want the pool's", page/MiB)
	}
	// Granular storage maps only what a slice uses: no smaller page there.
	if page, ok := a.stapleTiledPage(hoststorage.DefaultGranule, a.Current(), 12*MiB); ok {
		t.Fatalf("granular storage: a %d MiB page for a staple, want the pool's", page/MiB)
	}
	// A size that is not whole 2 MiB tiles would leave a tail on any page.
	for range 40 {
		arenaReserve(t, a, st, 11*MiB, nil)
	}
	if page, ok := a.stapleTiledPage(0, a.Current(), 11*MiB); ok {
		t.Fatalf("11 MiB gets a %d MiB page, want the pool's: only whole 2 MiB tiles tile it", page/MiB)
	}
	a.Check()
}

// stapleTwenty returns a 100 MiB-page arena whose last page was opened by a
// staple 20 MiB reservation (five to a page): a page that keeps its 80 MiB
// of open room for 20s (PL37); and the reservations, the 100 MiB first.
func stapleTwenty(t *testing.T) (*Arena, storage.Storage, *storage.Budget, []*handle.Handle) {
	t.Helper()
	a, st, b, first := hundredMiBPages(t, 4*GiB)
	twenties := []*handle.Handle{first} // the 100 MiB first, then the 20s
	for range 21 {
		twenties = append(twenties, arenaReserve(t, a, st, 20*MiB, nil))
	}
	if size, free := lastPage(a); size != 100*MiB || free != 80*MiB || a.Current().pages[len(a.Current().pages)-1].keptFor != 20*MiB {
		t.Fatalf("last page %d MiB with %d MiB free, kept for %d bytes; want 100, 80, 20 MiB", size/MiB, free/MiB, a.Current().pages[len(a.Current().pages)-1].keptFor)
	}
	return a, st, b, twenties
}

// PL37, firmly: a size above an eighth of the page that does not tile the
// kept room takes a page (its own size, PL32) rather than the room, and the
// dry run agrees; a size that tiles the room, or the kept size, takes it.
func TestKeptRoomIsNotTakenByALargerSizeThatBreaksItsTiling(t *testing.T) {
	a, st, b, _ := stapleTwenty(t)
	kept := a.Current().pages[len(a.Current().pages)-1]
	if w := a.WouldTryReserve(NewView(budgetDry{st, b}, nil), 24*MiB); w.Way != WouldFail {
		t.Fatalf("WouldTryReserve(24 MiB) = %+v, want no held room: the only room is kept for 20 MiB", w)
	}
	h := arenaReserve(t, a, st, 24*MiB, nil)
	if pg := a.Current().pages[h.Location().Page()]; pg == kept || pg.size() != 24*MiB {
		t.Fatalf("24 MiB landed on a %d MiB page (the kept page: %v), want its own 24 MiB page", pg.size()/MiB, pg == kept)
	}
	if got := pageFree(kept); got != 80*MiB {
		t.Fatalf("kept page has %d MiB free after the 24 MiB reservation, want 80", got/MiB)
	}
	for _, size := range []uint64{40 * MiB, 20 * MiB} { // 40 tiles 80; 20 is the kept size
		if w := a.WouldTryReserve(NewView(budgetDry{st, b}, nil), size); w.Way != WouldHeld {
			t.Fatalf("WouldTryReserve(%d MiB) = %+v, want held room", size/MiB, w)
		}
		h := arenaReserve(t, a, st, size, nil)
		if pg := a.Current().pages[h.Location().Page()]; pg != kept {
			t.Fatalf("%d MiB landed on a %d MiB page, want the kept page's room", size/MiB, pg.size()/MiB)
		}
	}
	a.Check()
}

// PL37, softly: a size between a sixteenth and an eighth of the page that
// does not tile the kept room takes any other room first, even a looser
// run, and the kept room before a new page.
func TestKeptRoomServesAMidSizeOnlyWhenNoOtherRoomDoes(t *testing.T) {
	a, st, _, twenties := stapleTwenty(t)
	kept := a.Current().pages[len(a.Current().pages)-1]
	pages := len(a.Current().pages)
	// No other room: 7 MiB (80 is no whole number of 7s) takes the kept
	// room rather than a new page.
	h := arenaReserve(t, a, st, 7*MiB, nil)
	if pg := a.Current().pages[h.Location().Page()]; pg != kept || len(a.Current().pages) != pages {
		t.Fatalf("7 MiB landed on a %d MiB page, %d pages (%d before); want the kept page, no new one", pg.size()/MiB, len(a.Current().pages), pages)
	}
	h.Release()
	// A looser run elsewhere serves it first: page 1, emptied of its five
	// 20s (100 MiB free, not kept), against the kept page's 80 MiB.
	for _, h := range twenties[1:6] {
		h.Release()
	}
	h = arenaReserve(t, a, st, 7*MiB, nil)
	if pg := a.Current().pages[h.Location().Page()]; pg == kept {
		t.Fatalf("7 MiB took the kept room with a free 100 MiB page beside it, want that page")
	}
	// A reservation of at most a sixteenth shares kept room as any room:
	// with the freed page now holding 7 MiB (93 MiB free), 6 MiB goes to the
	// tighter kept room.
	h = arenaReserve(t, a, st, 6*MiB, nil)
	if pg := a.Current().pages[h.Location().Page()]; pg != kept {
		t.Fatalf("6 MiB (under a sixteenth) landed on a %d MiB page, want the kept page's tighter room", pg.size()/MiB)
	}
	a.Check()
}

// PL37 in the dry run after a cleanup: a pool left with one page carves by
// first fit, kept room included, as tryReserveTightest does; the dry run
// counts the pages its cleanup left, not those the pool holds now.
func TestKeptRoomDryRunCountsThePagesACleanupLeaves(t *testing.T) {
	a, st, b, held := stapleTwenty(t)
	for _, h := range held[:len(held)-1] { // all but the last 20, on the kept page
		h.Release()
	}
	v := NewView(budgetDry{st, b}, nil)
	a.WouldCleanup(v, Explicit)
	w := a.WouldReserve(v, 24*MiB)
	a.Cleanup(st, 0, Explicit, nil)
	if n := len(a.Current().pages); n != 1 {
		t.Fatalf("%d pages after the cleanup, want the kept page alone", n)
	}
	h := arenaReserve(t, a, st, 24*MiB, nil)
	if w.Way != WouldHeld || h.Location().Page() != 0 {
		t.Fatalf("after a cleanup leaving one page: WouldReserve(24 MiB) = %+v, Reserve carved page %d; want held room on page 0 both", w, h.Location().Page())
	}
	a.Check()
}

// The arena's dry run agrees with its reservation where PL36 and PL37
// decide: a few sizes repeated until they are staples (whole 2 MiB tiles
// and not, tiling 100 MiB pages and not), on budgets that refuse pages,
// with an explicit cleanup before some reservations (in the view, and
// then in the arena): it would succeed ⇔ Reserve does, from held room ⇔ no
// page was added, else on a page of the size it says.
func TestArenaWouldReserveAgreesWithReserveOnStapleSizes(t *testing.T) {
	sizes := []uint64{7 * MiB, 12 * MiB, 20 * MiB, 24 * MiB, 40 * MiB, 3*MiB + 5}
	ways := map[WouldWay]int{}
	keptPages := 0
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 0x57a91e))
		b := storage.NewBudget((800 + uint64(rng.IntN(1200))) * MiB)
		st := hoststorage.NewSim(256, b)
		a := NewArena(NewPageSizing(GiB, 256), Limits{}, nil)
		g := handle.NewErrorGraph()
		live := []*handle.Handle{arenaReserve(t, a, st, 100*MiB, g)} // 100 MiB pages
		for step := range 600 {
			if len(live) > 0 && rng.IntN(4) == 0 {
				live = releaseOne(rng, live)
				continue
			}
			size := sizes[rng.IntN(len(sizes))]
			if rng.IntN(2) == 0 {
				size = sizes[1+rng.IntN(2)] // 12 and 20 MiB become staples first
			}
			clean := rng.IntN(8) == 0
			shape, _ := arenaShape(a)
			v := NewView(&cleaningDry{budgetDry: budgetDry{st, b}, pages: shape}, nil)
			if clean {
				a.WouldCleanup(v, Explicit)
			}
			w := a.WouldReserve(v, size)
			if clean {
				a.Cleanup(st, 0, Explicit, g)
			}
			ways[w.Way]++
			h := reserveAsWould(t, a, st, g, size, w, fmt.Sprintf("seed %d step %d", seed, step))
			if h == nil {
				continue
			}
			live = append(live, h)
			for _, pg := range a.Current().pages {
				if pg.keptFor != 0 {
					keptPages++
				}
			}
			a.Check()
		}
		for _, h := range live {
			h.Release()
		}
	}
	t.Logf("ways %v, kept pages seen %d times", ways, keptPages)
	if keptPages == 0 || ways[WouldHeld] == 0 || ways[WouldPage] == 0 || ways[WouldFail] == 0 {
		t.Errorf("the sequences never exercised kept pages, held room, new pages and refusals: %v, %d kept", ways, keptPages)
	}
}

// cleaningDry is budgetDry that counts the pages a dry cleanup hands back
// (pages: the arena's, by region) as free for the reservation after it.
type cleaningDry struct {
	budgetDry
	pages map[storage.ID]uint64
	freed uint64
}

func (d *cleaningDry) grant(n uint64) error {
	used := d.b.Used() - d.freed
	if c := d.b.Capacity(); c != 0 && storage.SatAdd(used, n) > c {
		return &storage.OutOfMemoryError{Requested: n, Allocated: used, Capacity: c}
	}
	return nil
}

func (d *cleaningDry) Alloc(size uint64) error { return d.grant(size) }
func (d *cleaningDry) Dealloc(id storage.ID)   { d.freed += d.pages[id] }
func (d *cleaningDry) Allocated() uint64       { return d.st.BytesAllocated() - d.freed }

// PL37's last step: on a device with no room for another page, a size the
// kept room is firmly kept from fails, and once the page yields its room
// (YieldKeptRoom, make-room's last stage) takes it; the dry run says so
// before, and agrees after. No yield where nothing firmly kept holds the
// size.
func TestKeptRoomYieldsBeforeAReservationFails(t *testing.T) {
	a, st, b, _ := stapleTwenty(t)
	kept := a.Current().pages[len(a.Current().pages)-1]
	if err := b.Take(b.Capacity() - b.Used()); err != nil { // no room for any page
		t.Fatal(err)
	}
	dry := func() *View { return NewView(budgetDry{st, b}, nil) }
	if w := a.WouldReserve(dry(), 24*MiB); w.OK() {
		t.Fatalf("WouldReserve(24 MiB) = %+v with the device full and the only room kept, want a failure", w)
	}
	if _, err := a.Reserve(st, 24*MiB, nil, Bind{}); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Reserve(24 MiB) = %v, want out of memory: the only room is kept for 20 MiB", err)
	}
	// Nothing firmly kept holds these: 90 MiB exceeds the room, 40 MiB tiles
	// it, 7 MiB is kept only softly (and took no room here: none was tried).
	for _, size := range []uint64{90 * MiB, 40 * MiB, 7 * MiB} {
		if a.WouldYieldKeptRoom(dry(), size) || a.YieldKeptRoom(size, nil) {
			t.Fatalf("kept room yielded to %d MiB, want no yield: nothing firmly kept holds it", size/MiB)
		}
	}
	v := dry()
	if !a.WouldYieldKeptRoom(v, 24*MiB) {
		t.Fatal("WouldYieldKeptRoom(24 MiB) = false, want the kept page to yield")
	}
	if w := a.WouldReserve(v, 24*MiB); w.Way != WouldHeld {
		t.Fatalf("after the dry yield, WouldReserve(24 MiB) = %+v, want held room", w)
	}
	if kept.keptFor == 0 {
		t.Fatal("the dry yield changed the page, want it untouched")
	}
	if !a.YieldKeptRoom(24*MiB, nil) {
		t.Fatal("YieldKeptRoom(24 MiB) = false, want the kept page to yield")
	}
	h := arenaReserve(t, a, st, 24*MiB, nil)
	if pg := a.Current().pages[h.Location().Page()]; pg != kept {
		t.Fatalf("24 MiB landed on a %d MiB page after the yield, want the kept page's room", pg.size()/MiB)
	}
	a.Check()
}
