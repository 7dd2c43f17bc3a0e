package gpumem

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// A freed Buffer stays refused after its slice and its own handle's cell
// were handed to later buffers (H6): it carries its allocation's ID, which
// no later allocation has (H3), so every call on it returns ErrAlreadyFreed
// and the new buffers' bytes are untouched, whether the stale value is the
// one Free was called on or a copy. A foreign device's buffer, freed and
// reallocated there the same way, stays refused.
func TestStaleBufferAfterItsCellIsReusedReportsErrAlreadyFreed(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	mustFree(t, mustAlloc(t, s, 4*kib)) // the page exists, its free slice is the page's own
	// Steady pairs reuse the slice, the page's descriptors and the
	// buffers' cells: nothing is allocated (invariant builds allocate for
	// their checks).
	if n := testing.AllocsPerRun(100, func() { mustFree(t, mustAlloc(t, s, 4*kib)) }); n != 0 && !invariantsOn {
		t.Fatalf("a steady Alloc+Free makes %v heap allocations, want 0", n)
	}
	var stale []Buffer
	seen := map[BufferID]bool{}
	var fresh Buffer
	reused := 0 // stale buffers whose handle a later buffer holds
	for i := range 8 {
		old := mustAlloc(t, s, 4*kib)
		reused += cellsReused(stale, old)
		mustWrite(t, old, pattern(4*kib, byte(i)))
		at := old.h.Location()
		copied := old // a copy is the same reference
		mustFree(t, copied)
		stale = append(stale, old)
		fresh = mustAlloc(t, s, 4*kib)
		reused += cellsReused(stale, fresh)
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
		// The writes' records go once known complete: their keys with
		// them, so the next cycle's buffers take these cells.
		if err := s.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if reused == 0 {
		t.Fatal("no freed buffer's cell was handed to a later buffer: the test exercised no reuse")
	}
	noop := func([]storage.Resource) error { return nil }
	for i, b := range stale {
		calls := map[string]func() error{
			"Free":    b.Free,
			"Write":   func() error { return b.Write(ctx, []byte{0xff}) },
			"Read":    func() error { _, err := b.Read(ctx); return err },
			"Map":     func() error { _, err := b.Map(ctx); return err },
			"Hold":    func() error { _, err := b.Hold(); return err },
			"Enqueue": func() error { return s.Enqueue("stale", []Use{{Buffer: b, Access: Write}}, noop) },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, ErrAlreadyFreed) {
				t.Errorf("stale buffer %d: %s = %v, want ErrAlreadyFreed", i, name, err)
			}
		}
		if !b.Clone().IsZero() || b.CanMut() {
			t.Errorf("stale buffer %d: Clone or CanMut treated it as live", i)
		}
		if b.ID() == fresh.ID() || b.ID() == 0 {
			t.Errorf("stale buffer %d reports ID %d, want its own (the live buffer's is %d)", i, b.ID(), fresh.ID())
		}
	}
	wantBytes(t, fresh, pattern(4*kib, 0xa7))

	d2 := openHost(t)
	s2 := d2.DefaultStream()
	foreign := mustAlloc(t, s2, 4*kib)
	mustFree(t, foreign)
	again := mustAlloc(t, s2, 4*kib) // foreign's slice and cell, reused on d2
	for name, b := range map[string]Buffer{"freed foreign": foreign, "live foreign": again} {
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

// cellsReused counts the stale buffers whose handle b holds: their cell
// was handed to b.
func cellsReused(stale []Buffer, b Buffer) int {
	n := 0
	for _, x := range stale {
		if x.h == b.h {
			n++
		}
	}
	return n
}

// A pending writer keys its buffer's descriptor (H6): a buffer freed while
// an op that writes it is queued gives its slice to the next buffer at
// once, but its cell to none until the op is known complete. Otherwise the
// op's failure, marked through the descriptor, would mark whichever buffer
// had been given the cell meanwhile. Once the record is dropped, the cell
// serves the next Alloc.
func TestAPendingWriterKeepsTheFreedBuffersCellUntilItCompletes(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	a := mustAlloc(t, s, 4*kib)
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // registered after openHost's: runs before the device closes
	boom := errors.New("the slow op fails")
	if err := s.Enqueue("slow", []Use{{Buffer: a, Access: Write}}, func([]storage.Resource) error {
		<-release
		return boom
	}); err != nil {
		t.Fatal(err)
	}
	cell := a.h
	mustFree(t, a)
	b := mustAlloc(t, s, 4*kib) // a's slice, in stream order: a's descriptor is dead, and keyed
	var others []Buffer
	for _, size := range []uint64{4 * kib, 64 * kib, 1 * mib} {
		x := mustAlloc(t, s, size)
		if x.h == cell {
			t.Fatalf("a buffer of %d bytes was given the cell of a freed buffer a queued op still writes", size)
		}
		others = append(others, x)
	}
	unblock()
	if err := s.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	for _, x := range append(others, b) {
		if _, err := x.Read(ctx); err != nil {
			t.Fatalf("buffer %d: %v; the failure of an op on a freed buffer marked it", x.ID(), err)
		}
	}
	next := mustAlloc(t, s, 4*kib)
	if next.h != cell {
		t.Fatal("the freed buffer's cell did not serve the next Alloc once its writer completed")
	}
	if err := a.Free(); !errors.Is(err, ErrAlreadyFreed) {
		t.Fatalf("Free of the stale buffer whose cell a live one holds = %v, want ErrAlreadyFreed", err)
	}
	for _, x := range append(others, b, next) {
		mustFree(t, x)
	}
}
