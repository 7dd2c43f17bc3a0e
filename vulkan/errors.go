package vulkan

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

var (
	// ErrNoLoader is returned (wrapped) when the Vulkan loader cannot be
	// used: libvulkan.so.1 (or Options.Library, or $GPUMEM_LIBVULKAN) does
	// not load, lacks vkGetInstanceProcAddr, or vkCreateInstance fails.
	// Install libvulkan1 and a driver (mesa-vulkan-drivers ships lavapipe,
	// which runs on the CPU), or fall back to gpumem.Open.
	ErrNoLoader = errors.New("vulkan: no usable Vulkan loader")

	// ErrNoDevice is returned (wrapped) when the loader works but no device
	// fits: none is enumerated, the one Options.Device or
	// $GPUMEM_VULKAN_DEVICE names does not exist, or the chosen one lacks
	// what the backend needs (Vulkan 1.2, a compute queue, timeline
	// semaphores, buffer device addresses, a DEVICE_LOCAL memory type). The
	// message names the device and what it lacks.
	ErrNoDevice = errors.New("vulkan: no usable Vulkan device")

	// ErrUnsupported is returned for what this backend cannot do on Vulkan
	// although the cuda backend can: granular pages (Options.Granular;
	// they need sparse binding), a graph launched inside another capture
	// (CUDA nests child graphs), a validation layer asked for but not
	// installed, a device without the memory type a buffer needs. See
	// doc.go.
	ErrUnsupported = errors.New("vulkan: not supported by this backend")

	// ErrClosed is returned by a call on a closed Backend, queue or Kernel.
	ErrClosed = errors.New("vulkan: closed")

	// ErrAllocationLimit is returned (wrapped, together with
	// storage.ErrOutOfMemory) by an allocation that would exceed the
	// device's maxMemoryAllocationCount, or the lower Options.MaxAllocations:
	// the device then frees cached pages and retries, as for any
	// out-of-memory answer.
	ErrAllocationLimit = errors.New("vulkan: allocation count limit reached")

	// ErrArgs is matched by every *ArgError: a dispatch whose buffers or
	// push constants do not fit its kernel, refused before the driver saw
	// anything.
	ErrArgs = errors.New("vulkan: dispatch arguments do not fit the kernel")

	// ErrWorkGroupCount is matched by the *ArgError of a dispatch whose
	// group count in some dimension is past the device's
	// maxComputeWorkGroupCount (65,535 on many devices): the driver cannot
	// run it. The message names the count, the dimension and the limit.
	// Split the work over several dispatches, or make the kernel loop over
	// the grid and load it with KernelSpec.GridStride, whose counts
	// Dispatch caps instead (see GroupsFor).
	ErrWorkGroupCount = errors.New("vulkan: workgroup count past the device's maxComputeWorkGroupCount")

	// ErrOpEnded is returned by an Op's methods called after its run
	// function returned: its buffers may have moved and its stream runs
	// other work.
	ErrOpEnded = errors.New("vulkan: op has returned; its buffers and stream are no longer its own")
)

// Error is a failed Vulkan call: Op names the function, Code is its VkResult.
//
// It matches, with errors.Is, storage.ErrOutOfMemory
// (VK_ERROR_OUT_OF_DEVICE_MEMORY, VK_ERROR_OUT_OF_HOST_MEMORY,
// VK_ERROR_TOO_MANY_OBJECTS) and storage.ErrDevicePoisoned
// (VK_ERROR_DEVICE_LOST: nothing on the device can be trusted afterwards).
type Error struct {
	Op   string
	Code int32
}

func (e *Error) Error() string {
	return fmt.Sprintf("vulkan: %s: %s (%d)", e.Op, resultName(e.Code), e.Code)
}

// Is implements errors.Is for the storage sentinels above.
func (e *Error) Is(target error) bool {
	switch target {
	case storage.ErrOutOfMemory:
		return e.Code == vk.ErrorOutOfDeviceMemory || e.Code == vk.ErrorOutOfHostMemory || e.Code == vk.ErrorTooManyObjects
	case storage.ErrDevicePoisoned:
		return e.Code == vk.ErrorDeviceLost
	}
	return false
}

// check turns a VkResult into nil (VK_SUCCESS) or an *Error.
func check(op string, r int32) error {
	if r == vk.Success {
		return nil
	}
	return &Error{Op: op, Code: r}
}

func resultName(r int32) string {
	switch r {
	case vk.Success:
		return "VK_SUCCESS"
	case vk.NotReady:
		return "VK_NOT_READY"
	case vk.Timeout:
		return "VK_TIMEOUT"
	case vk.Incomplete:
		return "VK_INCOMPLETE"
	case vk.ErrorOutOfHostMemory:
		return "VK_ERROR_OUT_OF_HOST_MEMORY"
	case vk.ErrorOutOfDeviceMemory:
		return "VK_ERROR_OUT_OF_DEVICE_MEMORY"
	case vk.ErrorInitializationFail:
		return "VK_ERROR_INITIALIZATION_FAILED"
	case vk.ErrorDeviceLost:
		return "VK_ERROR_DEVICE_LOST"
	case vk.ErrorMemoryMapFailed:
		return "VK_ERROR_MEMORY_MAP_FAILED"
	case vk.ErrorLayerNotPresent:
		return "VK_ERROR_LAYER_NOT_PRESENT"
	case vk.ErrorExtensionNotPresent:
		return "VK_ERROR_EXTENSION_NOT_PRESENT"
	case vk.ErrorFeatureNotPresent:
		return "VK_ERROR_FEATURE_NOT_PRESENT"
	case vk.ErrorIncompatibleDriver:
		return "VK_ERROR_INCOMPATIBLE_DRIVER"
	case vk.ErrorTooManyObjects:
		return "VK_ERROR_TOO_MANY_OBJECTS"
	case vk.ErrorFragmentedPool:
		return "VK_ERROR_FRAGMENTED_POOL"
	case vk.ErrorUnknown:
		return "VK_ERROR_UNKNOWN"
	case vk.ErrorOutOfPoolMemory:
		return "VK_ERROR_OUT_OF_POOL_MEMORY"
	case vk.ErrorFragmentation:
		return "VK_ERROR_FRAGMENTATION"
	}
	return "VkResult"
}

// ArgError is a dispatch refused before the driver saw it: Kernel names the
// kernel, Reason says what does not fit. It matches ErrArgs, and a group
// count past the device's limit also ErrWorkGroupCount.
type ArgError struct {
	Kernel string
	Reason string

	kind error // a narrower sentinel it matches too, or nil
}

// Is reports whether target is the narrower sentinel this refusal matches
// besides ErrArgs (ErrWorkGroupCount).
func (e *ArgError) Is(target error) bool { return e.kind != nil && target == e.kind }

func (e *ArgError) Error() string {
	return fmt.Sprintf("vulkan: dispatch %s: %s", e.Kernel, e.Reason)
}

// Unwrap returns ErrArgs.
func (e *ArgError) Unwrap() error { return ErrArgs }
