package vulkan

// Options configure NewBackend and OpenDevice. The zero value opens the
// first usable device ($GPUMEM_VULKAN_DEVICE to choose another) through
// libvulkan.so.1 ($GPUMEM_LIBVULKAN to load another).
type Options struct {
	// Library is the loader's path; "" = $GPUMEM_LIBVULKAN, else
	// libvulkan.so.1.
	Library string
	// Device picks the device: an index into the enumeration or a
	// case-insensitive substring of its name; "" = $GPUMEM_VULKAN_DEVICE,
	// else the first usable device, discrete GPUs first.
	Device string
	// Queues is how many VkQueues of the compute family to create (at most
	// the family's count); 0 = up to 4. gpumem streams share them round
	// robin, ordered by timeline semaphores.
	Queues int
	// Validation enables the Khronos validation layer with a debug
	// messenger; Backend.ValidationMessages returns what it reported. The
	// backend fails to open (ErrUnsupported) when the layer is missing.
	Validation bool
	// Staging forces Write and Read through host-visible staging buffers
	// and vkCmdCopyBuffer even where device memory is host-visible (as it
	// is on integrated GPUs and lavapipe), the path discrete GPUs take.
	Staging bool
	// MaxAllocations lowers the device's maxMemoryAllocationCount, the
	// number of VkDeviceMemory objects the backend keeps at once (pages and
	// staging buffers); 0 = the device's limit.
	MaxAllocations uint32
	// Capacity lowers the device memory budget, in bytes; 0 = the heap's
	// budget (VK_EXT_memory_budget) or size.
	Capacity uint64
	// Granular asks for granular pages (pages that map only the granules
	// their live slices cover, as the cuda backend's do through cuMemMap).
	// Vulkan's way to map memory into a buffer piecewise is sparse
	// binding, which lavapipe lacks and this backend does not implement:
	// NewBackend refuses with ErrUnsupported (DeviceInfo.SparseBinding says
	// whether the device could). Without it pages are whole, and
	// gpumem.WithPageGranular(true) leaves them whole too.
	Granular bool
}

// validationLayer is the Khronos validation layer (Debian:
// vulkan-validationlayers), enabled by Options.Validation.
const validationLayer = "VK_LAYER_KHRONOS_validation"
