package backendtest

import (
	"context"
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// byteSizes are the buffers the round trips use: single bytes, sizes just
// off the alignments backends use (32, 256, 4 KiB, 64 KiB), and buffers of
// several MiB, allocated in this order so each lies at the offset its
// neighbours leave in its page.
var byteSizes = []uint64{1, 3, 255, 256, 257, 4095, 4097, 64<<10 + 1, 1<<20 + 13, 5<<20 + 7}

// checkBytes: Write and Read round trips of patterned data at many sizes
// and offsets on two streams, partial writes over earlier ones, and a
// freed buffer that never reaches the bytes of the allocation that took
// its room.
func checkBytes(c *checker) {
	d := c.device()
	ctx := context.Background()
	s0 := d.DefaultStream()
	s1 := c.stream()
	if c.o.NoBytes {
		c.t.Logf("%s: Options.NoBytes: the storage holds no bytes; Reads are checked to succeed, not compared", c.name)
	}

	type held struct {
		b    gpumem.Buffer
		want []byte
	}
	var bufs []held
	for i, size := range byteSizes {
		for j, s := range []*gpumem.Stream{s0, s1} {
			b := c.alloc(s, size)
			p := pattern(size, uint32(10*i+j+1))
			c.write(b, p)
			bufs = append(bufs, held{b, p})
		}
	}
	for _, h := range bufs {
		c.want(fmt.Sprintf("a %d-byte round trip on %s", h.b.Size(), h.b.Stream().Name()), h.b, h.want)
	}

	// Partial writes land from offset 0 and leave the rest.
	for i, h := range bufs {
		if h.b.Size() < 2 {
			continue
		}
		k := h.b.Size()/2 + uint64(i%3)
		p := pattern(k, uint32(1000+i))
		c.write(h.b, p)
		copy(h.want, p)
	}
	for _, h := range bufs {
		c.want(fmt.Sprintf("a %d-byte buffer after a partial write", h.b.Size()), h.b, h.want)
	}

	// Writes the buffer cannot take.
	big := bufs[4]
	if err := big.b.Write(ctx, make([]byte, big.b.Size()+1)); !isErr(err, gpumem.ErrInvalidUse) {
		c.fatalf("Write of %d bytes into a %d-byte buffer = %v, want ErrInvalidUse", big.b.Size()+1, big.b.Size(), err)
	}
	c.ok("Write of no bytes", big.b.Write(ctx, nil))
	c.want("a buffer after a refused write", big.b, big.want)

	// A freed buffer never reads or writes its successor's bytes: free
	// each buffer of s0 and allocate the same size again (the room it
	// left is the first fit), then use the old reference.
	for i := 0; i < len(bufs); i += 2 {
		old := bufs[i]
		c.free(old.b)
		next := c.alloc(s0, old.b.Size())
		p := pattern(old.b.Size(), uint32(5000+i))
		c.write(next, p)
		if got, err := old.b.Read(ctx); !isErr(err, gpumem.ErrAlreadyFreed) {
			c.fatalf("Read of a freed %d-byte buffer = %d bytes, %v; want ErrAlreadyFreed", old.b.Size(), len(got), err)
		}
		if err := old.b.Write(ctx, old.want); !isErr(err, gpumem.ErrAlreadyFreed) {
			c.fatalf("Write into a freed %d-byte buffer = %v, want ErrAlreadyFreed", old.b.Size(), err)
		}
		err := s1.Enqueue("backendtest.use-freed", []gpumem.Use{{Buffer: old.b, Access: gpumem.Write}}, func([]storage.Resource) error { return nil })
		if !isErr(err, gpumem.ErrAlreadyFreed) {
			c.fatalf("Enqueue of an op using a freed buffer = %v, want ErrAlreadyFreed", err)
		}
		c.want("the allocation that took a freed buffer's room", next, p)
		bufs[i] = held{next, p}
	}
	for _, h := range bufs {
		c.want(fmt.Sprintf("a %d-byte buffer after its neighbours were freed and reallocated", h.b.Size()), h.b, h.want)
	}
	for _, h := range bufs {
		c.free(h.b)
	}
	c.cleanup()
	c.empty("after the round trips")
}
