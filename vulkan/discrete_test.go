package vulkan

import "os"

// envTestDiscrete, set to 1, has every test backend (and the benchmarks')
// take the paths a discrete GPU takes on lavapipe, whose one memory type is
// device-local and host-visible: pages are left unmapped (PagesHostVisible
// false), so Write and Read go through pooled staging buffers and Map is
// not supported, as on NVIDIA's driver, where device-local memory is not
// host-visible. The tests that need a discrete GPU's behaviour simulate it
// themselves; this runs the whole suite that way:
//
//	GPUMEM_VULKAN_TEST_DISCRETE=1 go test -count=1 ./vulkan/
//
// What it does not simulate: distinct heaps for pages and staging buffers
// (lavapipe has one heap; stagingToTrim's test uses NVIDIA's memory types).
const envTestDiscrete = "GPUMEM_VULKAN_TEST_DISCRETE"

// simulateDiscrete leaves b's pages unmapped from now on (call it before the
// first page). Staging buffers are still mapped.
func simulateDiscrete(b *Backend) {
	b.unmappedPages = true
	b.pagesMapped = false
}

// discreteAsked reports whether $GPUMEM_VULKAN_TEST_DISCRETE asks every test
// backend to simulate a discrete GPU.
func discreteAsked() bool { return os.Getenv(envTestDiscrete) == "1" }
