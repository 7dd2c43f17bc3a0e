package backendtest

import (
	"fmt"
	"time"

	"github.com/gpumem/gpumem"
)

// checkRelocation: live buffers on a page an arena growth outdated are
// copied to current pages by Cleanup, byte for byte (the backend's
// CopyOnDevice), while another stream has work queued, which the
// relocation waits for; afterwards Writes, Reads and device ops reach the
// buffers at their new places.
func checkRelocation(c *checker) {
	d := c.device()
	s0 := d.DefaultStream()
	s1 := c.stream()

	type held struct {
		b    gpumem.Buffer
		want []byte
	}
	var moving []held
	// Arena buffers (the small pool is never outdated), at odd sizes.
	for i, size := range []uint64{arenaMin, arenaMin + 4097, 300<<10 + 3, 1<<20 + 5} {
		b := c.alloc(s0, size)
		p := pattern(size, uint32(70+i))
		c.write(b, p)
		moving = append(moving, held{b, p})
	}
	// A hole between them: the relocation copies what is live, not the page.
	gap := c.alloc(s0, 128<<10)
	tail := c.alloc(s0, 200<<10)
	tailWant := pattern(200<<10, 79)
	c.write(tail, tailWant)
	c.free(gap)
	moving = append(moving, held{tail, tailWant})

	c.outdate(s0)
	outdated := outdatedPages(d)
	before := d.Stats().Relocation

	// The other stream works meanwhile: its own buffers, and a read of
	// one of s0's buffers.
	n := uint64(256 << 10)
	src, dst := c.alloc(s1, n), c.alloc(s1, n)
	a := pattern(n, 80)
	c.write(src, a)
	done := c.stall(s1, 30*time.Millisecond)
	var seen gpumem.Buffer
	if c.o.Copy != nil {
		c.copyOp(s1, dst, src)
		seen = c.alloc(s1, moving[3].b.Size())
		c.copyOp(s1, seen, moving[3].b)
	} else {
		var l ledger
		l.op(c, s1, "other-stream-reads", gpumem.Use{Buffer: moving[3].b, Access: gpumem.Read})
	}

	c.cleanup()
	if !done() {
		c.fatalf("Cleanup relocated while another stream's op had not run (a relocation waits for every stream's work)")
	}
	after := d.Stats().Relocation
	moves, bytesMoved := after.Moves-before.Moves, after.BytesMoved-before.BytesMoved
	var liveBytes uint64
	for _, h := range moving {
		liveBytes += h.b.Size()
	}
	if moves != uint64(len(moving)) || bytesMoved != liveBytes {
		c.fatalf("Cleanup over %d outdated pages moved %d allocations (%d bytes), want the %d live on them (%d bytes)",
			outdated, moves, bytesMoved, len(moving), liveBytes)
	}
	if n := outdatedPages(d); n != 0 {
		c.fatalf("%d outdated pages left after Cleanup", n)
	}
	for _, h := range moving {
		c.want(fmt.Sprintf("a %d-byte buffer relocated off an outdated page", h.b.Size()), h.b, h.want)
	}
	c.want("another stream's copy during the relocation", dst, a)
	if !seen.IsZero() {
		c.want("another stream's copy of a buffer the relocation moved", seen, moving[3].want)
	}

	// At their new places: written, read and copied.
	for i, h := range moving {
		h.want = pattern(h.b.Size(), uint32(90+i))
		c.write(h.b, h.want)
		moving[i] = h
	}
	if c.o.Copy != nil {
		c.copyOp(s1, seen, moving[3].b)
		c.want("a copy on another stream from a relocated buffer", seen, moving[3].want)
		p := pattern(seen.Size(), 99)
		c.write(seen, p)
		c.copyOp(s0, moving[3].b, seen) // into a relocated buffer
		moving[3].want = p
	}
	for _, h := range moving {
		c.want("a relocated buffer written at its new place", h.b, h.want)
	}
	for _, h := range moving {
		c.free(h.b)
	}
	c.free(src, dst)
	if !seen.IsZero() {
		c.free(seen)
	}
	c.cleanup()
	c.empty("after the relocation")
}
