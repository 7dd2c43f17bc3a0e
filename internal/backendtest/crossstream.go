package backendtest

import (
	"slices"
	"time"

	"github.com/gpumem/gpumem"
)

// checkCrossStream: a use on another stream runs after the owner's work
// enqueued before it (X1) and before the owner's work enqueued after it
// (X2), even when the stream that should wait is the idle one; on bytes,
// a copy on another stream reads what the owner wrote and the owner's
// next write waits for it, and a Read waits for another stream's write.
//
// The run order is telling where executors run the ops (host, sim): the
// stalls make a missing wait overtake. Where ops run inside Enqueue (cuda,
// vulkan) it is the enqueue order, and the device's order is what the
// copies' bytes show.
func checkCrossStream(c *checker) {
	d := c.device()
	s0 := d.DefaultStream()
	s1 := c.stream()
	const stall = 20 * time.Millisecond

	buf := c.alloc(s0, 4096)
	var l ledger
	c.stall(s0, stall) // the owner's write comes late
	l.op(c, s0, "owner-writes", gpumem.Use{Buffer: buf, Access: gpumem.Write})
	c.stall(s1, 2*stall) // the other stream's read comes later still
	l.op(c, s1, "other-reads", gpumem.Use{Buffer: buf, Access: gpumem.Read})
	l.op(c, s0, "owner-writes-again", gpumem.Use{Buffer: buf, Access: gpumem.Write})
	c.sync(s0, s1)
	want := []string{"owner-writes", "other-reads", "owner-writes-again"}
	if got := l.order(); !slices.Equal(got, want) {
		c.fatalf("ops on two streams sharing a buffer ran as %v, want %v", got, want)
	}

	if c.o.Copy == nil {
		c.t.Logf("%s: no Options.Copy: cross-stream order is checked on ops' run order only, not on bytes", c.name)
		c.free(buf)
		return
	}
	n := uint64(512 << 10)
	src := c.alloc(s0, n) // owned by s0
	dst := c.alloc(s1, n) // owned by s1
	a, b := pattern(n, 30), pattern(n, 31)
	c.write(src, pattern(n, 29))
	c.stall(s0, stall)
	c.write(src, a)        // late on s0
	c.stall(s1, 2*stall)   // the copy comes later still
	c.copyOp(s1, dst, src) // X1: after the write of a
	c.write(src, b)        // X2: after the copy
	c.want("a copy on another stream than its source's owner", dst, a)
	c.want("the source written by its owner after another stream's copy", src, b)

	// The other way: s1 copies into a buffer s0 owns; s0's Read waits.
	back := c.alloc(s0, n)
	c.write(back, pattern(n, 32))
	c.stall(s1, stall)
	c.copyOp(s1, back, dst)
	c.want("a Read by the owner of a buffer another stream copied into", back, a)

	c.free(buf, src, dst, back)
	c.sync(s0, s1)
	c.cleanup()
	c.empty("after the cross-stream checks")
}
