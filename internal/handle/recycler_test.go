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

// Descriptors made by New and NewWith (buffers' allocations) never go to a
// Recycler: a stale buffer keeps naming its own dead allocation (H6).
func TestNewWithDescriptorsAreNeverRecycled(t *testing.T) {
	var r handle.Recycler
	h, _ := handle.NewWith[int](handle.Uninit)
	id := h.ID()
	h.Release()
	if r.Spare() != 0 {
		t.Fatal("a NewWith descriptor reached a Recycler")
	}
	if n := r.New(handle.Uninit, nil); n == h || n.ID() == id {
		t.Fatal("New reused a buffer's descriptor")
	}
}
