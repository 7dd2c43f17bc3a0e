package vk

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// mirrored lists every Go mirror of a vulkan_core.h structure (structs.go).
var mirrored = []any{
	ApplicationInfo{}, InstanceCreateInfo{}, ExtensionProperties{}, LayerProperties{},
	PhysicalDeviceLimits{}, PhysicalDeviceSparseProperties{}, PhysicalDeviceProperties{},
	MemoryType{}, MemoryHeap{}, PhysicalDeviceMemoryProperties{}, PhysicalDeviceMemoryProperties2{},
	PhysicalDeviceMemoryBudgetPropertiesEXT{}, Extent3D{}, QueueFamilyProperties{},
	DeviceQueueCreateInfo{}, DeviceCreateInfo{}, PhysicalDeviceFeatures{}, PhysicalDeviceFeatures2{},
	PhysicalDeviceTimelineSemaphoreFeatures{}, PhysicalDeviceBufferDeviceAddressFeatures{},
	BufferCreateInfo{}, MemoryRequirements{}, MemoryAllocateInfo{}, MemoryAllocateFlagsInfo{},
	BufferDeviceAddressInfo{}, MappedMemoryRange{}, SemaphoreCreateInfo{}, SemaphoreTypeCreateInfo{},
	TimelineSemaphoreSubmitInfo{}, SubmitInfo{}, SemaphoreWaitInfo{}, CommandPoolCreateInfo{},
	CommandBufferAllocateInfo{}, CommandBufferBeginInfo{}, BufferCopy{}, MemoryBarrier{},
	ShaderModuleCreateInfo{}, DescriptorSetLayoutBinding{}, DescriptorSetLayoutCreateInfo{},
	PushConstantRange{}, PipelineLayoutCreateInfo{}, PipelineShaderStageCreateInfo{},
	ComputePipelineCreateInfo{}, DescriptorPoolSize{}, DescriptorPoolCreateInfo{},
	DescriptorSetAllocateInfo{}, DescriptorBufferInfo{}, WriteDescriptorSet{},
	DebugUtilsMessengerCreateInfoEXT{}, DebugUtilsMessengerCallbackDataEXT{},
	PhysicalDeviceProperties2{}, PhysicalDeviceMaintenance3Properties{}, SemaphoreSignalInfo{},
}

// cName maps a mirror's Go name back to C: Foo -> VkFoo, Field -> field.
func cName(s string) string  { return "Vk" + s }
func cField(s string) string { return strings.ToLower(s[:1]) + s[1:] }

// TestStructLayoutsMatchTheHeader builds a C program from the mirrors'
// names with gcc against vulkan_core.h and compares every structure's size
// and every field's offset and size with the Go mirror's. It skips without gcc or
// the header (libvulkan-dev), except under CI=true, where it fails.
func TestStructLayoutsMatchTheHeader(t *testing.T) {
	const header = "/usr/include/vulkan/vulkan_core.h"
	gcc, err := exec.LookPath("gcc")
	_, herr := os.Stat(header)
	if err != nil || herr != nil {
		msg := fmt.Sprintf("gcc (%v) or %s (%v) missing: install gcc and libvulkan-dev", err, header, herr)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include <vulkan/vulkan_core.h>\nint main(void) {\n")
	want := map[string]uintptr{}
	for _, v := range mirrored {
		ty := reflect.TypeOf(v)
		c := cName(ty.Name())
		fmt.Fprintf(&src, "printf(\"%s %%zu\\n\", sizeof(%s));\n", c, c)
		want[c] = ty.Size()
		for i := range ty.NumField() {
			f := ty.Field(i)
			key := c + "." + cField(f.Name)
			fmt.Fprintf(&src, "printf(\"%s %%zu\\n\", offsetof(%s, %s));\n", key, c, cField(f.Name))
			want[key] = f.Offset
			fmt.Fprintf(&src, "printf(\"%s:size %%zu\\n\", sizeof(((%s*)0)->%s));\n", key, c, cField(f.Name))
			want[key+":size"] = f.Type.Size()
		}
	}
	src.WriteString("return 0;\n}\n")
	dir := t.TempDir()
	cfile, bin := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-Wall", "-o", bin, cfile).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		seen++
		if w, ok := want[key]; !ok || uintptr(n) != w {
			t.Errorf("%s: C says %d, the Go mirror %d", key, n, w)
		}
	}
	if seen != len(want) {
		t.Errorf("compared %d sizes and offsets, want %d", seen, len(want))
	}
}
