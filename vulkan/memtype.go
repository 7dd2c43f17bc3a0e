// Choosing a memory type, as the Vulkan Memory Allocator does: among the
// types a resource allows (memoryTypeBits), those with every required
// property flag, cheapest first, where each preferred flag missing and each
// unwanted flag present costs one. On an allocation failure the next
// candidate is tried.

package vulkan

import (
	"math/bits"
	"sort"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// memoryWants are the property flags an allocation requires, prefers and
// would rather not have.
type memoryWants struct {
	required, preferred, unwanted uint32
}

var (
	// pageMemory is for gpumem's pages: device-local; on a discrete GPU the
	// host-visible window of device memory (ReBAR) is scarce, so a type
	// without HOST_VISIBLE is preferred, while an integrated GPU or
	// lavapipe, whose only device-local type is host-visible, still gets
	// one (and the backend then maps it for Write and Read).
	pageMemory = memoryWants{required: vk.MemoryPropertyDeviceLocal, unwanted: vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCached}
	// stagingMemory is for host-visible staging buffers: coherent and
	// cached (reads come back through them), not device-local.
	stagingMemory = memoryWants{required: vk.MemoryPropertyHostVisible, preferred: vk.MemoryPropertyHostCoherent | vk.MemoryPropertyHostCached, unwanted: vk.MemoryPropertyDeviceLocal}
)

// candidates returns the indices of the types allowed by typeBits that
// have every required flag, cheapest first (ties: lower index first).
func (w memoryWants) candidates(types []MemoryType, typeBits uint32) []int {
	var out []int
	for i, t := range types {
		if typeBits&(1<<uint(i)) == 0 || t.Flags&w.required != w.required {
			continue
		}
		out = append(out, i)
	}
	cost := func(i int) int {
		f := types[i].Flags
		return bits.OnesCount32(w.preferred&^f) + bits.OnesCount32(w.unwanted&f)
	}
	sort.SliceStable(out, func(a, b int) bool { return cost(out[a]) < cost(out[b]) })
	return out
}
