package gpumem

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/memory"
	"github.com/gpumem/gpumem/relocation"
)

// design §8.1: a reservation whose page does not fit the device, when no
// make-room stage helps, is served by storage of its own size, before any
// compaction; the buffer works as any other, and its storage goes back at
// its free.
func TestReservationWhosePageDoesNotFitIsServedAtItsOwnSize(t *testing.T) {
	d := openHost(t, WithCapacity(16*mib),
		WithProperties(memory.Properties{MaxPageSize: 1 << 30, Alignment: 32, MaxMemory: 16 * mib}))
	s := d.DefaultStream()
	big := mustAlloc(t, s, 9*mib) // a 10 MiB page, 1 MiB free
	mustWrite(t, big, pattern(9*mib, 1))
	// 5 MiB needs another 10 MiB page: 20 > 16 MiB; its own 5 MiB fits.
	b := mustAlloc(t, s, 5*mib)
	st := d.Stats()
	if st.DedicatedFallbacks != 1 || st.BytesAllocated != 15*mib {
		t.Fatalf("%d fallbacks, %d bytes allocated; want one, 15 MiB (the page and 5 MiB)", st.DedicatedFallbacks, st.BytesAllocated)
	}
	if st.Relocation.Runs[relocation.Compact] != 0 {
		t.Fatalf("%d compactions: the fallback comes first", st.Relocation.Runs[relocation.Compact])
	}
	mustWrite(t, b, pattern(5*mib, 2))
	wantBytes(t, b, pattern(5*mib, 2))
	wantBytes(t, big, pattern(9*mib, 1))
	mustFree(t, b)
	mustCleanup(t, d)
	if got := d.Stats().BytesAllocated; got != 10*mib {
		t.Fatalf("%d bytes allocated after the free and a cleanup, want the 10 MiB page only", got)
	}
	// Larger than what is left: out of memory, as before.
	if _, err := s.Alloc(bg, 7*mib); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("7 MiB with 6 MiB left = %v, want ErrOutOfMemory", err)
	}
}

// While a capture window is open the fallback is not taken: a warmup
// buffer's free primes pool room for the recording, which a buffer of its
// own storage would not.
func TestNoExactFallbackWhileACaptureWindowIsOpen(t *testing.T) {
	d := openHost(t, WithCapacity(16*mib),
		WithProperties(memory.Properties{MaxPageSize: 1 << 30, Alignment: 32, MaxMemory: 16 * mib}))
	s := d.DefaultStream()
	_ = mustAlloc(t, s, 9*mib)
	tok, err := s.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(bg, 5*mib); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("5 MiB in a prepared window = %v, want ErrOutOfMemory", err)
	}
	if err := s.AbortCapture(tok); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.DedicatedFallbacks != 0 {
		t.Fatalf("%d fallbacks in a capture window", st.DedicatedFallbacks)
	}
	mustFree(t, mustAlloc(t, s, 5*mib))
	if st := d.Stats(); st.DedicatedFallbacks != 1 {
		t.Fatalf("%d fallbacks once the window closed, want 1", st.DedicatedFallbacks)
	}
}
