package vulkan

import (
	"slices"
	"testing"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// A discrete GPU's usual types: device-local, host-visible system memory,
// the host-visible device-local BAR window, cached system memory.
var discreteTypes = []MemoryType{
	{Flags: vk.MemoryPropertyDeviceLocal, Heap: 0},
	{Flags: vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCoherent, Heap: 1},
	{Flags: vk.MemoryPropertyDeviceLocal | vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCoherent, Heap: 2},
	{Flags: vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCoherent | vk.MemoryPropertyHostCached, Heap: 1},
}

func TestPagesPreferDeviceLocalMemoryTheHostCannotMap(t *testing.T) {
	got := pageMemory.candidates(discreteTypes, 0xf)
	if want := []int{0, 2}; !slices.Equal(got, want) {
		t.Fatalf("page candidates %v, want %v (device-local first, the BAR window as fallback)", got, want)
	}
	// The resource's memoryTypeBits rule first.
	if got := pageMemory.candidates(discreteTypes, 0b0100); !slices.Equal(got, []int{2}) {
		t.Fatalf("page candidates with only type 2 allowed: %v", got)
	}
}

func TestStagingPrefersCachedCoherentHostMemory(t *testing.T) {
	got := stagingMemory.candidates(discreteTypes, 0xf)
	if want := []int{3, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("staging candidates %v, want %v", got, want)
	}
}

func TestLavapipesSingleTypeServesBoth(t *testing.T) {
	one := []MemoryType{{Flags: vk.MemoryPropertyDeviceLocal | vk.MemoryPropertyHostVisible | vk.MemoryPropertyHostCoherent | vk.MemoryPropertyHostCached}}
	if got := pageMemory.candidates(one, 1); !slices.Equal(got, []int{0}) {
		t.Fatalf("pages: %v", got)
	}
	if got := stagingMemory.candidates(one, 1); !slices.Equal(got, []int{0}) {
		t.Fatalf("staging: %v", got)
	}
	if got := pageMemory.candidates([]MemoryType{{Flags: vk.MemoryPropertyHostVisible}}, 1); len(got) != 0 {
		t.Fatalf("a host-only type must not serve pages: %v", got)
	}
}
