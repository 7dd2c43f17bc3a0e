// The instance: created once per Backend (and once per Devices call), with
// the validation layer and a debug messenger when asked for.

package vulkan

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// instancesCreated and instancesDestroyed count the VkInstances this
// package created and destroyed in the process (the tests check that every
// open's instance is destroyed, on every path).
var instancesCreated, instancesDestroyed atomic.Int64

// instance is a VkInstance with its function table.
type instance struct {
	lib *library
	h   uintptr
	fn  vk.InstanceFuncs
	log *validationLog // nil without validation
}

// cStrings holds NUL-terminated strings and the array of their pointers, as
// a const char* const* wants (kept alive together).
type cStrings struct {
	bytes [][]byte
	ptrs  []unsafe.Pointer
}

func newCStrings(names []string) *cStrings {
	c := &cStrings{}
	for _, n := range names {
		b := vk.CString(n)
		c.bytes = append(c.bytes, b)
		c.ptrs = append(c.ptrs, unsafe.Pointer(&b[0]))
	}
	return c
}

func (c *cStrings) array() unsafe.Pointer {
	if len(c.ptrs) == 0 {
		return nil
	}
	return unsafe.Pointer(&c.ptrs[0])
}

// instanceLayers lists the layers the loader offers.
func (l *library) instanceLayers() ([]string, error) {
	var n uint32
	if err := check("vkEnumerateInstanceLayerProperties", vk.Call(l.global.EnumerateInstanceLayerProperties, uintptr(unsafe.Pointer(&n)), 0)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	props := make([]vk.LayerProperties, n)
	r := vk.Call(l.global.EnumerateInstanceLayerProperties, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&props[0])))
	if r != vk.Success && r != vk.Incomplete {
		return nil, check("vkEnumerateInstanceLayerProperties", r)
	}
	names := make([]string, 0, n)
	for _, p := range props[:n] {
		names = append(names, vk.GoString(p.LayerName[:]))
	}
	return names, nil
}

// instanceExtensions lists the instance extensions the loader offers
// (layer "" = the implementation's and implicit layers').
func (l *library) instanceExtensions(layer string) ([]string, error) {
	var lp uintptr
	var lb []byte
	if layer != "" {
		lb = vk.CString(layer)
		lp = uintptr(unsafe.Pointer(&lb[0]))
	}
	var n uint32
	if err := check("vkEnumerateInstanceExtensionProperties", vk.Call(l.global.EnumerateInstanceExtensionProperties, lp, uintptr(unsafe.Pointer(&n)), 0)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	props := make([]vk.ExtensionProperties, n)
	r := vk.Call(l.global.EnumerateInstanceExtensionProperties, lp, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&props[0])))
	if r != vk.Success && r != vk.Incomplete {
		return nil, check("vkEnumerateInstanceExtensionProperties", r)
	}
	names := make([]string, 0, n)
	for _, p := range props[:n] {
		names = append(names, vk.GoString(p.ExtensionName[:]))
	}
	return names, nil
}

// newInstance creates a Vulkan 1.3 instance (the loader accepts any
// apiVersion; devices report their own). With validation, the Khronos
// layer and VK_EXT_debug_utils are enabled and every message the layer
// sends is kept in the returned instance's log; a missing layer is an
// error wrapping ErrUnsupported that says what to install.
func newInstance(l *library, validation bool) (*instance, error) {
	before, mapErr := mappedLibraries()
	var layers, exts []string
	if validation {
		have, err := l.instanceLayers()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoLoader, err)
		}
		if !slices.Contains(have, validationLayer) {
			return nil, fmt.Errorf("%w: validation asked for, but the loader has no %s (install vulkan-validationlayers)", ErrUnsupported, validationLayer)
		}
		layerExts, err := l.instanceExtensions(validationLayer)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoLoader, err)
		}
		plain, _ := l.instanceExtensions("")
		if !slices.Contains(layerExts, vk.ExtDebugUtils) && !slices.Contains(plain, vk.ExtDebugUtils) {
			return nil, fmt.Errorf("%w: validation asked for, but neither the loader nor %s offers %s", ErrUnsupported, validationLayer, vk.ExtDebugUtils)
		}
		layers = append(layers, validationLayer)
		exts = append(exts, vk.ExtDebugUtils)
	}
	appName := vk.CString("gpumem")
	app := &vk.ApplicationInfo{
		SType:            vk.StApplicationInfo,
		PApplicationName: unsafe.Pointer(&appName[0]),
		PEngineName:      unsafe.Pointer(&appName[0]),
		ApiVersion:       vk.APIVersion13,
	}
	ln, en := newCStrings(layers), newCStrings(exts)
	ci := &vk.InstanceCreateInfo{
		SType:                   vk.StInstanceCreateInfo,
		PApplicationInfo:        unsafe.Pointer(app),
		EnabledLayerCount:       uint32(len(layers)),
		PpEnabledLayerNames:     ln.array(),
		EnabledExtensionCount:   uint32(len(exts)),
		PpEnabledExtensionNames: en.array(),
	}
	var log *validationLog
	var dbg *vk.DebugUtilsMessengerCreateInfoEXT
	if validation {
		// Chained into the create info too, so vkCreateInstance and
		// vkDestroyInstance themselves are validated.
		log = newValidationLog()
		dbg = log.createInfo()
		ci.PNext = unsafe.Pointer(dbg)
	}
	var h uintptr
	if err := check("vkCreateInstance", vk.Call(l.global.CreateInstance, uintptr(unsafe.Pointer(ci)), 0, uintptr(unsafe.Pointer(&h)))); err != nil {
		log.close()
		return nil, fmt.Errorf("%w: %w (is a Vulkan driver installed? mesa-vulkan-drivers ships lavapipe)", ErrNoLoader, err)
	}
	instancesCreated.Add(1)
	if mapErr == nil {
		keepDrivers(before)
	}
	runtime.KeepAlive(ln)
	runtime.KeepAlive(en)
	runtime.KeepAlive(appName)
	inst := &instance{lib: l, h: h, log: log}
	if err := vk.FillTable(&inst.fn, func(name string) uintptr { return l.instanceProc(h, name) }); err != nil {
		if f := l.instanceProc(h, "vkDestroyInstance"); f != 0 {
			vk.Call(f, h, 0)
			instancesDestroyed.Add(1)
		}
		log.close()
		return nil, fmt.Errorf("%w: %w", ErrNoLoader, err)
	}
	if validation {
		if err := log.attach(inst); err != nil {
			inst.destroy()
			return nil, err
		}
	}
	return inst, nil
}

// The loader loads the drivers (and the layers) when an instance is
// created and unloads them when the last instance is destroyed, so a
// process that opens and closes backends one after the other loaded and
// initialised its driver afresh at every open (on lavapipe, 121 instances
// in one test: libvulkan_lvp.so loaded 121 times). An NVIDIA H200 (driver
// 580.159.04) refused every vkCreateInstance after ~30 such opens in one
// process (VK_ERROR_INCOMPATIBLE_DRIVER), validated or not; drivers are not
// made to be unloaded and loaded again (package internal/dl never closes
// one for that reason). So every shared object that a vkCreateInstance
// mapped (the first one of the process, or one with a layer or loader not
// loaded before) is kept loaded for the life of the process: the driver
// initialises once, and each backend still destroys the instance it
// created.
var (
	keptMu sync.Mutex
	kept   = make(map[string]bool) // the paths kept loaded
)

// keepDrivers keeps loaded every shared object mapped now that was not in
// before (mappedLibraries before vkCreateInstance). Shared objects another
// goroutine loaded meanwhile are kept too, which costs nothing but their
// unloading.
func keepDrivers(before map[string]bool) {
	after, err := mappedLibraries()
	if err != nil {
		return
	}
	keptMu.Lock()
	defer keptMu.Unlock()
	for p := range after {
		if !before[p] && !kept[p] && keepLoaded(p) {
			kept[p] = true
		}
	}
}

// destroy destroys the messenger and the instance (every device first).
func (inst *instance) destroy() {
	if inst.log != nil {
		inst.log.detach(inst)
	}
	vk.Call(inst.fn.DestroyInstance, inst.h, 0)
	instancesDestroyed.Add(1)
	if inst.log != nil {
		inst.log.close()
	}
}

// physicalDevices enumerates the instance's devices.
func (inst *instance) physicalDevices() ([]uintptr, error) {
	var n uint32
	if err := check("vkEnumeratePhysicalDevices", vk.Call(inst.fn.EnumeratePhysicalDevices, inst.h, uintptr(unsafe.Pointer(&n)), 0)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	pds := make([]uintptr, n)
	r := vk.Call(inst.fn.EnumeratePhysicalDevices, inst.h, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&pds[0])))
	if r != vk.Success && r != vk.Incomplete {
		return nil, check("vkEnumeratePhysicalDevices", r)
	}
	return pds[:n], nil
}

// deviceExtensions lists the extensions a physical device offers.
func (inst *instance) deviceExtensions(pd uintptr) ([]string, error) {
	var n uint32
	if err := check("vkEnumerateDeviceExtensionProperties", vk.Call(inst.fn.EnumerateDeviceExtensionProperties, pd, 0, uintptr(unsafe.Pointer(&n)), 0)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	props := make([]vk.ExtensionProperties, n)
	r := vk.Call(inst.fn.EnumerateDeviceExtensionProperties, pd, 0, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&props[0])))
	if r != vk.Success && r != vk.Incomplete {
		return nil, check("vkEnumerateDeviceExtensionProperties", r)
	}
	names := make([]string, 0, n)
	for _, p := range props[:n] {
		names = append(names, vk.GoString(p.ExtensionName[:]))
	}
	return names, nil
}
