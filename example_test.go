package gpumem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpumem/gpumem"
)

// Open a host-backed device, allocate a buffer on its default stream,
// write it, read it back (Read waits for the stream's earlier work), free
// it and close the device.
func Example() {
	ctx := context.Background()
	d, err := gpumem.Open()
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer d.Close()

	s := d.DefaultStream()
	b, err := s.Alloc(ctx, 5)
	if err != nil {
		fmt.Println("alloc:", err)
		return
	}
	if err := b.Write(ctx, []byte("hello")); err != nil {
		fmt.Println("write:", err)
		return
	}
	got, err := b.Read(ctx)
	if err != nil {
		fmt.Println("read:", err)
		return
	}
	fmt.Printf("%s (%d bytes in use)\n", got, d.Stats().BytesInUse)
	if err := b.Free(); err != nil {
		fmt.Println("free:", err)
		return
	}
	fmt.Println("in use after free:", d.Stats().BytesInUse)
	// Output:
	// hello (5 bytes in use)
	// in use after free: 0
}

// Ask whether an allocation would fit before making it, as an autotuner or
// a scheduler sizing a batch would, instead of learning by a failed
// allocation: WouldFit answers without side effects, and how the Alloc
// would serve it.
func ExampleStream_WouldFit() {
	ctx := context.Background()
	const mib = 1 << 20
	d, err := gpumem.Open(gpumem.WithSim(), gpumem.WithCapacity(64*mib)) // pages of at most 16 MiB
	if err != nil {
		fmt.Println("open:", err)
		return
	}
	defer d.Close()
	s := d.DefaultStream()

	fmt.Println(s.WouldFit(1 * mib))
	b, err := s.Alloc(ctx, 1*mib)
	if err != nil {
		fmt.Println("alloc:", err)
		return
	}
	_ = b.Free() // its page stays cached
	fmt.Println(s.WouldFit(1 * mib))
	fmt.Println(s.WouldFit(3 * mib))
	fmt.Println(s.WouldFit(100 * mib))

	// Six 10 MiB buffers, three of them freed: their pages stay cached.
	var bufs []gpumem.Buffer
	for range 6 {
		b, err := s.Alloc(ctx, 10*mib)
		if err != nil {
			fmt.Println("alloc:", err)
			return
		}
		bufs = append(bufs, b)
	}
	for _, b := range bufs[:3] {
		_ = b.Free()
	}
	fmt.Println(s.WouldFit(10 * mib))
	fmt.Println(s.WouldFit(30 * mib))
	f := s.WouldFit(40 * mib)
	fmt.Println(f.OK, errors.Is(f.Err, gpumem.ErrOutOfMemory))
	// Output:
	// fits: a new page of 2097152 bytes
	// fits: free room the stream's pages hold
	// fits: the arena grows to pages of 4194304 bytes, its first page of 4194304 bytes
	// does not fit: 104857600 bytes are more than the device's capacity of 67108864 bytes
	// fits: free room the stream's pages hold
	// fits after the streams' cached memory is given back: storage of its own, 31457280 bytes
	// false true
}
