// The logical device: one compute queue family, up to Options.Queues
// queues, timeline semaphores and buffer device addresses enabled.

package vulkan

import (
	"fmt"
	"sync"
	"unsafe"
)

// device is a VkDevice with its function table and queues.
type device struct {
	inst   *instance
	pd     uintptr
	h      uintptr
	fn     deviceFuncs
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
	qci := &vkDeviceQueueCreateInfo{
		SType:            stDeviceQueueCreateInfo,
		QueueFamilyIndex: uint32(info.ComputeFamily),
		QueueCount:       uint32(n),
		PQueuePriorities: unsafe.Pointer(&prio[0]),
	}
	tl := &vkPhysicalDeviceTimelineSemaphoreFeatures{SType: stPhysicalDeviceTimelineSemaphoreFeat, TimelineSemaphore: 1}
	bda := &vkPhysicalDeviceBufferDeviceAddressFeatures{SType: stPhysicalDeviceBufferDeviceAddrFeat, PNext: unsafe.Pointer(tl), BufferDeviceAddress: 1}
	f2 := &vkPhysicalDeviceFeatures2{SType: stPhysicalDeviceFeatures2, PNext: unsafe.Pointer(bda)}
	var exts []string
	if info.MemoryBudget {
		exts = append(exts, extMemoryBudget)
	}
	en := newCStrings(exts)
	ci := &vkDeviceCreateInfo{
		SType:                   stDeviceCreateInfo,
		PNext:                   unsafe.Pointer(f2),
		QueueCreateInfoCount:    1,
		PQueueCreateInfos:       unsafe.Pointer(qci),
		EnabledExtensionCount:   uint32(len(exts)),
		PpEnabledExtensionNames: en.array(),
	}
	d := &device{inst: inst, pd: pds[idx], info: info, family: uint32(info.ComputeFamily)}
	if err := check("vkCreateDevice", call(inst.fn.CreateDevice, d.pd, uintptr(unsafe.Pointer(ci)), 0, uintptr(unsafe.Pointer(&d.h)))); err != nil {
		return nil, fmt.Errorf("%w: device %d %q: %w", ErrNoDevice, idx, info.Name, err)
	}
	if err := fillTable(&d.fn, d.proc); err != nil {
		if f := d.proc("vkDestroyDevice"); f != 0 {
			call(f, d.h, 0)
		}
		return nil, fmt.Errorf("%w: device %d %q: %w", ErrNoDevice, idx, info.Name, err)
	}
	for i := range n {
		q := &hwQueue{}
		call(d.fn.GetDeviceQueue, d.h, uintptr(d.family), uintptr(i), uintptr(unsafe.Pointer(&q.h)))
		d.queues = append(d.queues, q)
	}
	return d, nil
}

// proc is vkGetDeviceProcAddr(d, name).
func (d *device) proc(name string) uintptr {
	b := cString(name)
	return uintptr(call64(d.inst.fn.GetDeviceProcAddr, d.h, uintptr(unsafe.Pointer(&b[0]))))
}

// waitIdle is vkDeviceWaitIdle. Every queue is locked around it (the
// specification requires all of them externally synchronised).
func (d *device) waitIdle() error {
	for _, q := range d.queues {
		q.mu.Lock()
	}
	err := check("vkDeviceWaitIdle", call(d.fn.DeviceWaitIdle, d.h))
	for _, q := range d.queues {
		q.mu.Unlock()
	}
	return err
}

// destroy destroys the device (everything made on it first).
func (d *device) destroy() { call(d.fn.DestroyDevice, d.h, 0) }
