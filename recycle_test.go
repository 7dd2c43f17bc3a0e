package gpumem

import (
	"context"
	"errors"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// A freed buffer stays refused after its slice was handed to a new buffer
// through the page's recycled descriptors (H6): the stale *Buffer names its
// own dead allocation, never the new one, so every call on it returns
// ErrAlreadyFreed and the new buffer's bytes are untouched. A foreign
// device's buffer, freed and reallocated there the same way, stays refused.
func TestStaleBufferAfterItsSliceIsReusedReportsErrAlreadyFreed(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	mustFree(t, mustAlloc(t, s, 4*kib)) // the page exists, its free slice is the page's own
	// Steady pairs reuse the slice and the recycled descriptors: at most
	// the buffer itself is allocated (invariant builds allocate for their
	// checks).
	if n := testing.AllocsPerRun(100, func() { mustFree(t, mustAlloc(t, s, 4*kib)) }); n > 1 && !invariantsOn {
		t.Fatalf("a steady Alloc+Free makes %v heap allocations, want ≤ 1 (descriptors not recycled)", n)
	}
	var stale []*Buffer
	seen := map[BufferID]bool{}
	var fresh *Buffer
	for i := range 8 {
		old := mustAlloc(t, s, 4*kib)
		mustWrite(t, old, pattern(4*kib, byte(i)))
		at := old.h.Location()
		mustFree(t, old)
		stale = append(stale, old)
		fresh = mustAlloc(t, s, 4*kib)
		if got := fresh.h.Location(); got != at {
			t.Fatalf("cycle %d: the new buffer is at %v, the freed one was at %v: the slice was not reused", i, got, at)
		}
		if seen[fresh.ID()] || fresh.ID() == old.ID() {
			t.Fatalf("cycle %d: buffer ID %d handed out twice (H3)", i, fresh.ID())
		}
		seen[old.ID()], seen[fresh.ID()] = true, true
		mustWrite(t, fresh, pattern(4*kib, 0xa0+byte(i)))
		if i < 7 {
			mustFree(t, fresh)
		}
	}
	noop := func([]storage.Resource) error { return nil }
	for i, b := range stale {
		calls := map[string]func() error{
			"Free":    b.Free,
			"Write":   func() error { return b.Write(ctx, []byte{0xff}) },
			"Read":    func() error { _, err := b.Read(ctx); return err },
			"Map":     func() error { _, err := b.Map(ctx); return err },
			"Enqueue": func() error { return s.Enqueue("stale", []Use{{Buffer: b, Access: Write}}, noop) },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, ErrAlreadyFreed) {
				t.Errorf("stale buffer %d: %s = %v, want ErrAlreadyFreed", i, name, err)
			}
		}
		if b.Clone() != nil || b.CanMut() {
			t.Errorf("stale buffer %d: Clone or CanMut treated it as live", i)
		}
		if b.ID() == fresh.ID() {
			t.Errorf("stale buffer %d reports the live buffer's ID %d", i, b.ID())
		}
	}
	wantBytes(t, fresh, pattern(4*kib, 0xa7))

	d2 := openHost(t)
	s2 := d2.DefaultStream()
	foreign := mustAlloc(t, s2, 4*kib)
	mustFree(t, foreign)
	again := mustAlloc(t, s2, 4*kib) // foreign's slice, recycled on d2
	for name, b := range map[string]*Buffer{"freed foreign": foreign, "live foreign": again} {
		err := s.Enqueue("foreign", []Use{{Buffer: b, Access: ReadWrite}}, func([]storage.Resource) error {
			t.Errorf("an op over a %s buffer ran", name)
			return nil
		})
		if !errors.Is(err, ErrForeignBuffer) {
			t.Errorf("Enqueue with a %s buffer = %v, want ErrForeignBuffer", name, err)
		}
	}
	mustFree(t, again)
	mustFree(t, fresh)
}
