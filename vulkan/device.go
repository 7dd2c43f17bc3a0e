// The logical device: one compute queue family, up to Options.Queues
// queues, timeline semaphores and buffer device addresses enabled.

package vulkan

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// device is a VkDevice with its function table and queues.
type device struct {
	inst   *instance
	pd     uintptr
	h      uintptr
	fn     vk.DeviceFuncs
	info   DeviceInfo
	family uint32
	queues []*hwQueue
}

// hwQueue is one VkQueue; vkQueueSubmit on it must be externally
// synchronised, and several gpumem streams may share it.
type hwQueue struct {
	mu sync.Mutex
	h  uintptr
}

// newDevice creates the logical device on the device opts pick.
func newDevice(inst *instance, opts Options) (*device, error) {
	pds, err := inst.physicalDevices()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDevice, err)
	}
	infos := make([]DeviceInfo, len(pds))
	for i, pd := range pds {
		infos[i] = inst.describe(i, pd)
	}
	idx, err := pickDevice(infos, opts.Device)
	if err != nil {
		return nil, err
	}
	info := infos[idx]
	n := opts.Queues
	if n <= 0 {
		n = 4
	}
	n = min(n, info.ComputeQueues)
	prio := make([]float32, n)
	for i := range prio {
		prio[i] = 1
	}
	qci := &vk.DeviceQueueCreateInfo{
		SType:            vk.StDeviceQueueCreateInfo,
		QueueFamilyIndex: uint32(info.ComputeFamily),
		QueueCount:       uint32(n),
		PQueuePriorities: unsafe.Pointer(&prio[0]),
	}
	tl := &vk.PhysicalDeviceTimelineSemaphoreFeatures{SType: vk.StPhysicalDeviceTimelineSemaphoreFeat, TimelineSemaphore: 1}
	bda := &vk.PhysicalDeviceBufferDeviceAddressFeatures{SType: vk.StPhysicalDeviceBufferDeviceAddrFeat, PNext: unsafe.Pointer(tl), BufferDeviceAddress: 1}
	f2 := &vk.PhysicalDeviceFeatures2{SType: vk.StPhysicalDeviceFeatures2, PNext: unsafe.Pointer(bda)}
	var exts []string
	if info.MemoryBudget {
		exts = append(exts, vk.ExtMemoryBudget)
	}
	en := newCStrings(exts)
	ci := &vk.DeviceCreateInfo{
		SType:                   vk.StDeviceCreateInfo,
		PNext:                   unsafe.Pointer(f2),
		QueueCreateInfoCount:    1,
		PQueueCreateInfos:       unsafe.Pointer(qci),
		EnabledExtensionCount:   uint32(len(exts)),
		PpEnabledExtensionNames: en.array(),
	}
	d := &device{inst: inst, pd: pds[idx], info: info, family: uint32(info.ComputeFamily)}
	if err := check("vkCreateDevice", vk.Call(inst.fn.CreateDevice, d.pd, uintptr(unsafe.Pointer(ci)), 0, uintptr(unsafe.Pointer(&d.h)))); err != nil {
		return nil, fmt.Errorf("%w: device %d %q: %w", ErrNoDevice, idx, info.Name, err)
	}
	if err := vk.FillTable(&d.fn, d.proc); err != nil {
		if f := d.proc("vkDestroyDevice"); f != 0 {
			vk.Call(f, d.h, 0)
		}
		return nil, fmt.Errorf("%w: device %d %q: %w", ErrNoDevice, idx, info.Name, err)
	}
	for i := range n {
		q := &hwQueue{}
		vk.Call(d.fn.GetDeviceQueue, d.h, uintptr(d.family), uintptr(i), uintptr(unsafe.Pointer(&q.h)))
		d.queues = append(d.queues, q)
	}
	return d, nil
}

// proc is vkGetDeviceProcAddr(d, name).
func (d *device) proc(name string) uintptr {
	b := vk.CString(name)
	return uintptr(vk.Call64(d.inst.fn.GetDeviceProcAddr, d.h, uintptr(unsafe.Pointer(&b[0]))))
}

// waitIdle is vkDeviceWaitIdle. Every queue is locked around it (the
// specification requires all of them externally synchronised).
func (d *device) waitIdle() error {
	for _, q := range d.queues {
		q.mu.Lock()
	}
	err := check("vkDeviceWaitIdle", vk.Call(d.fn.DeviceWaitIdle, d.h))
	for _, q := range d.queues {
		q.mu.Unlock()
	}
	return err
}

// destroy destroys the device (everything made on it first).
func (d *device) destroy() { vk.Call(d.fn.DestroyDevice, d.h, 0) }
