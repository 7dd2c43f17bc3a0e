package backendtest

import (
	"context"
	"fmt"

	"github.com/gpumem/gpumem"
)

// oomCapacity is the device capacity the out-of-memory check opens with:
// small, so filling it is cheap.
const oomCapacity = 16 << 20

// checkOutOfMemory: with WithCapacity, an Alloc past the capacity fails
// with an error matching ErrOutOfMemory, on every stream, and loses
// nothing: the buffers allocated before keep their bytes, the counters
// say what is live, and freed room serves allocations again.
func checkOutOfMemory(c *checker) {
	d := c.device(gpumem.WithCapacity(oomCapacity))
	ctx := context.Background()
	s0 := d.DefaultStream()
	s1 := c.stream()

	// One allocation larger than the device.
	if b, err := s0.Alloc(ctx, oomCapacity+1); !isErr(err, gpumem.ErrOutOfMemory) {
		if err == nil {
			b.Free()
		}
		c.fatalf("Alloc of %d bytes on a device of %d = %v, want ErrOutOfMemory", oomCapacity+1, oomCapacity, err)
	}
	if fit := d.DefaultStream().WouldFit(oomCapacity + 1); fit.OK || !isErr(fit.Err, gpumem.ErrOutOfMemory) {
		c.fatalf("WouldFit(%d) on a device of %d = %v, want a refusal matching ErrOutOfMemory", oomCapacity+1, oomCapacity, fit)
	}

	// Fill it with 1 MiB buffers on two streams until an Alloc fails.
	const size = 1 << 20
	type held struct {
		b    gpumem.Buffer
		want []byte
	}
	var live []held
	var failure error
	for i := 0; i < 2*oomCapacity/size; i++ {
		s := []*gpumem.Stream{s0, s1}[i%2]
		b, err := s.Alloc(ctx, size)
		if err != nil {
			failure = fmt.Errorf("Alloc %d on %s: %w", i, s.Name(), err)
			break
		}
		p := pattern(size, uint32(60+i))
		c.write(b, p)
		live = append(live, held{b, p})
	}
	if failure == nil {
		c.fatalf("%d allocations of %d bytes fit a device of %d bytes", len(live), size, oomCapacity)
	}
	if !isErr(failure, gpumem.ErrOutOfMemory) {
		c.fatalf("the Alloc past the capacity failed with %v, want an error matching ErrOutOfMemory", failure)
	}
	if len(live) == 0 {
		c.fatalf("not one %d-byte buffer fits a device of %d: %v", size, oomCapacity, failure)
	}
	st := d.Stats()
	if st.BytesInUse != uint64(len(live))*size {
		c.fatalf("after a failed Alloc BytesInUse is %d, want the %d buffers' %d bytes", st.BytesInUse, len(live), uint64(len(live))*size)
	}
	if st.BytesAllocated > oomCapacity {
		c.fatalf("BytesAllocated %d passed the capacity %d", st.BytesAllocated, oomCapacity)
	}
	if st.FailedReserves["out_of_memory"] == 0 {
		c.fatalf("a failed Alloc counted no out_of_memory reservation failure (FailedReserves %v)", st.FailedReserves)
	}
	for _, h := range live {
		c.want("a buffer allocated before the device ran out of memory", h.b, h.want)
	}
	c.consistent("after running out of memory", st.BytesInUse, len(live))

	// Freed room serves allocations again: a slice freed on a stream
	// serves that stream's next Alloc.
	var on0, on1 []held
	for _, h := range live {
		if h.b.Stream() == s0 {
			on0 = append(on0, h)
		} else {
			on1 = append(on1, h)
		}
	}
	c.free(on0[0].b)
	on0[0].b = c.alloc(s0, size)
	on0[0].want = pattern(size, 199)
	c.write(on0[0].b, on0[0].want)

	// And pages a stream emptied serve another stream's Alloc: the
	// Alloc's make-room gives them back to the device first, and the
	// backend must take them back into its budget before the retry.
	for _, h := range on0 {
		c.free(h.b)
	}
	kept := on1
	for i := range on0 {
		b, err := s1.Alloc(ctx, size)
		if err != nil {
			c.fatalf("Alloc %d of %d bytes on %s, after %s freed %d such buffers and its pages are empty: %v",
				i, size, s1.Name(), s0.Name(), len(on0), err)
		}
		p := pattern(size, uint32(200+i))
		c.write(b, p)
		kept = append(kept, held{b, p})
	}
	for _, h := range kept {
		c.want("a buffer after freed room was allocated again", h.b, h.want)
	}
	for _, h := range kept {
		c.free(h.b)
	}
	c.cleanup()
	c.empty("after running out of memory and freeing everything")
}
