package main

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan"
)

// The example runs on the machine's Vulkan device (lavapipe on CI): its
// shaders run, relocations happen between steps, the captured steps
// replay, and every result checks out on the host (run fails otherwise).
// Without a device it skips, except under CI=true.
func TestExampleChecksItsResultsOnARealVulkanDriver(t *testing.T) {
	_, lerr := os.Stat("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json")
	validate := lerr == nil || os.Getenv("CI") == "true"
	dev, err := vulkan.OpenDevice(vulkan.Options{Validation: validate})
	if errors.Is(err, gpumem.ErrNotSupported) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no Vulkan device: %v", err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	be := dev.Backend().(*vulkan.Backend)
	var out bytes.Buffer
	if err := run(dev, &out, 20); err != nil {
		dev.Close()
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if m := be.ValidationMessages(); len(m) > 0 {
		t.Fatalf("validation messages:\n%s", strings.Join(m, "\n"))
	}
	if !strings.Contains(out.String(), "every result checked on the host: ok") {
		t.Fatalf("output:\n%s", out.String())
	}
	t.Log(out.String())
}
