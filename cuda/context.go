package cuda

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gpumem/gpumem/cuda/internal/driver"
)

// Options configures NewBackend (and OpenDevice). The zero value opens device 0 through
// libcuda.so.1 (or $GPUMEM_LIBCUDA).
type Options struct {
	// Library is the driver library to load. Empty: $GPUMEM_LIBCUDA when
	// set, else "libcuda.so.1". Tests set it to a fake driver.
	Library string
	// Device is the device ordinal (default 0).
	Device int
}

// deviceAttribute is a CUdevice_attribute value.
type deviceAttribute int32

// A few attributes the package and its callers use; any other
// CUdevice_attribute value may be passed to primaryContext.Attribute.
const (
	attrMultiprocessorCount              deviceAttribute = 16
	attrComputeCapabilityMajor           deviceAttribute = 75
	attrComputeCapabilityMinor           deviceAttribute = 76
	attrVirtualMemoryManagementSupported deviceAttribute = 102
)

// Available reports whether a usable driver with at least one device is
// present (library from $GPUMEM_LIBCUDA, else libcuda.so.1): nil, or an
// error wrapping ErrNoDriver that says why not. It leaves no context behind.
func Available() error {
	return available(libraryPath(""))
}

func available(path string) error {
	d, err := loadDriver(path)
	if err != nil {
		return err
	}
	if err := d.check("cuInit", d.CuInit(0)); err != nil {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.CuDeviceGetCount(&n)); err != nil {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	if n < 1 {
		return fmt.Errorf("%w: %s reports no CUDA device", ErrNoDriver, path)
	}
	return nil
}

// primaryContext is one device's primary context, opened through the driver, with
// its device executor. Its methods are safe for concurrent use; storage and
// module calls run in order on the device executor, stream work on each
// driverStream's executor.
type primaryContext struct {
	drv      *cudaDriver
	ordinal  int
	dev      int32   // CUdevice
	ctx      uintptr // CUcontext: the device's primary context, retained
	exec     *executor
	name     string
	totalMem uint64
	version  int
	features Features

	mu      sync.Mutex // guards the fields below
	closed  bool
	streams map[*driverStream]struct{}
}

// openContext loads the driver, initialises it and retains opts.Device's primary
// context, current on a new device executor. Without a usable driver (no
// libcuda.so.1, a required symbol missing, cuInit failing, no such device)
// it returns an error wrapping ErrNoDriver and holds nothing; it never
// panics.
func openContext(opts Options) (*primaryContext, error) {
	if opts.Device < 0 {
		return nil, fmt.Errorf("%w: device ordinal %d is negative", ErrNoDriver, opts.Device)
	}
	d, err := loadDriver(libraryPath(opts.Library))
	if err != nil {
		return nil, err
	}
	c := &primaryContext{drv: d, ordinal: opts.Device, streams: make(map[*driverStream]struct{})}
	c.exec, err = newExecutor(fmt.Sprintf("device %d", opts.Device), nil)
	if err != nil {
		return nil, err
	}
	if err := c.exec.Do(c.init); err != nil {
		c.exec.Close()
		return nil, err
	}
	return c, nil
}

// init runs on the device executor: cuInit, device lookup and properties,
// primary context retain, then makes it current on this thread. On error
// whatever was retained is released.
func (c *primaryContext) init() error {
	d := c.drv
	if err := d.check("cuInit", d.CuInit(0)); err != nil {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	var v, count int32
	if err := d.check("cuDriverGetVersion", d.CuDriverGetVersion(&v)); err != nil {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	c.version = int(v)
	if err := d.check("cuDeviceGetCount", d.CuDeviceGetCount(&count)); err != nil {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	if c.ordinal >= int(count) {
		return fmt.Errorf("%w: device %d asked for, %s reports %d devices", ErrNoDriver, c.ordinal, d.Path, count)
	}
	if err := d.check("cuDeviceGet", d.CuDeviceGet(&c.dev, int32(c.ordinal))); err != nil {
		return fmt.Errorf("%w: %w", ErrNoDriver, err)
	}
	var name [256]byte
	if err := d.check("cuDeviceGetName", d.CuDeviceGetName(&name[0], int32(len(name)), c.dev)); err != nil {
		return err
	}
	c.name = driver.CString(&name[0])
	var total uintptr
	if err := d.check("cuDeviceTotalMem_v2", d.CuDeviceTotalMem(&total, c.dev)); err != nil {
		return err
	}
	c.totalMem = uint64(total)
	c.features.AsyncMemset = d.CuMemsetD8Async != nil
	c.features.Library = d.Library != nil
	c.features.ParamInfo = d.CuFuncGetParamInfo != nil
	if d.VMM != nil {
		var ok int32
		if err := d.check("cuDeviceGetAttribute", d.CuDeviceGetAttribute(&ok, int32(attrVirtualMemoryManagementSupported), c.dev)); err != nil {
			return err
		}
		c.features.VirtualMemory = ok != 0
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.CuDevicePrimaryCtxRetain(&c.ctx, c.dev)); err != nil {
		return err
	}
	if err := d.check("cuCtxSetCurrent", d.CuCtxSetCurrent(c.ctx)); err != nil {
		d.CuDevicePrimaryCtxRelease(c.dev)
		return err
	}
	return nil
}

// Close closes every driverStream still open (a queue whose stream it closes then
// refuses new work; its Close still cleans up and returns), releases the
// primary context and stops the device executor. Events, modules and graphs not destroyed die
// with the context when the driver's reference count on it reaches zero.
// Close is idempotent; other calls afterwards return ErrClosed.
func (c *primaryContext) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	open := make([]*driverStream, 0, len(c.streams))
	for s := range c.streams {
		open = append(open, s)
	}
	c.mu.Unlock()

	var errs []error
	for _, s := range open {
		errs = append(errs, s.Close())
	}
	errs = append(errs, c.exec.Do(func() error {
		return c.drv.check("cuDevicePrimaryCtxRelease", c.drv.CuDevicePrimaryCtxRelease(c.dev))
	}))
	errs = append(errs, c.exec.Close())
	return errors.Join(errs...)
}

// do runs fn on the device executor unless the context is closed.
func (c *primaryContext) do(fn func() error) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: context of device %d", ErrClosed, c.ordinal)
	}
	return c.exec.Do(fn)
}

// cleanup runs fn, the destruction of an object of the context, on the
// device executor; after Close it does nothing and returns nil: the object
// died with the context.
func (c *primaryContext) cleanup(fn func() error) error {
	ran := false
	err := c.do(func() error { ran = true; return fn() })
	if !ran {
		return nil
	}
	return err
}

// Executor returns the device executor: storage calls run there, and a
// caller may batch several primaryContext calls inside one Do.
func (c *primaryContext) Executor() *executor { return c.exec }

// Ordinal returns the device ordinal.
func (c *primaryContext) Ordinal() int { return c.ordinal }

// Name returns the device name (cuDeviceGetName).
func (c *primaryContext) Name() string { return c.name }

// TotalMem returns the device memory in bytes (cuDeviceTotalMem_v2).
func (c *primaryContext) TotalMem() uint64 { return c.totalMem }

// DriverVersion returns the driver's CUDA version as 1000·major + 10·minor
// (cuDriverGetVersion; 12040 is CUDA 12.4).
func (c *primaryContext) DriverVersion() int { return c.version }

// Features returns the optional capabilities found at openContext.
func (c *primaryContext) Features() Features { return c.features }

// Attribute returns a device attribute (cuDeviceGetAttribute).
func (c *primaryContext) Attribute(attr deviceAttribute) (int, error) {
	var v int32
	err := c.do(func() error {
		return c.drv.check("cuDeviceGetAttribute", c.drv.CuDeviceGetAttribute(&v, int32(attr), c.dev))
	})
	return int(v), err
}

// Alloc allocates size bytes of device memory (cuMemAlloc_v2) and returns
// the device pointer. A refusal matches storage.ErrOutOfMemory; on error
// nothing was allocated.
func (c *primaryContext) Alloc(size uint64) (uintptr, error) {
	var p uintptr
	err := c.do(func() error {
		return c.drv.check("cuMemAlloc_v2", c.drv.CuMemAlloc(&p, uintptr(size)))
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: allocate %d bytes on device %d: %w", size, c.ordinal, err)
	}
	return p, nil
}

// Free releases memory from Alloc (cuMemFree_v2). The driver may wait for
// work using it; do not free while a stream of this thread records a graph.
func (c *primaryContext) Free(ptr uintptr) error {
	err := c.do(func() error { return c.drv.check("cuMemFree_v2", c.drv.CuMemFree(ptr)) })
	if err != nil {
		return fmt.Errorf("cuda: free %#x on device %d: %w", ptr, c.ordinal, err)
	}
	return nil
}

// MemGetInfo returns the device's free and total bytes (cuMemGetInfo_v2).
func (c *primaryContext) MemGetInfo() (free, total uint64, err error) {
	var f, t uintptr
	err = c.do(func() error { return c.drv.check("cuMemGetInfo_v2", c.drv.CuMemGetInfo(&f, &t)) })
	return uint64(f), uint64(t), err
}

// Synchronize waits for all work of the context (cuCtxSynchronize).
func (c *primaryContext) Synchronize() error {
	return c.do(func() error { return c.drv.check("cuCtxSynchronize", c.drv.CuCtxSynchronize()) })
}

// CopyDtoD copies n bytes between device pointers and waits for it
// (cuMemcpyDtoD_v2, ordered on the legacy default stream).
func (c *primaryContext) CopyDtoD(dst, src uintptr, n uint64) error {
	return c.do(func() error {
		return c.drv.check("cuMemcpyDtoD_v2", c.drv.CuMemcpyDtoD(dst, src, uintptr(n)))
	})
}

// physicalMemory is a CUmemGenericAllocationHandle from CreatePhysical.
type physicalMemory uint64

// VMM constants from cuda.h.
const (
	memAllocationTypePinned   = 1 // CU_MEM_ALLOCATION_TYPE_PINNED
	memLocationTypeDevice     = 1 // CU_MEM_LOCATION_TYPE_DEVICE
	memAccessProtReadWrite    = 3 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	memGranularityMinimum     = 0 // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	memGranularityRecommended = 1 // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
)

// vmm returns the VMM functions, or an error wrapping ErrUnsupported.
func (c *primaryContext) vmm() (*driver.VMMFuncs, error) {
	if !c.features.VirtualMemory {
		return nil, fmt.Errorf("%w: virtual memory management on device %d", ErrUnsupported, c.ordinal)
	}
	return c.drv.VMM, nil
}

func (c *primaryContext) allocationProp() driver.MemAllocationProp {
	return driver.MemAllocationProp{
		AllocType:    memAllocationTypePinned,
		LocationType: memLocationTypeDevice,
		LocationID:   c.dev,
	}
}

// AllocationGranularity returns the minimum and recommended granularity of
// physical allocations and mappings (cuMemGetAllocationGranularity).
func (c *primaryContext) AllocationGranularity() (minimum, recommended uint64, err error) {
	v, err := c.vmm()
	if err != nil {
		return 0, 0, err
	}
	prop := c.allocationProp()
	var lo, hi uintptr
	err = c.do(func() error {
		if err := c.drv.check("cuMemGetAllocationGranularity", v.CuMemGetAllocationGranularity(&lo, &prop, memGranularityMinimum)); err != nil {
			return err
		}
		return c.drv.check("cuMemGetAllocationGranularity", v.CuMemGetAllocationGranularity(&hi, &prop, memGranularityRecommended))
	})
	return uint64(lo), uint64(hi), err
}

// ReserveAddress reserves size bytes of device virtual address space
// (cuMemAddressReserve; alignment 0 = the default). size must be a multiple
// of the granularity.
func (c *primaryContext) ReserveAddress(size, alignment uint64) (uintptr, error) {
	v, err := c.vmm()
	if err != nil {
		return 0, err
	}
	var p uintptr
	err = c.do(func() error {
		return c.drv.check("cuMemAddressReserve", v.CuMemAddressReserve(&p, uintptr(size), uintptr(alignment), 0, 0))
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: reserve %d bytes of address space: %w", size, err)
	}
	return p, nil
}

// FreeAddress returns a reservation (cuMemAddressFree); unmap it first.
func (c *primaryContext) FreeAddress(base uintptr, size uint64) error {
	v, err := c.vmm()
	if err != nil {
		return err
	}
	return c.do(func() error {
		return c.drv.check("cuMemAddressFree", v.CuMemAddressFree(base, uintptr(size)))
	})
}

// CreatePhysical allocates size bytes of pinned device memory without an
// address (cuMemCreate). A refusal matches storage.ErrOutOfMemory.
func (c *primaryContext) CreatePhysical(size uint64) (physicalMemory, error) {
	v, err := c.vmm()
	if err != nil {
		return 0, err
	}
	prop := c.allocationProp()
	var h uint64
	err = c.do(func() error {
		return c.drv.check("cuMemCreate", v.CuMemCreate(&h, uintptr(size), &prop, 0))
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: create %d bytes of physical memory on device %d: %w", size, c.ordinal, err)
	}
	return physicalMemory(h), nil
}

// ReleasePhysical drops the handle (cuMemRelease); the memory goes back
// once every mapping of it is unmapped.
func (c *primaryContext) ReleasePhysical(h physicalMemory) error {
	v, err := c.vmm()
	if err != nil {
		return err
	}
	return c.do(func() error { return c.drv.check("cuMemRelease", v.CuMemRelease(uint64(h))) })
}

// Map maps physical memory h at [base, base+size) inside a reservation
// (cuMemMap, offset 0) and makes it readable and writable by this device
// (cuMemSetAccess). On error nothing stays mapped.
func (c *primaryContext) Map(base uintptr, size uint64, h physicalMemory) error {
	v, err := c.vmm()
	if err != nil {
		return err
	}
	desc := driver.MemAccessDesc{LocationType: memLocationTypeDevice, LocationID: c.dev, Flags: memAccessProtReadWrite}
	return c.do(func() error {
		if err := c.drv.check("cuMemMap", v.CuMemMap(base, uintptr(size), 0, uint64(h), 0)); err != nil {
			return err
		}
		if err := c.drv.check("cuMemSetAccess", v.CuMemSetAccess(base, uintptr(size), &desc, 1)); err != nil {
			v.CuMemUnmap(base, uintptr(size))
			return err
		}
		return nil
	})
}

// Unmap unmaps [base, base+size) (cuMemUnmap).
func (c *primaryContext) Unmap(base uintptr, size uint64) error {
	v, err := c.vmm()
	if err != nil {
		return err
	}
	return c.do(func() error { return c.drv.check("cuMemUnmap", v.CuMemUnmap(base, uintptr(size))) })
}

// ptrOf returns the address of b's first byte for a driver call, or nil for
// an empty slice.
func ptrOf(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}
