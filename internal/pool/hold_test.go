package pool

import (
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
)

// HoldFree binds exactly its range, its free bytes carved into a slice of
// their own: first fit serves the free room on both sides of it and never
// the held room, a taken slice in the range is bound as it is (it stays
// held when its owner lets go), and a release frees the held room again.
func TestHoldFreeBindsOnlyTheRangeAndTheRestOfThePageServes(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	p := NewSliced(8*MiB, 8*MiB, false, 32, 5, Limits{})
	first, err := p.Alloc(st, 1*MiB) // [0, 1) taken, [1, 8) free
	if err != nil {
		t.Fatal(err)
	}
	base := p.pages[0].region.Offset
	region := p.pages[0].region
	region.Offset, region.Size = base, 5*MiB // [0, 5): the taken MiB and [1, 5) free
	held, err := p.HoldFree(st, 0, region)
	if err != nil || len(held) != 2 {
		t.Fatalf("HoldFree: %d bindings, %v; want two: the taken [0, 1) MiB and the free [1, 5) MiB", len(held), err)
	}
	firstDesc := first.Descriptor()
	first.Release() // its owner lets go: the held binding keeps the slice
	if firstDesc.IsFree() {
		t.Fatal("the taken slice in the held range went free when its owner released it")
	}
	p.Check()
	at := func(h *handle.Handle) uint64 { return p.Slice(h.Location()).Region.Offset - base }
	h3 := p.TryReserve(st, 3*MiB, nil, Bind{})
	if h3 == nil || at(h3) != 5*MiB {
		t.Fatalf("3 MiB at %v: want the free room after the held range, at 5 MiB", h3)
	}
	if h := p.TryReserve(st, 32, nil, Bind{}); h != nil {
		t.Fatalf("32 bytes at offset %d: only held room is free, want nothing", at(h))
	}
	for _, b := range held {
		b.Release()
	}
	h4 := p.TryReserve(st, 4*MiB, nil, Bind{})
	if h4 == nil || at(h4) != 0 {
		t.Fatalf("4 MiB after the release: %v, want the room held before (with the first MiB its owner freed), at 0", h4)
	}
	h3.Release()
	h4.Release()
	if !firstDesc.IsFree() {
		t.Fatal("the taken slice stayed bound after every binding was released")
	}
	p.Check()
	if unknown, err := p.HoldFree(st, 3, region); err == nil || unknown != nil {
		t.Fatalf("HoldFree of page 3 of a one-page pool: %v, %v; want an error and nothing held", unknown, err)
	}
	other := region
	other.ID++
	if wrong, err := p.HoldFree(st, 0, other); err == nil || wrong != nil {
		t.Fatalf("HoldFree of another region on page 0: %v, %v; want an error and nothing held", wrong, err)
	}
}
