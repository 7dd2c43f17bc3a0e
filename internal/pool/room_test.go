package pool

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// Room held for a recording (PL34): first fit never serves it, a page guard
// taken afterwards (another graph sealing over a buffer on the page) does
// not freeze it, its owner carves at the offsets it asks and gives a freed
// slice back, an explicit cleanup neither unmaps its granules nor releases
// its page, and Release makes it free room again.
func TestRoomStaysHeldForItsOwnerWhateverHappensToThePage(t *testing.T) {
	g := handle.NewErrorGraph()
	st := hoststorage.NewGranularSim(32, granuleSize, nil)
	p := granularPool()
	other := mustReserve(t, p, st, 1*MiB) // [0, 1): another graph's buffer
	base := p.pages[0].region.Offset
	id := p.pages[0].region.ID
	at := func(h *handle.Handle) uint64 { return p.Slice(h.Location()).Region.Offset - base }
	// The rehearsal's footprint: [4, 6) MiB and [6, 7) MiB, adjacent.
	room, err := p.HoldRoom(st, []storage.Region{{ID: id, Offset: base + 4*MiB, Size: 2 * MiB}, {ID: id, Offset: base + 6*MiB, Size: MiB}}, g)
	if err != nil {
		t.Fatal(err)
	}
	p.Check()
	if got := room.Bytes(); got != 3*MiB {
		t.Fatalf("room holds %d bytes, want 3 MiB", got)
	}
	// First fit serves the free room around it, never the room.
	h3 := p.TryReserve(st, 3*MiB, g, Bind{})
	if h3 == nil || at(h3) != 1*MiB {
		t.Fatalf("3 MiB at %v: want [1, 4) MiB, before the room", h3)
	}
	if h := p.TryReserve(st, 2*MiB, g, Bind{}); h == nil || at(h) != 7*MiB {
		t.Fatalf("2 MiB: want [7, 9) MiB, after the room")
	} else {
		h.Release()
	}
	// An explicit cleanup unmaps what no live slice touches: the room's
	// granules (2, the first half of 3) stay mapped, its page stays.
	p.Cleanup(st, 0, Explicit, g)
	if l := layout(p.pages[0]); l[2:4] != "MM" {
		t.Fatalf("granules after an explicit cleanup: %s; the room's (2, 3) must stay mapped", l)
	}
	// Another graph seals over its buffer: the page is guarded.
	guard, ok := p.Guard(other.Location())
	if !ok {
		t.Fatal("no guard")
	}
	if h := p.TryReserve(st, 32, g, Bind{}); h != nil {
		t.Fatal("a guarded page served a reservation")
	}
	// The owner carves where the rehearsal placed its allocations.
	a, err := room.TakeAt(st, id, base+4*MiB, 2*MiB, g)
	if err != nil || at(a) != 4*MiB {
		t.Fatalf("TakeAt 4 MiB: %v, %v; want [4, 6) MiB on the guarded page", a, err)
	}
	if _, err := room.TakeAt(st, id, base+5*MiB, MiB, g); !errors.Is(err, ErrRoomTaken) {
		t.Fatalf("TakeAt of bytes taken already: %v, want ErrRoomTaken", err)
	}
	if _, err := room.TakeAt(st, id, base+8*MiB, MiB, g); !errors.Is(err, ErrRoomTaken) {
		t.Fatalf("TakeAt of bytes never held: %v, want ErrRoomTaken", err)
	}
	p.Check()
	// Its allocation is freed and given back; a larger one then takes the
	// joined room (its own freed bytes and the rest held).
	aLoc := a.Location()
	a.Release()
	if !room.Give(aLoc, g) {
		t.Fatal("Give of a freed slice of the room refused")
	}
	if h := p.TryReserve(st, 32, g, Bind{}); h != nil {
		t.Fatal("a guarded page served a reservation after the give")
	}
	guard.Release()
	if h := p.TryReserve(st, 3*MiB, g, Bind{}); h != nil && at(h) >= 4*MiB && at(h) < 7*MiB {
		t.Fatalf("first fit carved the room at %d once the guard went", at(h))
	} else if h != nil {
		h.Release()
	}
	b := room.TakeFirst(st, 3*MiB, g)
	if b == nil || at(b) != 4*MiB {
		t.Fatalf("TakeFirst 3 MiB: %v, want [4, 7) MiB", b)
	}
	if room.Bytes() != 0 {
		t.Fatalf("room holds %d bytes after its last range was taken", room.Bytes())
	}
	b.Release()
	room.Release()
	room.Release() // idempotent
	p.Check()
	if h := p.TryReserve(st, 3*MiB, g, Bind{}); h == nil {
		t.Fatal("the released room serves nothing")
	}
	// A guarded page's room is not set aside.
	guard, _ = p.Guard(other.Location())
	r2, err := p.HoldRoom(st, []storage.Region{{ID: id, Offset: base + 9*MiB, Size: MiB}}, g)
	if err != nil || r2.Bytes() != 0 {
		t.Fatalf("HoldRoom on a guarded page: %v bytes, %v; want nothing held", r2.Bytes(), err)
	}
	guard.Release()
	if _, err := p.HoldRoom(st, []storage.Region{{ID: id + 99, Offset: 0, Size: MiB}}, g); err == nil {
		t.Fatal("HoldRoom of a range on no page of the pool: want an error")
	}
	p.Check()
}
