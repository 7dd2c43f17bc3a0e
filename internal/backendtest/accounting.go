package backendtest

import (
	"context"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// checkAccounting: Stats agree with the live buffers and the report after
// allocations on two streams, clones, frees (one while another stream's op
// still uses the buffer) and Cleanup, and come back to zero, or to what
// the backend declares it caches, once everything is freed and cleaned up.
func checkAccounting(c *checker) {
	d := c.device()
	s0 := d.DefaultStream()
	s1 := c.stream()

	c.consistent("a fresh device", 0, 0)
	if st := d.Stats(); st.BytesInUse != 0 || st.BytesReserved != 0 || st.BytesPendingFree != 0 {
		c.fatalf("a fresh device: BytesInUse %d, BytesReserved %d, BytesPendingFree %d; want 0",
			st.BytesInUse, st.BytesReserved, st.BytesPendingFree)
	}

	sizes := []uint64{1, 31, 4096 + 7, 64<<10 + 3, 256 << 10, 3<<20 + 1}
	var live []gpumem.Buffer
	var inUse uint64
	for i, size := range sizes {
		s := []*gpumem.Stream{s0, s1}[i%2]
		live = append(live, c.alloc(s, size))
		inUse += size
		c.consistent("after allocating", inUse, len(live))
	}
	if st := d.Stats(); st.BytesAllocated == 0 || st.StorageAllocs == 0 {
		c.fatalf("%d buffers of %d bytes live, yet BytesAllocated %d and StorageAllocs %d", len(live), inUse, st.BytesAllocated, st.StorageAllocs)
	}
	if c.o.DriverObjects != nil && c.o.DriverObjects()-c.driverCached() <= 0 {
		c.fatalf("%d buffers live, yet the driver holds %d objects beyond the declared cache", len(live), c.o.DriverObjects()-c.driverCached())
	}

	// A clone is one allocation: BytesInUse drops at the last reference.
	clone := live[2].Clone()
	if clone.IsZero() {
		c.fatalf("Clone of a live buffer returned nil")
	}
	c.free(live[2])
	c.consistent("after freeing one of two references", inUse, len(live))
	c.free(clone)
	inUse -= live[2].Size()
	if err := live[2].Free(); !isErr(err, gpumem.ErrAlreadyFreed) {
		c.fatalf("a second Free = %v, want ErrAlreadyFreed", err)
	}
	live = append(live[:2], live[3:]...)
	c.consistent("after freeing the last reference", inUse, len(live))

	// Freed while an op on another stream still uses it: out of
	// BytesInUse at once, its room held (pending free) until the op ran.
	shared := live[0] // on s0
	done := c.stall(s1, 10*time.Millisecond)
	err := s1.Enqueue("backendtest.read", []gpumem.Use{{Buffer: shared, Access: gpumem.Read}}, func([]storage.Resource) error { return nil })
	c.ok("Enqueue of a read on another stream", err)
	c.free(shared)
	inUse -= shared.Size()
	live = live[1:]
	if st := d.Stats(); st.BytesInUse != inUse {
		c.fatalf("a buffer freed while another stream's op uses it: BytesInUse %d, want %d (it drops at the Free)", st.BytesInUse, inUse)
	}
	c.sync(s0, s1)
	if !done() {
		c.fatalf("Synchronize returned before the stream's op ran")
	}
	c.consistent("after the other stream's use ran", inUse, len(live))

	c.cleanup()
	c.consistent("after Cleanup with buffers live", inUse, len(live))

	c.free(live...)
	c.consistent("after freeing everything", 0, 0)
	c.cleanup()
	c.empty("after freeing everything and Cleanup")

	// The device still works after giving everything back.
	b := c.alloc(s1, 1000)
	c.consistent("after allocating again", 1000, 1)
	c.free(b)
	c.cleanup()
	c.empty("after the second Cleanup")

	c.ok("Device.Close", d.Close())
	if _, err := s0.Alloc(context.Background(), 64); !isErr(err, gpumem.ErrClosed) {
		c.fatalf("Alloc on a closed device = %v, want ErrClosed", err)
	}
	if c.o.DriverObjects != nil {
		if n := c.o.DriverObjects() - c.driverCached(); n != 0 {
			c.fatalf("after Device.Close the driver still holds %d objects beyond the declared cache", n)
		}
	}
}

func (c *checker) driverCached() int {
	if c.o.DriverCached == nil {
		return 0
	}
	return c.o.DriverCached()
}

func (c *checker) cached() uint64 {
	if c.o.CachedBytes == nil {
		return 0
	}
	return c.o.CachedBytes(c.d)
}

// consistent checks the rules that hold at any moment: BytesInUse is the
// requested bytes of the buffers alive, the report agrees with Stats, the
// pools' room covers what they hold, the storage holds at least the bytes
// the pools map, and the storage calls balance.
func (c *checker) consistent(when string, inUse uint64, buffers int) {
	c.t.Helper()
	st := c.d.Stats()
	u := c.d.Report().Usage()
	switch {
	case st.BytesInUse != inUse:
		c.fatalf("%s: Stats.BytesInUse %d, want %d (the requested bytes of the buffers alive)", when, st.BytesInUse, inUse)
	case u.BytesInUse != st.BytesInUse || u.BytesReserved != st.BytesReserved || u.BytesPendingFree != st.BytesPendingFree:
		c.fatalf("%s: the report's usage (in use %d, reserved %d, pending free %d) differs from Stats (%d, %d, %d)",
			when, u.BytesInUse, u.BytesReserved, u.BytesPendingFree, st.BytesInUse, st.BytesReserved, st.BytesPendingFree)
	case u.Allocations != uint64(buffers):
		c.fatalf("%s: the report counts %d live allocations, want %d", when, u.Allocations, buffers)
	case st.BytesReserved < u.BytesOccupied():
		c.fatalf("%s: BytesReserved %d is less than the pools occupy (%d: in use, padding, pending free)", when, st.BytesReserved, u.BytesOccupied())
	case st.BytesAllocated < u.BytesMapped():
		c.fatalf("%s: BytesAllocated %d is less than the pools' mapped bytes %d", when, st.BytesAllocated, u.BytesMapped())
	case c.d.BytesAllocated() != st.BytesAllocated:
		c.fatalf("%s: Device.BytesAllocated %d, Stats.BytesAllocated %d", when, c.d.BytesAllocated(), st.BytesAllocated)
	case st.StorageDeallocs > st.StorageAllocs:
		c.fatalf("%s: %d storage deallocations of %d allocations", when, st.StorageDeallocs, st.StorageAllocs)
	}
}

// empty checks a device with no buffer after a Cleanup: nothing in use,
// pending or reserved, and the storage holds nothing beyond what the
// backend declared it caches.
func (c *checker) empty(when string) {
	c.t.Helper()
	c.consistent(when, 0, 0)
	st := c.d.Stats()
	cached := c.cached()
	switch {
	case st.BytesPendingFree != 0 || st.BytesReserved != 0:
		c.fatalf("%s: BytesPendingFree %d, BytesReserved %d; want 0", when, st.BytesPendingFree, st.BytesReserved)
	case st.BytesAllocated != cached:
		c.fatalf("%s: BytesAllocated %d, want %d (what Options.CachedBytes declares)", when, st.BytesAllocated, cached)
	case cached == 0 && st.StorageAllocs != st.StorageDeallocs:
		c.fatalf("%s: %d storage allocations, %d deallocations: the storage still holds some", when, st.StorageAllocs, st.StorageDeallocs)
	}
	if c.o.DriverObjects != nil {
		if n := c.o.DriverObjects() - c.driverCached(); n != 0 {
			c.fatalf("%s: the driver still holds %d memory objects beyond the declared cache (%d)", when, n, c.driverCached())
		}
	}
}
