// The kernels shipped with the package: GLSL sources in shaders/, their
// SPIR-V committed beside them (scripts/vulkan-shaders.sh regenerates it;
// shaders_test.go checks it is current).

package vulkan

import (
	"embed"
	"fmt"
	"slices"
	"strings"
)

//go:embed shaders/*.spv
var shaderFiles embed.FS

// Names of the shipped kernels, for Backend.LoadShipped. Each loops over
// its items with a grid stride (KernelSpec.GridStride), so GroupsFor(n,
// local) works for any n: Dispatch caps the groups at MaxStrideGroups and
// the loop covers the rest, where a kernel of one item per invocation would
// stop at maxComputeWorkGroupCount groups (4,194,240 items at a local size
// of 64 on a device with the least limit, 65,535).
const (
	// KernelSaxpy: y[i] = a*x[i] + y[i] over float32; buffers x, y; push
	// constants Push(n uint32, a float32); GroupsFor(n, 64).
	KernelSaxpy = "saxpy"
	// KernelReduceU32: sums[b] = the uint32 sum of v[256b:256b+256] (zeros
	// past n) for each of the ceil(n/256) blocks b, whatever the number of
	// groups; buffers v, sums; Push(n uint32); GroupsFor(n, 256).
	KernelReduceU32 = "reduce_u32"
	// KernelAddU32: v[i] += k over uint32; buffer v; Push(n, k uint32);
	// GroupsFor(n, 64).
	KernelAddU32 = "add_u32"
)

// shippedSpecs are the shipped kernels' argument layouts.
func shippedSpecs() map[string]KernelSpec {
	return map[string]KernelSpec{
		KernelSaxpy:     {Buffers: 2, PushConstants: 8, GridStride: true},
		KernelReduceU32: {Buffers: 2, PushConstants: 4, GridStride: true},
		KernelAddU32:    {Buffers: 1, PushConstants: 8, GridStride: true},
	}
}

// ShippedSPIRV returns the SPIR-V of a shipped kernel (a copy).
func ShippedSPIRV(name string) ([]byte, error) {
	b, err := shaderFiles.ReadFile("shaders/" + name + ".spv")
	if err != nil {
		return nil, fmt.Errorf("vulkan: %q is not a shipped kernel (%s): %w", name, strings.Join(shippedNames(), ", "), ErrArgs)
	}
	return slices.Clone(b), nil
}

func shippedNames() []string {
	var names []string
	for n := range shippedSpecs() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LoadShipped loads one of the shipped kernels (KernelSaxpy,
// KernelReduceU32, KernelAddU32).
func (b *Backend) LoadShipped(name string) (*Kernel, error) {
	spec, ok := shippedSpecs()[name]
	if !ok {
		return nil, fmt.Errorf("vulkan: %q is not a shipped kernel (%s): %w", name, strings.Join(shippedNames(), ", "), ErrArgs)
	}
	code, err := ShippedSPIRV(name)
	if err != nil {
		return nil, err
	}
	return b.LoadKernel(name, code, spec)
}
