// Devices and what gpumem needs to know of them: heaps, memory types,
// limits, features.

package vulkan

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// EnvDevice names the environment variable that picks the device when
// Options.Device is empty: an index into the enumeration, or a
// case-insensitive substring of the device's name ("llvmpipe").
const EnvDevice = "GPUMEM_VULKAN_DEVICE"

// Heap is a memory heap of a device. Budget is what VK_EXT_memory_budget
// says this process may use (0 without the extension); Usage what it says
// the process uses.
type Heap struct {
	Size        uint64
	DeviceLocal bool
	Budget      uint64
	Usage       uint64
}

// MemoryType is a memory type of a device: its VkMemoryPropertyFlags and
// heap.
type MemoryType struct {
	Flags uint32
	Heap  uint32
}

// String names the type's property flags ("DEVICE_LOCAL|HOST_VISIBLE").
func (m MemoryType) String() string {
	var names []string
	for _, f := range []struct {
		bit  uint32
		name string
	}{{vk.MemoryPropertyDeviceLocal, "DEVICE_LOCAL"}, {vk.MemoryPropertyHostVisible, "HOST_VISIBLE"},
		{vk.MemoryPropertyHostCoherent, "HOST_COHERENT"}, {vk.MemoryPropertyHostCached, "HOST_CACHED"},
		{vk.MemoryPropertyLazily, "LAZILY_ALLOCATED"}, {vk.MemoryPropertyProtected, "PROTECTED"}} {
		if m.Flags&f.bit != 0 {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "|")
}

// Limits are the device limits that shape gpumem's pages and dispatches.
type Limits struct {
	MaxMemoryAllocationCount        uint32
	MaxMemoryAllocationSize         uint64 // maintenance3; 0 when unknown
	MaxStorageBufferRange           uint32
	MinStorageBufferOffsetAlignment uint64
	NonCoherentAtomSize             uint64
	MaxPushConstantsSize            uint32
	MaxBoundDescriptorSets          uint32
	MaxPerStageStorageBuffers       uint32
	MaxComputeWorkGroupCount        [3]uint32
}

// DeviceInfo describes one physical device.
type DeviceInfo struct {
	Index         int
	Name          string
	Type          string // "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"
	APIVersion    uint32 // VK_MAKE_API_VERSION packed
	DriverVersion uint32
	Heaps         []Heap
	MemoryTypes   []MemoryType
	Limits        Limits

	// ComputeFamily is the queue family the backend would use (-1: none),
	// ComputeQueues its queue count.
	ComputeFamily int
	ComputeQueues int

	MemoryBudget        bool // VK_EXT_memory_budget
	SparseBinding       bool
	TimelineSemaphores  bool
	BufferDeviceAddress bool

	// Unusable says why the backend cannot run on this device ("" when it
	// can).
	Unusable string
}

// APIVersionString is the device's Vulkan version as "1.3.230".
func (d DeviceInfo) APIVersionString() string {
	v := d.APIVersion
	return fmt.Sprintf("%d.%d.%d", v>>22&0x7f, v>>12&0x3ff, v&0xfff)
}

// String is a multi-line summary, as gpumem info prints it.
func (d DeviceInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %d: %s (%s), Vulkan %s\n", d.Index, d.Name, d.Type, d.APIVersionString())
	for i, h := range d.Heaps {
		kind := "host"
		if h.DeviceLocal {
			kind = "device-local"
		}
		fmt.Fprintf(&b, "  heap %d: %d bytes, %s", i, h.Size, kind)
		if d.MemoryBudget {
			fmt.Fprintf(&b, ", budget %d, usage %d", h.Budget, h.Usage)
		}
		b.WriteString("\n")
	}
	for i, m := range d.MemoryTypes {
		fmt.Fprintf(&b, "  memory type %d: heap %d, %s\n", i, m.Heap, m)
	}
	l := d.Limits
	fmt.Fprintf(&b, "  maxMemoryAllocationCount %d, maxMemoryAllocationSize %d, maxStorageBufferRange %d, minStorageBufferOffsetAlignment %d, nonCoherentAtomSize %d, maxPushConstantsSize %d\n",
		l.MaxMemoryAllocationCount, l.MaxMemoryAllocationSize, l.MaxStorageBufferRange, l.MinStorageBufferOffsetAlignment, l.NonCoherentAtomSize, l.MaxPushConstantsSize)
	fmt.Fprintf(&b, "  compute queues %d (family %d), VK_EXT_memory_budget %v, sparse binding %v, timeline semaphores %v, buffer device address %v",
		d.ComputeQueues, d.ComputeFamily, d.MemoryBudget, d.SparseBinding, d.TimelineSemaphores, d.BufferDeviceAddress)
	if d.Unusable != "" {
		fmt.Fprintf(&b, "\n  not usable by gpumem: %s", d.Unusable)
	}
	return b.String()
}

// Devices lists the Vulkan devices the loader (opts.Library,
// $GPUMEM_LIBVULKAN, libvulkan.so.1) enumerates. Without a loader the
// error wraps ErrNoLoader; with a loader and no device, the list is empty
// and the error wraps ErrNoDevice (never an empty answer without a reason).
func Devices(opts Options) ([]DeviceInfo, error) {
	l, err := openLibrary(opts.Library)
	if err != nil {
		return nil, err
	}
	inst, err := newInstance(l, false)
	if err != nil {
		return nil, err
	}
	defer inst.destroy()
	pds, err := inst.physicalDevices()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	if len(pds) == 0 {
		return nil, fmt.Errorf("%w: the loader %s enumerates no device (install mesa-vulkan-drivers for lavapipe, or a GPU driver)", ErrNoDevice, l.path)
	}
	infos := make([]DeviceInfo, len(pds))
	for i, pd := range pds {
		infos[i] = inst.describe(i, pd)
	}
	return infos, nil
}

// describe reads what DeviceInfo reports of pd.
func (inst *instance) describe(index int, pd uintptr) DeviceInfo {
	var props vk.PhysicalDeviceProperties
	vk.Call(inst.fn.GetPhysicalDeviceProperties, pd, uintptr(unsafe.Pointer(&props)))
	d := DeviceInfo{
		Index:         index,
		Name:          vk.GoString(props.DeviceName[:]),
		Type:          deviceTypeName(props.DeviceType),
		APIVersion:    props.ApiVersion,
		DriverVersion: props.DriverVersion,
		ComputeFamily: -1,
	}
	lim := props.Limits
	d.Limits = Limits{
		MaxMemoryAllocationCount:        lim.MaxMemoryAllocationCount,
		MaxStorageBufferRange:           lim.MaxStorageBufferRange,
		MinStorageBufferOffsetAlignment: lim.MinStorageBufferOffsetAlignment,
		NonCoherentAtomSize:             lim.NonCoherentAtomSize,
		MaxPushConstantsSize:            lim.MaxPushConstantsSize,
		MaxBoundDescriptorSets:          lim.MaxBoundDescriptorSets,
		MaxPerStageStorageBuffers:       lim.MaxPerStageDescriptorStorageBuffers,
		MaxComputeWorkGroupCount:        lim.MaxComputeWorkGroupCount,
	}
	exts, _ := inst.deviceExtensions(pd)
	d.MemoryBudget = slices.Contains(exts, vk.ExtMemoryBudget)
	newEnough := props.ApiVersion >= vk.APIVersion12

	if newEnough {
		m3 := &vk.PhysicalDeviceMaintenance3Properties{SType: vk.StPhysicalDeviceMaintenance3Props}
		p2 := &vk.PhysicalDeviceProperties2{SType: vk.StPhysicalDeviceProperties2, PNext: unsafe.Pointer(m3)}
		vk.Call(inst.fn.GetPhysicalDeviceProperties2, pd, uintptr(unsafe.Pointer(p2)))
		d.Limits.MaxMemoryAllocationSize = m3.MaxMemoryAllocationSize

		tl := &vk.PhysicalDeviceTimelineSemaphoreFeatures{SType: vk.StPhysicalDeviceTimelineSemaphoreFeat}
		bda := &vk.PhysicalDeviceBufferDeviceAddressFeatures{SType: vk.StPhysicalDeviceBufferDeviceAddrFeat, PNext: unsafe.Pointer(tl)}
		f2 := &vk.PhysicalDeviceFeatures2{SType: vk.StPhysicalDeviceFeatures2, PNext: unsafe.Pointer(bda)}
		vk.Call(inst.fn.GetPhysicalDeviceFeatures2, pd, uintptr(unsafe.Pointer(f2)))
		d.TimelineSemaphores = tl.TimelineSemaphore != 0
		d.BufferDeviceAddress = bda.BufferDeviceAddress != 0
		d.SparseBinding = f2.Features.SparseBinding != 0
	}

	var mem vk.PhysicalDeviceMemoryProperties
	var budget *vk.PhysicalDeviceMemoryBudgetPropertiesEXT
	if d.MemoryBudget && newEnough {
		budget = &vk.PhysicalDeviceMemoryBudgetPropertiesEXT{SType: vk.StPhysicalDeviceMemoryBudgetPropsEXT}
		m2 := &vk.PhysicalDeviceMemoryProperties2{SType: vk.StPhysicalDeviceMemoryProperties2, PNext: unsafe.Pointer(budget)}
		vk.Call(inst.fn.GetPhysicalDeviceMemoryProperties2, pd, uintptr(unsafe.Pointer(m2)))
		mem = m2.MemoryProperties
	} else {
		vk.Call(inst.fn.GetPhysicalDeviceMemoryProperties, pd, uintptr(unsafe.Pointer(&mem)))
	}
	for i := range min(mem.MemoryHeapCount, uint32(len(mem.MemoryHeaps))) {
		h := Heap{Size: mem.MemoryHeaps[i].Size, DeviceLocal: mem.MemoryHeaps[i].Flags&vk.MemoryHeapDeviceLocal != 0}
		if budget != nil {
			h.Budget, h.Usage = budget.HeapBudget[i], budget.HeapUsage[i]
		}
		d.Heaps = append(d.Heaps, h)
	}
	for i := range min(mem.MemoryTypeCount, uint32(len(mem.MemoryTypes))) {
		d.MemoryTypes = append(d.MemoryTypes, MemoryType{Flags: mem.MemoryTypes[i].PropertyFlags, Heap: mem.MemoryTypes[i].HeapIndex})
	}

	var nf uint32
	vk.Call(inst.fn.GetPhysicalDeviceQueueFamilyProperties, pd, uintptr(unsafe.Pointer(&nf)), 0)
	if nf > 0 {
		fams := make([]vk.QueueFamilyProperties, nf)
		vk.Call(inst.fn.GetPhysicalDeviceQueueFamilyProperties, pd, uintptr(unsafe.Pointer(&nf)), uintptr(unsafe.Pointer(&fams[0])))
		d.ComputeFamily, d.ComputeQueues = chooseComputeFamily(fams[:nf])
	}

	var why []string
	if !newEnough {
		why = append(why, "Vulkan "+d.APIVersionString()+" (1.2 needed)")
	}
	if d.ComputeFamily < 0 {
		why = append(why, "no compute queue family")
	}
	if newEnough && !d.TimelineSemaphores {
		why = append(why, "no timeline semaphores")
	}
	if newEnough && !d.BufferDeviceAddress {
		why = append(why, "no buffer device addresses")
	}
	if !slices.ContainsFunc(d.MemoryTypes, func(m MemoryType) bool { return m.Flags&vk.MemoryPropertyDeviceLocal != 0 }) {
		why = append(why, "no DEVICE_LOCAL memory type")
	}
	d.Unusable = strings.Join(why, ", ")
	return d
}

// chooseComputeFamily picks the queue family for gpumem's streams: one with
// COMPUTE (which implies transfer), preferring a compute-only family
// (an async-compute engine on a discrete GPU) over the graphics one, then
// more queues. It returns (-1, 0) when there is none.
func chooseComputeFamily(fams []vk.QueueFamilyProperties) (family, queues int) {
	family = -1
	best := -1
	for i, f := range fams {
		if f.QueueFlags&vk.QueueCompute == 0 || f.QueueCount == 0 {
			continue
		}
		score := int(f.QueueCount)
		if f.QueueFlags&vk.QueueGraphics == 0 {
			score += 1 << 16
		}
		if score > best {
			best, family, queues = score, i, int(f.QueueCount)
		}
	}
	return family, queues
}

func deviceTypeName(t int32) string {
	switch t {
	case 1:
		return "integrated GPU"
	case 2:
		return "discrete GPU"
	case 3:
		return "virtual GPU"
	case 4:
		return "CPU"
	}
	return "other"
}

// pickDevice returns the index of the device sel names ("" =
// $GPUMEM_VULKAN_DEVICE, else the first usable device, discrete GPUs
// first): an index, or a case-insensitive substring of a name. A device
// that does not exist or cannot be used is an error wrapping ErrNoDevice
// listing the devices there are.
func pickDevice(infos []DeviceInfo, sel string) (int, error) {
	if sel == "" {
		sel = os.Getenv(EnvDevice)
	}
	list := func() string {
		var s []string
		for _, d := range infos {
			e := fmt.Sprintf("%d %q", d.Index, d.Name)
			if d.Unusable != "" {
				e += " (unusable: " + d.Unusable + ")"
			}
			s = append(s, e)
		}
		if len(s) == 0 {
			return "none"
		}
		return strings.Join(s, "; ")
	}
	if len(infos) == 0 {
		return -1, fmt.Errorf("%w: the loader enumerates no device (install mesa-vulkan-drivers for lavapipe, or a GPU driver)", ErrNoDevice)
	}
	usable := func(i int) (int, error) {
		if infos[i].Unusable != "" {
			return -1, fmt.Errorf("%w: device %d %q cannot run gpumem: %s", ErrNoDevice, i, infos[i].Name, infos[i].Unusable)
		}
		return i, nil
	}
	if sel == "" {
		best := -1
		for i, d := range infos {
			if d.Unusable != "" {
				continue
			}
			if best < 0 || (d.Type == "discrete GPU" && infos[best].Type != "discrete GPU") {
				best = i
			}
		}
		if best < 0 {
			return -1, fmt.Errorf("%w: no device can run gpumem: %s", ErrNoDevice, list())
		}
		return best, nil
	}
	if n, err := strconv.Atoi(sel); err == nil {
		if n < 0 || n >= len(infos) {
			return -1, fmt.Errorf("%w: device index %d (Options.Device or %s) is out of range; devices: %s", ErrNoDevice, n, EnvDevice, list())
		}
		return usable(n)
	}
	for i, d := range infos {
		if strings.Contains(strings.ToLower(d.Name), strings.ToLower(sel)) {
			return usable(i)
		}
	}
	return -1, fmt.Errorf("%w: no device's name contains %q (Options.Device or %s); devices: %s", ErrNoDevice, sel, EnvDevice, list())
}
