// Package vulkantest holds what every test that runs on the vulkan backend
// needs the same way: whether a missing Vulkan device skips or fails the
// test, and whether the validation layer must be on. The vulkan package's
// tests and the shadow model on Vulkan (the root's test, and
// internal/shadowmodel's replays) share it, so the CI=true rule is stated
// once.
//
// It is imported by tests only; it imports the vulkan backend, so no
// package below vulkan may import it.
package vulkantest

import (
	"errors"
	"os"
	"testing"

	"github.com/gpumem/gpumem/vulkan"
)

// validationLayerManifest is where the Khronos validation layer's manifest
// lies when the distribution's package installed it.
const validationLayerManifest = "/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"

// Need skips t (fails it under CI=true, where .ci/run installs lavapipe)
// when err says there is no Vulkan loader or device here, and fails it for
// any other non-nil err.
func Need(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, vulkan.ErrNoLoader) || errors.Is(err, vulkan.ErrNoDevice) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no Vulkan device: %v (install mesa-vulkan-drivers libvulkan1)", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Fatal(err)
}

// Validated returns opts with the validation layer on when it is
// installed; under CI=true (where .ci/run installs it) it must be, so it
// is always on there.
func Validated(opts vulkan.Options) vulkan.Options {
	if _, err := os.Stat(validationLayerManifest); err == nil || os.Getenv("CI") == "true" {
		opts.Validation = true
	}
	return opts
}
