package gpumem_test

import (
	"context"
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
