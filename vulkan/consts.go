package vulkan

// Values from vulkan_core.h (Vulkan 1.3) that this package passes or
// checks; the names are the header's, shortened where the prefix is plain.
const (
	apiVersion13 = 1<<22 | 3<<12 // VK_MAKE_API_VERSION(0, 1, 3, 0)
	apiVersion12 = 1<<22 | 2<<12

	stApplicationInfo                     = 0
	stInstanceCreateInfo                  = 1
	stSubmitInfo                          = 4
	stMemoryAllocateInfo                  = 5
	stMappedMemoryRange                   = 6
	stSemaphoreCreateInfo                 = 9
	stBufferCreateInfo                    = 12
	stShaderModuleCreateInfo              = 16
	stPipelineShaderStageCreateInfo       = 18
	stComputePipelineCreateInfo           = 29
	stPipelineLayoutCreateInfo            = 30
	stDescriptorSetLayoutCreateInfo       = 32
	stDescriptorPoolCreateInfo            = 33
	stDescriptorSetAllocateInfo           = 34
	stWriteDescriptorSet                  = 35
	stCommandPoolCreateInfo               = 39
	stCommandBufferAllocateInfo           = 40
	stCommandBufferBeginInfo              = 42
	stMemoryBarrier                       = 46
	stDeviceQueueCreateInfo               = 2
	stDeviceCreateInfo                    = 3
	stPhysicalDeviceFeatures2             = 1000059000
	stPhysicalDeviceMemoryProperties2     = 1000059006
	stPhysicalDeviceProperties2           = 1000059001
	stPhysicalDeviceMaintenance3Props     = 1000168000
	stMemoryAllocateFlagsInfo             = 1000060000
	stDebugUtilsMessengerCreateInfoEXT    = 1000128004
	stPhysicalDeviceTimelineSemaphoreFeat = 1000207000
	stSemaphoreTypeCreateInfo             = 1000207002
	stTimelineSemaphoreSubmitInfo         = 1000207003
	stSemaphoreWaitInfo                   = 1000207004
	stSemaphoreSignalInfo                 = 1000207005
	stPhysicalDeviceMemoryBudgetPropsEXT  = 1000237000
	stBufferDeviceAddressInfo             = 1000244001
	stPhysicalDeviceBufferDeviceAddrFeat  = 1000257000

	vkSuccess                = 0
	vkNotReady               = 1
	vkTimeout                = 2
	vkIncomplete             = 5
	vkErrOutOfHostMemory     = -1
	vkErrOutOfDeviceMemory   = -2
	vkErrInitializationFail  = -3
	vkErrDeviceLost          = -4
	vkErrMemoryMapFailed     = -5
	vkErrLayerNotPresent     = -6
	vkErrExtensionNotPresent = -7
	vkErrFeatureNotPresent   = -8
	vkErrIncompatibleDriver  = -9
	vkErrTooManyObjects      = -10
	vkErrFragmentedPool      = -12
	vkErrUnknown             = -13
	vkErrOutOfPoolMemory     = -1000069000
	vkErrFragmentation       = -1000161000

	memoryPropertyDeviceLocal  = 0x1
	memoryPropertyHostVisible  = 0x2
	memoryPropertyHostCoherent = 0x4
	memoryPropertyHostCached   = 0x8
	memoryPropertyLazily       = 0x10
	memoryPropertyProtected    = 0x20
	memoryHeapDeviceLocal      = 0x1

	queueGraphics = 0x1
	queueCompute  = 0x2
	queueTransfer = 0x4
	queueSparse   = 0x8

	bufferUsageTransferSrc   = 0x1
	bufferUsageTransferDst   = 0x2
	bufferUsageStorage       = 0x20
	bufferUsageDeviceAddress = 0x20000

	memoryAllocateDeviceAddress = 0x2

	semaphoreTypeTimeline = 1

	commandPoolResetCommandBuffer = 0x2
	commandBufferLevelPrimary     = 0
	commandBufferOneTimeSubmit    = 0x1
	commandBufferSimultaneousUse  = 0x4

	pipelineStageTopOfPipe     = 0x1
	pipelineStageComputeShader = 0x800
	pipelineStageTransfer      = 0x1000
	pipelineStageHost          = 0x4000
	pipelineStageAllCommands   = 0x10000

	accessShaderRead    = 0x20
	accessShaderWrite   = 0x40
	accessTransferRead  = 0x800
	accessTransferWrite = 0x1000
	accessHostRead      = 0x2000
	accessHostWrite     = 0x4000
	accessMemoryRead    = 0x8000
	accessMemoryWrite   = 0x10000

	shaderStageCompute           = 0x20
	descriptorTypeStorageBuffer  = 7
	descriptorPoolFreeDescriptor = 0x1
	pipelineBindPointCompute     = 1

	debugSeverityVerbose = 0x1
	debugSeverityInfo    = 0x10
	debugSeverityWarning = 0x100
	debugSeverityError   = 0x1000
	debugTypeGeneral     = 0x1
	debugTypeValidation  = 0x2
	debugTypePerformance = 0x4

	wholeSize = ^uint64(0) // VK_WHOLE_SIZE
)

// Names of the layer and extensions this package asks for.
const (
	// ValidationLayer is the Khronos validation layer (Debian:
	// vulkan-validationlayers), enabled by Options.Validation.
	ValidationLayer        = "VK_LAYER_KHRONOS_validation"
	extDebugUtils          = "VK_EXT_debug_utils"
	extMemoryBudget        = "VK_EXT_memory_budget"
	extPortabilityEnumerat = "VK_KHR_portability_enumeration"
)
