package vulkan_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan"
)

// Open a device, load a compute shader from SPIR-V and dispatch it inside
// an op on gpumem buffers. (Not run by go test: it needs a Vulkan device;
// the package's tests and examples/vulkan run the same calls.)
func Example() {
	dev, err := vulkan.OpenDevice(vulkan.Options{})
	if errors.Is(err, gpumem.ErrNotSupported) {
		fmt.Println("no Vulkan device here; gpumem.Open runs on the host:", err)
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	ctx := context.Background()
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
	const n = 1 << 16
	x, _ := s.Alloc(ctx, 4*n)
	y, _ := s.Alloc(ctx, 4*n)
	host := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(host[4*i:], math.Float32bits(float32(i)))
	}
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
}
