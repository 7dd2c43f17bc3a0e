package gpumem

import (
	"errors"
	"testing"
)

// A held buffer's Free ends it (BytesInUse) but keeps its memory taken
// (BytesPendingFree): an allocation that would have reused it goes
// elsewhere until the hold is released.
func TestBufferHoldKeepsTheFreedMemoryTakenUntilReleased(t *testing.T) {
	d := openHost(t, WithSim())
	s := d.DefaultStream()
	b := mustAlloc(t, s, 4*mib)
	release, err := b.Hold()
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, b)
	if st := d.Stats(); st.BytesInUse != 0 || st.BytesPendingFree < 4*mib {
		t.Fatalf("held and freed: BytesInUse %d, BytesPendingFree %d; want 0 and the buffer's 4 MiB", st.BytesInUse, st.BytesPendingFree)
	}
	before := d.BytesAllocated()
	c := mustAlloc(t, s, 4*mib)
	if d.BytesAllocated() == before {
		t.Fatalf("an allocation reused the held buffer's memory (device bytes stayed %d)", before)
	}
	mustFree(t, c)
	release()
	release() // a second call does nothing
	if st := d.Stats(); st.BytesPendingFree != 0 {
		t.Fatalf("released: BytesPendingFree %d, want 0", st.BytesPendingFree)
	}
	if _, err := b.Hold(); !errors.Is(err, ErrAlreadyFreed) {
		t.Fatalf("Hold of a freed buffer: %v, want ErrAlreadyFreed", err)
	}
}

// While a HoldReleases hold is open the stream's page deallocations wait;
// holds pass in order, and a release goes back at the pass that lets it.
func TestHoldReleasesHoldsDeallocationsUntilItsHoldsPassInOrder(t *testing.T) {
	d := openHost(t, WithSim())
	s := d.DefaultStream()
	dedicated := func() Buffer {
		done := s.Window(Dedicated)
		defer done()
		return mustAlloc(t, s, 4*mib)
	}
	a, b := dedicated(), dedicated()
	first, err := s.HoldReleases()
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, a)
	mustCleanup(t, d)
	second, err := s.HoldReleases()
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, b)
	mustCleanup(t, d)
	if got := d.BytesAllocated(); got < 8*mib {
		t.Fatalf("both holds open: device bytes %d, want both freed 4 MiB slots still held", got)
	}
	second() // out of order: nothing passes until the first does
	if got := d.BytesAllocated(); got < 8*mib {
		t.Fatalf("only the second hold passed: device bytes %d, want both slots still held", got)
	}
	first()
	first() // a second call does nothing
	if got := d.BytesAllocated(); got != 0 {
		t.Fatalf("both holds passed: device bytes %d, want 0", got)
	}
	// With the holds passed, releases go back at once again.
	c := dedicated()
	mustFree(t, c)
	mustCleanup(t, d)
	if got := d.BytesAllocated(); got != 0 {
		t.Fatalf("no hold open: device bytes %d after the cleanup, want 0", got)
	}
	// Close gives back what an open hold still holds.
	third, err := s.HoldReleases()
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, dedicated())
	mustCleanup(t, d)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	third()
	if _, err := s.HoldReleases(); !errors.Is(err, ErrClosed) {
		t.Fatalf("HoldReleases on a closed device: %v, want ErrClosed", err)
	}
}
