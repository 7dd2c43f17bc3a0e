package vulkan

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The committed SPIR-V is what glslc makes of the committed GLSL, with the
// flags scripts/vulkan-shaders.sh uses. Skips without glslc, except under
// CI=true.
func TestCommittedSPIRVMatchesAFreshCompile(t *testing.T) {
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no glslc (apt-get install glslc)")
		}
		t.Skip("no glslc (apt-get install glslc)")
	}
	script, err := os.ReadFile("../scripts/vulkan-shaders.sh")
	if err != nil {
		t.Fatal(err)
	}
	const flags = "--target-env=vulkan1.2 -O"
	if !strings.Contains(string(script), "glslc "+flags+" ") {
		t.Fatalf("scripts/vulkan-shaders.sh no longer compiles with %q: update this test with it", flags)
	}
	srcs, _ := filepath.Glob("shaders/*.comp")
	if len(srcs) != len(shippedSpecs()) {
		t.Fatalf("%d GLSL sources, %d shipped kernels", len(srcs), len(shippedSpecs()))
	}
	for _, src := range srcs {
		name := strings.TrimSuffix(filepath.Base(src), ".comp")
		out := filepath.Join(t.TempDir(), name+".spv")
		args := append(strings.Fields(flags), "-o", out, src)
		if msg, err := exec.Command(glslc, args...).CombinedOutput(); err != nil {
			t.Fatalf("glslc %s: %v\n%s", src, err, msg)
		}
		fresh, _ := os.ReadFile(out)
		committed, err := ShippedSPIRV(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("shaders/%s.spv is not what glslc makes of %s: run scripts/vulkan-shaders.sh and commit", name, src)
		}
		if _, ok := shippedSpecs()[name]; !ok {
			t.Errorf("%s has no KernelSpec in shippedSpecs", name)
		}
	}
}

func TestSpirvBindingsReadsTheModulesDescriptorBindings(t *testing.T) {
	for name, spec := range shippedSpecs() {
		code, _ := ShippedSPIRV(name)
		got, err := spirvBindings(code)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != spec.Buffers {
			t.Fatalf("%s: bindings %v, spec says %d buffers", name, got, spec.Buffers)
		}
	}
	if _, err := spirvBindings([]byte("not spir-v at all!!!")); err == nil {
		t.Fatal("text accepted as SPIR-V")
	}
}
