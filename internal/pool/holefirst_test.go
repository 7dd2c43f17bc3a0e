package pool

import (
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// pageOf returns the size of the page h's slice is on, and its offset there.
func pageOf(t *testing.T, a *Arena, h *handle.Handle) (uint64, uint64) {
	t.Helper()
	loc := h.Location()
	pg := a.Pool(loc.Pool()).pages[loc.Page()]
	return pg.size(), pg.slices[loc.Slice()].Region.Offset - pg.region.Offset
}

// PL35: on 16 MiB pages a 6 MiB reservation (two to a page leave 4 MiB, 2
// MiB each; its own page rounds nothing) does not take the open room of a
// page a 1 MiB reservation opened: it takes its own page, and the open
// room stays for the sizes that share. A size that tiles the page (8 MiB)
// still takes open room, and once it is freed the room it held is a hole,
// which the next 6 MiB reservation takes. With the storage refusing the
// own-size page, the open room serves.
func TestHoleFirstSizeTakesAHoleOrItsOwnPageNotOpenRoom(t *testing.T) {
	if _, ok := NewPageSizing(16*MiB, 256).holeFirst(16*MiB, 6*MiB); !ok {
		t.Fatal("setup: 6 MiB on 16 MiB pages is not hole-first")
	}
	if _, ok := NewPageSizing(16*MiB, 256).holeFirst(16*MiB, 6*MiB+256); ok {
		t.Fatal("setup: 6 MiB and 256 bytes (an own page rounded up) is hole-first")
	}
	setup := func(b *storage.Budget) (*Arena, storage.Storage, *handle.ErrorGraph) {
		st := storage.NewSim(256, b)
		a := NewArena(NewPageSizing(16*MiB, 256), Limits{}, nil)
		g := handle.NewErrorGraph()
		arenaReserve(t, a, st, 16*MiB, g) // pool pages of 16 MiB, the first full
		if size, _ := pageOf(t, a, arenaReserve(t, a, st, MiB, g)); size != 16*MiB || a.PageSize() != 16*MiB {
			t.Fatalf("setup: 1 MiB on a %d-byte page, page size %d", size, a.PageSize())
		}
		return a, st, g
	}

	a, st, g := setup(nil)
	if size, _ := pageOf(t, a, arenaReserve(t, a, st, 6*MiB, g)); size != 6*MiB {
		t.Fatalf("6 MiB on a %d-byte page, want its own 6 MiB page", size)
	}
	eight := arenaReserve(t, a, st, 8*MiB, g)
	if size, off := pageOf(t, a, eight); size != 16*MiB || off != MiB {
		t.Fatalf("8 MiB at %d on a %d-byte page, want the open room at 1 MiB of a pool page", off, size)
	}
	eight.Release()
	if size, off := pageOf(t, a, arenaReserve(t, a, st, 6*MiB, g)); size != 16*MiB || off != MiB {
		t.Fatalf("6 MiB at %d on a %d-byte page, want the hole the 8 MiB left, at 1 MiB", off, size)
	}
	a.Check()

	a, st, g = setup(storage.NewBudget(36 * MiB)) // two pool pages, no room for a 6 MiB one
	if size, off := pageOf(t, a, arenaReserve(t, a, st, 6*MiB, g)); size != 16*MiB || off != MiB {
		t.Fatalf("own page refused: 6 MiB at %d on a %d-byte page, want the open room at 1 MiB", off, size)
	}
	if n := a.LargeOwnSizePages(); n != 0 {
		t.Fatalf("%d own-size pages counted with the storage refusing them", n)
	}
	a.Check()
}
