// Command quickstart is the README's Go quick start: it opens a device,
// allocates a buffer on a stream, writes it, runs an op over it, reads the
// result back and frees it. It needs no GPU: gpumem.Open runs on host
// memory (see the README's backends for cuda and vulkan).
package main

import (
	"bytes"
	"context"
	"fmt"
	"log"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

func main() {
	ctx := context.Background()
	dev, err := gpumem.Open() // host memory; cuda.OpenDevice or vulkan.OpenDevice for a GPU
	check(err)
	defer dev.Close()

	s := dev.DefaultStream()
	buf, err := s.Alloc(ctx, 1<<20)
	check(err)
	check(buf.Write(ctx, bytes.Repeat([]byte{21}, 1<<20)))
	check(s.Enqueue("double", []gpumem.Use{{Buffer: buf, Access: gpumem.ReadWrite}},
		func(res []storage.Resource) error { // runs on the stream, in order, at the buffer's current place
			for i, v := range res[0].Bytes {
				res[0].Bytes[i] = 2 * v
			}
			return nil
		}))
	out, err := buf.Read(ctx) // waits for the op
	check(err)
	fmt.Println(out[0], dev.Stats().BytesInUse) // 42 1048576
	check(buf.Free())
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
