// Package vulkan runs gpumem on a Vulkan device, loaded at run time with
// purego: no cgo, and no loader or driver needed to build or to run
// without one. It runs on any conformant Vulkan 1.2 driver with timeline
// semaphores and buffer device addresses: NVIDIA's, AMD's, Intel's, and
// Mesa's lavapipe, which runs on the CPU and lets every test run against a
// real driver on machines without a GPU.
//
// The purego bindings are package vulkan/internal/vk (the loader, the
// function tables, the structures, the header's values; a bound call
// returns its VkResult); here are the instance, the device, the public
// descriptions filled from vk's structures (DeviceInfo, MemoryType),
// errors, and the gpumem.Backend adapter, whose op, capture bookkeeping
// and host waits are package internal/backendkit's, shared with cuda.
//
// # Opening a device, loading a shader, dispatching inside an op
//
// Open a whole gpumem.Device with OpenDevice (or a Backend with NewBackend
// for gpumem.OpenBackend). Without a loader or a usable device the error
// wraps gpumem.ErrNotSupported and ErrNoLoader or ErrNoDevice, with the
// reason; fall back to gpumem.Open:
//
//	dev, err := vulkan.OpenDevice(vulkan.Options{}) // $GPUMEM_VULKAN_DEVICE picks one
//	be := dev.Backend().(*vulkan.Backend)
//
// Load a compute shader from SPIR-V with how it takes its arguments
// (storage buffers at set 0, bindings 0..n-1; push constants at offset 0);
// the spec is checked against the module's bindings and the size of its
// push-constant block, read from the SPIR-V:
//
//	k, err := be.LoadKernel("saxpy", spirv, vulkan.KernelSpec{Buffers: 2, PushConstants: 8})
//	defer k.Close()
//
// Dispatch it inside an op with Enqueue: the run function gets an *Op
// whose Dispatch records into the op's command buffer, with Use(i) and
// UseRange(i, off, n) binding the op's uses at their current places and
// Push for scalars (Op.Copy records a device copy between two such
// windows):
//
//	err = vulkan.Enqueue(s, "saxpy", uses, func(op *vulkan.Op) error {
//		return op.Dispatch(k, vulkan.GroupsFor(n, 64),
//			[]vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n), float32(2)))
//	})
//
// Arguments are checked before the driver sees anything: a mismatch is an
// *ArgError matching ErrArgs. The package ships three kernels (GLSL in
// shaders/, SPIR-V beside it, scripts/vulkan-shaders.sh regenerates it):
// KernelSaxpy, KernelReduceU32, KernelAddU32, loaded with LoadShipped.
//
// A device runs at most maxComputeWorkGroupCount groups per dimension
// (Backend.Info().Limits): 65,535 on many devices, lavapipe's included,
// and never fewer; at a local size of 64 that is 4,194,240 items for a
// kernel of one item per invocation. Dispatch refuses a larger count at
// once, with an *ArgError matching ErrWorkGroupCount that names the count,
// the dimension and the limit (the driver would fail the submission). A
// kernel that loops over its items with a grid stride, as the shipped ones
// do, is loaded with KernelSpec.GridStride: Dispatch caps its counts at
// MaxStrideGroups and GroupsFor(n, local) works for any n.
//
// # Owns
//
//   - Loading: libvulkan.so.1 (Options.Library, else $GPUMEM_LIBVULKAN,
//     overrides the path), every other function through
//     vkGetInstanceProcAddr / vkGetDeviceProcAddr; a missing one is an
//     error naming it. The loader is loaded once per process and path;
//     every Backend creates its own instance and Close destroys it, but
//     the drivers and layers the loader loads for an instance are kept
//     loaded for the life of the process (instance.go: the loader would
//     unload them at each vkDestroyInstance and load them again at the
//     next open; an NVIDIA H200 refused every vkCreateInstance after ~30
//     such opens in one process). Devices lists the devices with their heaps, memory
//     types, the limits that matter here and VK_EXT_memory_budget; the
//     device is picked by Options.Device or $GPUMEM_VULKAN_DEVICE (index or
//     name), else the first usable one, discrete GPUs first.
//   - The C layout of every structure passed to the driver
//     (vulkan/internal/vk), checked against vulkan_core.h by a test that
//     compiles a C program.
//   - Storages (storage.go, alloc.go): one VkDeviceMemory per allocation
//     with one VkBuffer over it; the memory type chosen as the Vulkan
//     Memory Allocator does (required DEVICE_LOCAL, preferring types the
//     host cannot map, memtype.go), the next candidate tried on failure;
//     the heap's budget (VK_EXT_memory_budget, else its size, or
//     Options.Capacity) enforced before the driver is asked; alignment the
//     largest of 256, minStorageBufferOffsetAlignment and
//     nonCoherentAtomSize; at most maxMemoryAllocationCount (or
//     Options.MaxAllocations) allocations, pages and staging buffers
//     together: past it an Alloc fails with ErrAllocationLimit, which is
//     also storage.ErrOutOfMemory, so the device frees cached pages and
//     retries. VK_ERROR_OUT_OF_DEVICE_MEMORY is an *Error matching
//     storage.ErrOutOfMemory; VK_ERROR_DEVICE_LOST one matching
//     storage.ErrDevicePoisoned, and it poisons the backend (Poisoned).
//     A free waits until no device work uses the allocation (vkFreeMemory
//     does not wait for the device): every step that recorded a command on
//     it completed, and no commandGraph that recorded one is left. Flush
//     hands the idle ones to a releaser goroutine, off the relocation's
//     path, which also waits on the queues' semaphores for the others and
//     frees each once its work completed (reaper.go); an explicit cleanup
//     ends with Backend.Release (gpumem.Releaser), which frees the idle
//     ones and the idle staging buffers before it returns, without the
//     device lock, so after freeing everything and cleaning up
//     BytesAllocated is 0 and the backend holds no VkDeviceMemory; an
//     allocation refused for memory waits for the queued frees and
//     retries once.
//   - Queues (queue.go): a stream.Queue per gpumem stream over the
//     VkQueues of one compute family (several streams may share one); one
//     timeline semaphore per queue is its fences and its completion; a
//     cross-stream WaitFence is a semaphore wait in the next submission.
//     Relocation's copies are vkCmdCopyBuffer between the pages' buffers.
//   - Host access (transfers.go): Buffer.Map maps device memory where pages
//     are host-visible (gpumem.HostMapper, PagesHostVisible; invalidated at
//     Map, flushed at Release), else it returns gpumem.ErrNotSupported.
//     Write and Read go through the mapping too (flushed and invalidated
//     by nonCoherentAtomSize where it is not coherent), else, or with
//     Options.Staging, through host-visible staging buffers, pooled by size
//     class for reuse (staging.go: at most 8 buffers and 64 MiB, or a
//     sixteenth of the heap; emptied by an explicit cleanup; when an
//     allocation is refused for memory, the pooled buffers whose freeing
//     can make room for it are freed: all of them for the allocation
//     count, those in its heaps for a heap's memory (on a discrete GPU,
//     whose staging buffers are in the host's heap, usually none for a
//     page); freed by Close).
//   - Kernels (kernel.go, op.go, descriptors.go): shader modules, compute
//     pipelines, descriptor sets per dispatch, push constants (checked
//     against the module's block), group counts (checked against
//     maxComputeWorkGroupCount, capped for grid-stride kernels), device
//     copies between an op's uses.
//   - Capture (capture.go): the queues are stream.Recorders; a capture
//     is one command buffer (SIMULTANEOUS_USE), sealed into a
//     *commandGraph that each launch submits as one step.
//   - Validation (validation.go): with Options.Validation, the Khronos
//     layer and a debug messenger whose messages ValidationMessages
//     returns; the tests enable it and fail on any message. The shadow
//     model (internal/shadowmodel) runs on this backend too (the root's
//     shadow_model_vulkan_test.go, and the model's replay of
//     testdata/vulkan.txt); internal/vulkantest holds the no-device and
//     validation rules they share.
//
// # Invariants
//
//   - (K1) A Vulkan object is destroyed only after the work that may use it
//     completed (V2 in queue.go; a freed allocation waits for every step
//     that recorded a command on it and for the graphs that recorded one,
//     alloc.go; Kernel.Close waits for the device), and everything the
//     backend made, pooled staging buffers included, is destroyed by Close.
//   - (K2) Nothing here panics or hangs for want of a loader, device,
//     function or memory: those are errors; a fence names only numbers a
//     submission the driver accepted will signal (V1).
//   - (K3) Every pointer handed to the driver points into memory kept alive
//     for the call (converted in the call expression of a
//     go:uintptrescapes function, or reachable from such memory).
//
// # Does not know
//
// Pages, pools, handles or when to relocate: the device (package gpumem)
// decides; the backend maps storage and stream operations onto Vulkan and
// decides only when a freed allocation's memory may go back: after the
// work that used it, which it tracks per allocation.
//
// # What Vulkan does not give here that CUDA does
//
//   - Graph capture is a recorded command buffer submitted again per
//     launch (capture.go), so what cannot be recorded invalidates the
//     capture instead of running: a host wait, a Read or a mapped Write
//     inside it (writes in a capture go through staging buffers, whose
//     bytes every launch copies again), a wait on another stream's
//     unfinished work, and a graph launched inside another capture (CUDA
//     nests child graphs; Vulkan would need secondary command buffers):
//     that last one is refused with ErrUnsupported.
//   - Granular pages. CUDA maps physical granules into reserved address
//     space (cuMemMap); Vulkan's equivalent is sparse binding, which
//     lavapipe lacks and this backend does not use: every page is whole
//     (no storage.Granular), and what a page maps cannot shrink in place.
//     Options.Granular is refused with ErrUnsupported;
//     gpumem.WithPageGranular(true) leaves the pages whole.
//   - Bindings larger than maxStorageBufferRange (128 MiB on lavapipe): a
//     page may be larger, but one descriptor cannot cover more; bind
//     windows with UseRange, or take buffer device addresses
//     (Op.DeviceAddress, Resource.Ptr) in the shader.
//
// # Concurrency
//
// Backend and Kernel methods, and the storages' and queues', are safe for
// concurrent use.
// An op's run function runs on the goroutine that enqueues it, inside
// Enqueue, while the device is held (stream.EnqueueRunner); its *Op is
// valid only there. vkQueueSubmit on a shared VkQueue is serialised by a
// lock per VkQueue; a queue's command pool and descriptor pools are used
// only under its lock. The releaser frees memory on its own goroutine,
// which takes no lock of the device or of a queue; Release, which an
// explicit cleanup calls without the device lock, waits only for it (it
// takes a queue's lock briefly to reclaim the staging buffers of
// completed steps).
package vulkan
