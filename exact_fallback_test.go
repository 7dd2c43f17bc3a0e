package gpumem

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/relocation"
)

// design §5.3, §8.1 (PL30): on whole pages an arena reservation whose
// page the device refuses gets a page of its own size in the arena itself,
// before any make-room stage: the buffer works as any other, the page
// serves later reservations it holds, and a cleanup gives it back once
// empty. The small pool's route, whose page is no own-size page, falls
// back to a dedicated allocation of the buffer's size after the cleanup.
func TestReservationWhosePageDoesNotFitIsServedAtItsOwnSize(t *testing.T) {
	d := openHost(t, WithCapacity(16*mib),
		WithProperties(Properties{MaxPageSize: 1 << 30, Alignment: 32, MaxMemory: 16 * mib}))
	s := d.DefaultStream()
	big := mustAlloc(t, s, 9*mib) // a 10 MiB page, 1 MiB free
	mustWrite(t, big, pattern(9*mib, 1))
	// 5 MiB needs another 10 MiB page: 20 > 16 MiB; its own 5 MiB fits.
	b := mustAlloc(t, s, 5*mib)
	st := d.Stats()
	if st.DedicatedFallbacks != 0 || st.ReserveRetries != 0 || st.OwnSizePages != 1 || st.BytesAllocated != 15*mib {
		t.Fatalf("%d fallbacks, %d retries, %d own-size pages, %d bytes allocated; want none, none, one, 15 MiB (the page and an own-size 5 MiB page)", st.DedicatedFallbacks, st.ReserveRetries, st.OwnSizePages, st.BytesAllocated)
	}
	if st.Relocation.Runs[relocation.Compact] != 0 {
		t.Fatalf("%d compactions: the own-size page comes first", st.Relocation.Runs[relocation.Compact])
	}
	mustWrite(t, b, pattern(5*mib, 2))
	mustFree(t, b)
	// The own-size page serves what it holds: 4 MiB more, nothing added.
	c := mustAlloc(t, s, 4*mib)
	if got := d.Stats().BytesAllocated; got != 15*mib {
		t.Fatalf("%d bytes allocated after 4 MiB into the freed own-size page, want 15 MiB", got)
	}
	mustWrite(t, c, pattern(4*mib, 3))
	wantBytes(t, c, pattern(4*mib, 3))
	wantBytes(t, big, pattern(9*mib, 1))
	mustFree(t, c)
	mustCleanup(t, d)
	if got := d.Stats().BytesAllocated; got != 10*mib {
		t.Fatalf("%d bytes allocated after the free and a cleanup, want the 10 MiB page only", got)
	}
	// Larger than what is left: out of memory, as before.
	if _, err := s.Alloc(bg, 7*mib); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("7 MiB with 6 MiB left = %v, want ErrOutOfMemory", err)
	}
	// The small pool's 2 MiB page does not fit once 15 MiB are held; a
	// 32 KiB buffer is served at its own size, a dedicated fallback.
	_ = mustAlloc(t, s, 5*mib)
	small := mustAlloc(t, s, 32<<10)
	if st := d.Stats(); st.DedicatedFallbacks != 1 {
		t.Fatalf("%d fallbacks for a small buffer whose page does not fit, want 1", st.DedicatedFallbacks)
	}
	mustWrite(t, small, pattern(32<<10, 4))
	wantBytes(t, small, pattern(32<<10, 4))
}

// While a capture window is open the dedicated fallback is not taken: the
// rehearsal and the recording reserve from the pools what the warmup did,
// and a warmup buffer of its own storage would leave no such room. The arena's own-size page is pool room, so
// it is taken there as anywhere.
func TestNoExactFallbackWhileACaptureWindowIsOpen(t *testing.T) {
	d := openHost(t, WithCapacity(16*mib),
		WithProperties(Properties{MaxPageSize: 1 << 30, Alignment: 32, MaxMemory: 16 * mib}))
	s := d.DefaultStream()
	_ = mustAlloc(t, s, 9*mib)
	_ = mustAlloc(t, s, 5*mib) // an own-size page: 15 MiB held
	tok, err := s.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(bg, 32<<10); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("32 KiB in a prepared window with 1 MiB left = %v, want ErrOutOfMemory", err)
	}
	if err := s.AbortCapture(tok); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.DedicatedFallbacks != 0 {
		t.Fatalf("%d fallbacks in a capture window", st.DedicatedFallbacks)
	}
	mustFree(t, mustAlloc(t, s, 32<<10))
	if st := d.Stats(); st.DedicatedFallbacks != 1 {
		t.Fatalf("%d fallbacks once the window closed, want 1", st.DedicatedFallbacks)
	}
}
