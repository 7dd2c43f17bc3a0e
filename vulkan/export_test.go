package vulkan

// What the external tests (package vulkan_test) reach inside the package.
// Test builds only.

// SimulateDiscreteIfAsked is simulateDiscrete where
// $GPUMEM_VULKAN_TEST_DISCRETE=1 (discrete_test.go), for the external
// tests' backends (helpers_test.go).
func SimulateDiscreteIfAsked(b *Backend) {
	if discreteAsked() {
		simulateDiscrete(b)
	}
}

// Allocations is how many VkDeviceMemory objects b holds (pages, queued
// frees and staging buffers).
func Allocations(b *Backend) int { return b.allocations() }
