// Loading: the loader library, the instance and the function tables.
//
// Every Vulkan function but the loader's few global ones is reached through
// vkGetInstanceProcAddr / vkGetDeviceProcAddr, as the loader's dispatch
// wants (a device function from vkGetDeviceProcAddr skips the loader's
// trampoline). A table is a struct of uintptr fields named as the function
// without its "vk" prefix, filled by name; a missing required function is
// an error naming it, never a nil call.

package vulkan

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"unsafe"
)

// EnvLibrary names the environment variable that overrides the loader's
// path (Options.Library first).
const EnvLibrary = "GPUMEM_LIBVULKAN"

// library is a loaded Vulkan loader.
type library struct {
	path                string
	getInstanceProcAddr uintptr
	global              globalFuncs
}

// globalFuncs are the functions vkGetInstanceProcAddr gives without an
// instance.
type globalFuncs struct {
	CreateInstance                       uintptr
	EnumerateInstanceExtensionProperties uintptr
	EnumerateInstanceLayerProperties     uintptr
}

// instanceFuncs are the instance-level functions this package calls. The
// debug-utils pair is optional (zero without the extension).
type instanceFuncs struct {
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

// deviceFuncs are the device-level functions this package calls.
type deviceFuncs struct {
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

// libraries are the loaders loaded so far, by path: each is loaded and
// its global functions looked up once per process (never closed, as
// loadLibrary says).
var (
	librariesMu sync.Mutex
	libraries   = make(map[string]*library)
)

// openLibrary loads the loader at path ("" = $GPUMEM_LIBVULKAN, else
// libvulkan.so.1), once per process and path. Errors wrap ErrNoLoader and
// say what to install; a path that failed is tried again at the next call.
func openLibrary(path string) (*library, error) {
	if path == "" {
		path = os.Getenv(EnvLibrary)
	}
	if path == "" {
		path = defaultLibrary
	}
	librariesMu.Lock()
	defer librariesMu.Unlock()
	if l, ok := libraries[path]; ok {
		return l, nil
	}
	l, err := loadLoader(path)
	if err != nil {
		return nil, err
	}
	libraries[path] = l
	return l, nil
}

// loadLoader loads the loader at path and looks up its global functions.
func loadLoader(path string) (*library, error) {
	h, err := loadLibrary(path)
	if err != nil {
		return nil, fmt.Errorf("%w: loading %s: %v (install libvulkan1 and a driver, e.g. mesa-vulkan-drivers; or set %s)",
			ErrNoLoader, path, err, EnvLibrary)
	}
	l := &library{path: path, getInstanceProcAddr: lookupSymbol(h, "vkGetInstanceProcAddr")}
	if l.getInstanceProcAddr == 0 {
		return nil, fmt.Errorf("%w: %s has no vkGetInstanceProcAddr (not a Vulkan loader?)", ErrNoLoader, path)
	}
	if err := fillTable(&l.global, func(name string) uintptr { return l.instanceProc(0, name) }); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoLoader, path, err)
	}
	return l, nil
}

// instanceProc is vkGetInstanceProcAddr(inst, name).
func (l *library) instanceProc(inst uintptr, name string) uintptr {
	b := cString(name)
	return uintptr(call64(l.getInstanceProcAddr, inst, uintptr(unsafe.Pointer(&b[0]))))
}

// fillTable sets every uintptr field of *table to lookup("vk"+field name);
// a zero result for a field not tagged vk:"optional" is an error naming
// the function.
func fillTable(table any, lookup func(string) uintptr) error {
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

// cString returns s as a NUL-terminated byte slice for a const char*.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// goString reads a NUL-terminated fixed-size C char array.
func goString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// cStringAt copies the NUL-terminated C string at p (nil: "").
func cStringAt(p unsafe.Pointer) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}
