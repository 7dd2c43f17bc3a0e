// Package vk binds the Vulkan API with purego: the loader opened at run
// time (no cgo), the function tables the vulkan package fills through
// vkGetInstanceProcAddr and vkGetDeviceProcAddr, the structures it passes
// (laid out as vulkan_core.h on 64-bit targets) and the header's values.
//
// # Owns
//
//   - Loading: LoadLibrary (RTLD_NOW | RTLD_LOCAL, never closed: package
//     internal/dl says why), LookupSymbol, and Call and Call64, which call a
//     function pointer with integer, handle and pointer arguments.
//   - The function tables (GlobalFuncs, InstanceFuncs, DeviceFuncs) and
//     FillTable, which looks every entry up by name; a missing required
//     function is an error naming it, never a nil call.
//   - The structures and constants, named as the header's without the Vk
//     and VK_ prefixes (St for VkStructureType values).
//
// # Does not know
//
// Instances, devices, errors or the gpumem interfaces: a bound call returns
// its VkResult. Package vulkan creates the objects, turns the results into
// its errors and fills its public descriptions (DeviceInfo, MemoryType)
// from the structures here.
package vk

import (
	"fmt"
	"reflect"
	"strings"
	"unsafe"
)

// GlobalFuncs are the functions vkGetInstanceProcAddr gives without an
// instance.
type GlobalFuncs struct {
	CreateInstance                       uintptr
	EnumerateInstanceExtensionProperties uintptr
	EnumerateInstanceLayerProperties     uintptr
}

// InstanceFuncs are the instance-level functions package vulkan calls. The
// debug-utils pair is optional (zero without the extension).
type InstanceFuncs struct {
	DestroyInstance                        uintptr
	EnumeratePhysicalDevices               uintptr
	GetPhysicalDeviceProperties            uintptr
	GetPhysicalDeviceProperties2           uintptr
	GetPhysicalDeviceMemoryProperties      uintptr
	GetPhysicalDeviceMemoryProperties2     uintptr
	GetPhysicalDeviceQueueFamilyProperties uintptr
	GetPhysicalDeviceFeatures2             uintptr
	EnumerateDeviceExtensionProperties     uintptr
	CreateDevice                           uintptr
	GetDeviceProcAddr                      uintptr
	CreateDebugUtilsMessengerEXT           uintptr `vk:"optional"`
	DestroyDebugUtilsMessengerEXT          uintptr `vk:"optional"`
}

// DeviceFuncs are the device-level functions package vulkan calls.
type DeviceFuncs struct {
	DestroyDevice                uintptr
	GetDeviceQueue               uintptr
	DeviceWaitIdle               uintptr
	CreateBuffer                 uintptr
	DestroyBuffer                uintptr
	GetBufferMemoryRequirements  uintptr
	AllocateMemory               uintptr
	FreeMemory                   uintptr
	BindBufferMemory             uintptr
	MapMemory                    uintptr
	UnmapMemory                  uintptr
	FlushMappedMemoryRanges      uintptr
	InvalidateMappedMemoryRanges uintptr
	GetBufferDeviceAddress       uintptr
	CreateSemaphore              uintptr
	DestroySemaphore             uintptr
	GetSemaphoreCounterValue     uintptr
	WaitSemaphores               uintptr
	SignalSemaphore              uintptr // tests hold steps back with it
	QueueSubmit                  uintptr
	CreateCommandPool            uintptr
	DestroyCommandPool           uintptr
	AllocateCommandBuffers       uintptr
	FreeCommandBuffers           uintptr
	BeginCommandBuffer           uintptr
	EndCommandBuffer             uintptr
	ResetCommandBuffer           uintptr
	CmdCopyBuffer                uintptr
	CmdPipelineBarrier           uintptr
	CmdBindPipeline              uintptr
	CmdBindDescriptorSets        uintptr
	CmdPushConstants             uintptr
	CmdDispatch                  uintptr
	CreateShaderModule           uintptr
	DestroyShaderModule          uintptr
	CreateDescriptorSetLayout    uintptr
	DestroyDescriptorSetLayout   uintptr
	CreatePipelineLayout         uintptr
	DestroyPipelineLayout        uintptr
	CreateComputePipelines       uintptr
	DestroyPipeline              uintptr
	CreateDescriptorPool         uintptr
	DestroyDescriptorPool        uintptr
	AllocateDescriptorSets       uintptr
	FreeDescriptorSets           uintptr
	UpdateDescriptorSets         uintptr
}

// FillTable sets every uintptr field of *table to lookup("vk"+field name);
// a zero result for a field not tagged vk:"optional" is an error naming
// the function.
func FillTable(table any, lookup func(string) uintptr) error {
	v := reflect.ValueOf(table).Elem()
	t := v.Type()
	var missing []string
	for i := range t.NumField() {
		f := t.Field(i)
		name := "vk" + f.Name
		addr := lookup(name)
		if addr == 0 && f.Tag.Get("vk") != "optional" {
			missing = append(missing, name)
		}
		v.Field(i).SetUint(uint64(addr))
	}
	if len(missing) > 0 {
		return fmt.Errorf("the driver does not provide %s", strings.Join(missing, ", "))
	}
	return nil
}

// CString returns s as a NUL-terminated byte slice for a const char*.
func CString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// GoString reads a NUL-terminated fixed-size C char array.
func GoString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// CStringAt copies the NUL-terminated C string at p (nil: "").
func CStringAt(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}
