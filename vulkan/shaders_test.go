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
// flags scripts/vulkan-shaders.sh uses: the shipped kernels' and the
// tests' testdata/once.spv. Skips without glslc, except under CI=true.
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
	// The tests' own module (export_test.go), from its embedded source.
	dir := t.TempDir()
	src, out := filepath.Join(dir, "once.comp"), filepath.Join(dir, "once.spv")
	if err := os.WriteFile(src, onceGLSL, 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(strings.Fields(flags), "-o", out, src)
	if msg, err := exec.Command(glslc, args...).CombinedOutput(); err != nil {
		t.Fatalf("glslc testdata/once.comp: %v\n%s", err, msg)
	}
	if fresh, _ := os.ReadFile(out); !bytes.Equal(fresh, onceSPIRV) {
		t.Errorf("testdata/once.spv is not what glslc makes of testdata/once.comp: in vulkan/testdata run glslc %s -o once.spv once.comp and commit", flags)
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

// The push-constant block's size is read from the module as the shader
// lays it out: scalars, 64-bit scalars, vectors, matrices (by their
// stride), arrays (by theirs), buffer references (8 bytes) and padding
// before an aligned member; 0 without a block. Compiled with glslc at test
// time (skips without it, except under CI=true).
func TestPushConstantBlockSizeIsReadFromTheModule(t *testing.T) {
	for name, spec := range shippedSpecs() {
		got, err := spirvPushConstantSize(mustShipped(t, name))
		if err != nil || got != spec.PushConstants {
			t.Errorf("%s: block of %d bytes (%v), its spec says %d", name, got, err, spec.PushConstants)
		}
	}
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no glslc (apt-get install glslc)")
		}
		t.Skip("no glslc (apt-get install glslc)")
	}
	const head = "#version 450\n#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n#extension GL_EXT_buffer_reference : require\nlayout(local_size_x = 1) in;\nlayout(std430, set = 0, binding = 0) buffer O { float o[]; };\n"
	for _, c := range []struct {
		name, decl, use string
		want            uint32
	}{
		{"none", "", "o[0] = 1.0;", 0},
		{"two uints", "uint a; uint b;", "o[0] = float(p.a + p.b);", 8},
		{"uint64 then uint", "uint64_t a; uint b;", "o[0] = float(p.a) + float(p.b);", 12},
		{"uint then padded uint64", "uint a; uint64_t b;", "o[0] = float(p.a) + float(p.b);", 16},
		{"vec3 then float", "vec3 v; float f;", "o[0] = p.v.x + p.f;", 16},
		{"float then vec4", "float x; vec4 y;", "o[0] = p.x + p.y.w;", 32},
		{"mat4 then uint", "mat4 m; uint n;", "o[0] = p.m[3][3] + float(p.n);", 68},
		{"mat2x3", "mat2x3 m;", "o[0] = p.m[1][2];", 32},                             // two columns of vec3, stride 16
		{"row-major mat2x3", "layout(row_major) mat2x3 m;", "o[0] = p.m[1][2];", 24}, // three rows of vec2, stride 8
		{"array of three uints", "uint a[3];", "o[0] = float(p.a[0] + p.a[2]);", 12},
		{"buffer reference", "R r; uint n;", "o[0] = float(p.r.v + p.n);", 12},
	} {
		src := head + "layout(buffer_reference, std430) buffer R { uint v; };\n"
		if c.decl != "" {
			src += "layout(push_constant) uniform P { " + c.decl + " } p;\n"
		}
		src += "void main() { " + c.use + " }\n"
		dir := t.TempDir()
		in, out := filepath.Join(dir, "k.comp"), filepath.Join(dir, "k.spv")
		if err := os.WriteFile(in, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if msg, err := exec.Command(glslc, "--target-env=vulkan1.2", "-O", "-o", out, in).CombinedOutput(); err != nil {
			t.Fatalf("%s: glslc: %v\n%s\n%s", c.name, err, msg, src)
		}
		code, _ := os.ReadFile(out)
		got, err := spirvPushConstantSize(code)
		if err != nil || got != c.want {
			t.Errorf("%s: block of %d bytes (%v), want %d", c.name, got, err, c.want)
		}
	}
}

func mustShipped(t *testing.T, name string) []byte {
	t.Helper()
	code, err := ShippedSPIRV(name)
	if err != nil {
		t.Fatal(err)
	}
	return code
}
