package backendtest

import (
	"context"

	"github.com/gpumem/gpumem"
)

// checkCapture: while a stream records, Cleanup (of any stream) and
// Defragment are refused with ErrRecording and nothing moves; a host sync
// on the recording stream dooms the recording; a sealed graph guards its
// pages, which stay put through an arena growth and Cleanup while its
// launches see the bytes there; closed, its pages move again. A backend
// whose queues cannot record (Options.NoCapture) must refuse a capture
// with ErrNotSupported.
func checkCapture(c *checker) {
	d := c.device()
	ctx := context.Background()
	s0 := d.DefaultStream()
	if c.o.NoCapture {
		if _, err := s0.PrepareCapture(); !isErr(err, gpumem.ErrNotSupported) {
			c.fatalf("Options.NoCapture, yet PrepareCapture = %v, want ErrNotSupported", err)
		}
		if _, err := s0.Capture(ctx, func(context.Context, *gpumem.Stream) error { return nil }); !isErr(err, gpumem.ErrNotSupported) {
			c.fatalf("Options.NoCapture, yet Capture = %v, want ErrNotSupported", err)
		}
		c.skipf("Options.NoCapture: the queues cannot record graphs; the capture rules do not apply")
	}
	s1 := c.stream()
	n := uint64(arenaMin + 31<<10) // arena buffers: a growth outdates their page
	src, dst := c.alloc(s0, n), c.alloc(s0, n)
	other := c.alloc(s1, n)
	a := pattern(n, 40)
	c.write(src, a)
	c.write(dst, pattern(n, 41))
	c.write(other, pattern(n, 42))
	var l ledger
	record := func(s *gpumem.Stream) {
		if c.o.Copy != nil {
			c.copyOp(s, dst, src)
		} else {
			l.op(c, s, "recorded", gpumem.Use{Buffer: dst, Access: gpumem.Write}, gpumem.Use{Buffer: src, Access: gpumem.Read})
		}
	}

	// While s0 records: cleanups and defragmentation are refused, and
	// nothing moves.
	tok, err := s0.PrepareCapture()
	c.ok("PrepareCapture", err)
	c.ok("BeginCapture", s0.BeginCapture(tok))
	before := d.Stats()
	if err := d.Cleanup(ctx); !isErr(err, gpumem.ErrRecording) {
		c.fatalf("Device.Cleanup while a stream records = %v, want ErrRecording", err)
	}
	if err := s1.Cleanup(ctx); !isErr(err, gpumem.ErrRecording) {
		c.fatalf("Cleanup of another stream while one records = %v, want ErrRecording", err)
	}
	if _, err := d.Defragment(ctx, gpumem.DefragOptions{}); !isErr(err, gpumem.ErrRecording) {
		c.fatalf("Defragment while a stream records = %v, want ErrRecording", err)
	}
	record(s0)
	g, err := s0.EndCapture(tok)
	c.ok("EndCapture", err)
	defer g.Close()
	after := d.Stats()
	if after.Relocation.Moves != before.Relocation.Moves || after.Relocation.BytesMoved != before.Relocation.BytesMoved {
		c.fatalf("allocations moved while a stream recorded (%d moves, %d bytes)",
			after.Relocation.Moves-before.Relocation.Moves, after.Relocation.BytesMoved-before.Relocation.BytesMoved)
	}
	if after.GuardedPages == 0 {
		c.fatalf("a sealed graph over two buffers guards no page (Stats.GuardedPages 0)")
	}
	if g.Ops() == 0 {
		c.fatalf("the sealed graph holds no op, one was recorded")
	}

	// A host sync on the recording stream dooms the recording.
	tok2, err := s0.PrepareCapture()
	c.ok("PrepareCapture again", err)
	c.ok("BeginCapture again", s0.BeginCapture(tok2))
	if err := s0.Synchronize(ctx); !isErr(err, gpumem.ErrRecording) {
		c.fatalf("Synchronize on the recording stream = %v, want ErrRecording", err)
	}
	if g2, err := s0.EndCapture(tok2); err == nil {
		g2.Close()
		c.fatalf("a recording doomed by Synchronize sealed a graph")
	}

	// The graph launches where it recorded.
	b := pattern(n, 43)
	c.write(src, b)
	c.ok("Graph.Launch", g.Launch(ctx))
	if c.o.Copy != nil {
		c.want("a buffer a launched graph copied into", dst, b)
	}

	// An arena growth outdates the graph's page: Cleanup leaves it, and
	// the graph's buffers where they are.
	c.outdate(s0)
	moves := d.Stats().Relocation.Moves
	c.cleanup()
	if got := d.Stats().Relocation.Moves; got != moves {
		c.fatalf("Cleanup moved %d allocations off a page a live graph guards", got-moves)
	}
	if outdatedPages(d) == 0 {
		c.fatalf("Cleanup gave back an outdated page a live graph guards")
	}
	cc := pattern(n, 44)
	c.write(src, cc)
	c.ok("Graph.Launch after Cleanup", g.Launch(ctx))
	if c.o.Copy != nil {
		c.want("a buffer a graph launched after Cleanup copied into", dst, cc)
	}
	c.sync(s0)

	// Closed, the graph's pages are ordinary: Cleanup moves its buffers.
	c.ok("Graph.Close", g.Close())
	if st := d.Stats(); st.GuardedPages != 0 {
		c.fatalf("after Graph.Close %d pages are still guarded", st.GuardedPages)
	}
	c.roomOnCurrentPage(s0) // the first Cleanup gave the empty current page back
	c.cleanup()
	if got := d.Stats().Relocation.Moves; got < moves+2 {
		c.fatalf("Cleanup after Graph.Close moved %d allocations off the outdated page, want the graph's 2", got-moves)
	}
	if n := outdatedPages(d); n != 0 {
		c.fatalf("%d outdated pages left after Graph.Close and Cleanup", n)
	}
	if c.o.Copy != nil {
		c.want("a graph's copy target after it moved", dst, cc)
	}
	c.want("a graph's copy source after it moved", src, cc)
	c.want("another stream's buffer after the captures", other, pattern(n, 42))
	c.free(src, dst, other)
	c.cleanup()
	c.empty("after the captures")
}
