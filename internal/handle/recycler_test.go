package handle_test

import (
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
)

// A descriptor whose every reference went is handed out again by the next
// New, with a fresh ID and fresh counters, and its spare handle serves the
// next Clone again: a steady reserve-and-free allocates nothing.
func TestRecyclerReusesADeadCellWithAFreshID(t *testing.T) {
	var r handle.Recycler
	loc := handle.MustLocation(2, 0, 0)
	h := r.New(loc, nil)
	c := h.Clone()
	first := h.ID()
	c.Release()
	if r.Spare() != 0 {
		t.Fatal("a cell with a live handle was recycled")
	}
	h.Release()
	if r.Spare() != 1 {
		t.Fatalf("%d spare cells after the last release, want 1", r.Spare())
	}
	again := r.New(loc.WithSlice(3), nil)
	if again != h {
		t.Fatal("New allocated although a dead cell was kept")
	}
	if again.ID() <= first {
		t.Fatalf("recycled descriptor has ID %d, want a fresh one above %d (H3)", again.ID(), first)
	}
	d := again.Descriptor()
	if d.Refs() != 1 || d.Handles() != 1 || again.Released() || again.Location() != loc.WithSlice(3) || d.FreeSignal() != nil {
		t.Fatalf("recycled descriptor not fresh: refs %d handles %d released %v at %v", d.Refs(), d.Handles(), again.Released(), again.Location())
	}
	if n := testing.AllocsPerRun(100, func() {
		h := r.New(loc, nil)
		c := h.Clone()
		c.Release()
		h.Release()
	}); n != 0 {
		t.Fatalf("steady New, Clone and releases allocate %v objects, want 0", n)
	}
	again.Release()
}

// A binding keeps the cell out of the Recycler as a handle does (refs
// counts both), and a nil Recycler simply allocates.
func TestRecyclerWaitsForBindingsAndNilRecyclesNothing(t *testing.T) {
	var r handle.Recycler
	h := r.New(handle.Uninit, nil)
	b := h.Binding()
	h.Release()
	if r.Spare() != 0 {
		t.Fatal("recycled while a binding holds the address")
	}
	b.Release()
	if r.Spare() != 1 {
		t.Fatalf("%d spare cells after the binding went, want 1", r.Spare())
	}
	var none *handle.Recycler
	x := none.New(handle.Uninit, nil)
	x.Release()
	if none.Spare() != 0 {
		t.Fatal("a nil Recycler kept a cell")
	}
}

// A key holds the cell back as a reference does, though the allocation is
// free (refs ≤ 1) while only keys remain: the last Unkey of a dead
// descriptor returns the cell, a kept one never comes back, and one New
// made (no Recycler) never reaches one (H6).
func TestKeysHoldTheCellBackUntilTheLastUnkey(t *testing.T) {
	var r handle.Recycler
	h := r.New(handle.Uninit, nil)
	d, first := h.Descriptor(), h.ID()
	d.Key()
	d.Key()
	h.Release()
	if !d.IsFree() || r.Spare() != 0 {
		t.Fatalf("free %v, %d spare cells: want the allocation free and its keyed cell held back", d.IsFree(), r.Spare())
	}
	d.Unkey()
	if r.Spare() != 0 {
		t.Fatal("recycled while a key remains")
	}
	d.Unkey()
	if r.Spare() != 1 {
		t.Fatalf("%d spare cells after the last key went, want 1", r.Spare())
	}
	if again := r.New(handle.Uninit, nil); again != h || again.ID() <= first {
		t.Fatalf("New gave %p with ID %d, want the cell %p again with an ID above %d", again, again.ID(), h, first)
	}

	var q handle.Recycler
	k := q.New(handle.Uninit, nil)
	k.Descriptor().Keep()
	k.Release()
	if q.Spare() != 0 {
		t.Fatal("a kept cell was recycled")
	}
	plain := handle.New(handle.Uninit)
	plain.Release()
	if q.Spare() != 0 || r.Spare() != 0 {
		t.Fatal("a descriptor New made reached a Recycler")
	}
}

// Unkeying more often than keying is an internal bug that would hand a keyed
// cell to another allocation: it panics.
func TestUnkeyBelowZeroPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Unkey below zero did not panic")
		}
	}()
	h := handle.New(handle.Uninit)
	h.Descriptor().Unkey()
}

// Recyclers draw IDs in blocks (H3): the IDs of several Recyclers' and of
// New's interleaved descriptors never repeat, and each Recycler's increase
// in the order of its News, across its blocks.
func TestRecyclersHandOutUniqueIncreasingIDs(t *testing.T) {
	var a, b handle.Recycler
	seen := map[handle.ID]bool{}
	var lastA, lastB handle.ID
	for i := range 3000 { // three blocks of each
		for _, r := range []*handle.Recycler{&a, &b, nil} {
			h := r.New(handle.Uninit, nil)
			id := h.ID()
			if id == 0 || seen[id] {
				t.Fatalf("New %d: ID %d is zero or handed out twice", i, id)
			}
			seen[id] = true
			switch r {
			case &a:
				if id <= lastA {
					t.Fatalf("recycler a: ID %d after %d", id, lastA)
				}
				lastA = id
			case &b:
				if id <= lastB {
					t.Fatalf("recycler b: ID %d after %d", id, lastB)
				}
				lastB = id
			}
			h.Release() // recycled: the next New reuses the cell with a new ID
		}
	}
}
