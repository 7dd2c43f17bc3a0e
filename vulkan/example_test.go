package vulkan_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/vulkan"
)

// Open a device, load a compute shader from SPIR-V and dispatch it inside
// an op on gpumem buffers. go test runs it: on lavapipe (or a GPU) the
// shader computes y; where there is no Vulkan it falls back to gpumem.Open,
// as a program should, and an op computes the same on the host, so the
// output is the same everywhere.
func Example() {
	ctx := context.Background()
	const n = 1 << 16
	host := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32(i)))
	}
	dev, err := vulkan.OpenDevice(vulkan.Options{})
	if errors.Is(err, gpumem.ErrNotSupported) {
		fmt.Println(saxpyOnTheHost(host)) // no Vulkan device here
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	be := dev.Backend().(*vulkan.Backend)

	// Your own SPIR-V (glslc -o saxpy.spv saxpy.comp), with how it takes
	// its arguments: storage buffers at set 0, bindings 0..1, and 8 bytes
	// of push constants. The spec is checked against the module.
	spirv, _ := vulkan.ShippedSPIRV(vulkan.KernelSaxpy)
	saxpy, err := be.LoadKernel("saxpy", spirv, vulkan.KernelSpec{Buffers: 2, PushConstants: 8})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer saxpy.Close()

	s := dev.DefaultStream()
	x, _ := s.Alloc(ctx, 4*n)
	y, _ := s.Alloc(ctx, 4*n)
	_ = x.Write(ctx, host)
	_ = y.Write(ctx, host)

	uses := []gpumem.Use{{Buffer: x, Access: gpumem.Read}, {Buffer: y, Access: gpumem.ReadWrite}}
	err = vulkan.Enqueue(s, "saxpy", uses, func(op *vulkan.Op) error {
		// Recorded into the op's command buffer, bound at the buffers'
		// current places, submitted when this function returns.
		return op.Dispatch(saxpy, vulkan.GroupsFor(n, 64),
			[]vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n), float32(2)))
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := y.Read(ctx) // waits for the dispatch
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(math.Float32frombits(binary.LittleEndian.Uint32(out[4*10:]))) // 2*10 + 10
	// Output: 30
}

// saxpyOnTheHost is Example's fallback: the same y = 2x + y on a host
// device, as an op over the buffers' bytes.
func saxpyOnTheHost(host []byte) any {
	ctx := context.Background()
	dev, err := gpumem.Open()
	if err != nil {
		return err
	}
	defer dev.Close()
	s := dev.DefaultStream()
	x, _ := s.Alloc(ctx, uint64(len(host)))
	y, _ := s.Alloc(ctx, uint64(len(host)))
	_ = x.Write(ctx, host)
	_ = y.Write(ctx, host)
	uses := []gpumem.Use{{Buffer: x, Access: gpumem.Read}, {Buffer: y, Access: gpumem.ReadWrite}}
	err = s.Enqueue("saxpy", uses, func(res []storage.Resource) error {
		xs, ys := res[0].Bytes, res[1].Bytes
		for i := 0; i+4 <= len(ys); i += 4 {
			v := 2*math.Float32frombits(binary.LittleEndian.Uint32(xs[i:])) + math.Float32frombits(binary.LittleEndian.Uint32(ys[i:]))
			binary.LittleEndian.PutUint32(ys[i:], math.Float32bits(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
	out, err := y.Read(ctx)
	if err != nil {
		return err
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(out[4*10:]))
}
