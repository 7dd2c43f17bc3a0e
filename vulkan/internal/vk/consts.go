package vk

// Values from vulkan_core.h (Vulkan 1.3) that package vulkan passes or
// checks; the names are the header's, shortened where the prefix is plain
// (St: a VkStructureType; Error: a negative VkResult).
const (
	APIVersion13 = 1<<22 | 3<<12 // VK_MAKE_API_VERSION(0, 1, 3, 0)
	APIVersion12 = 1<<22 | 2<<12

	StApplicationInfo                     = 0
	StInstanceCreateInfo                  = 1
	StSubmitInfo                          = 4
	StMemoryAllocateInfo                  = 5
	StMappedMemoryRange                   = 6
	StSemaphoreCreateInfo                 = 9
	StBufferCreateInfo                    = 12
	StShaderModuleCreateInfo              = 16
	StPipelineShaderStageCreateInfo       = 18
	StComputePipelineCreateInfo           = 29
	StPipelineLayoutCreateInfo            = 30
	StDescriptorSetLayoutCreateInfo       = 32
	StDescriptorPoolCreateInfo            = 33
	StDescriptorSetAllocateInfo           = 34
	StWriteDescriptorSet                  = 35
	StCommandPoolCreateInfo               = 39
	StCommandBufferAllocateInfo           = 40
	StCommandBufferBeginInfo              = 42
	StMemoryBarrier                       = 46
	StDeviceQueueCreateInfo               = 2
	StDeviceCreateInfo                    = 3
	StPhysicalDeviceFeatures2             = 1000059000
	StPhysicalDeviceMemoryProperties2     = 1000059006
	StPhysicalDeviceProperties2           = 1000059001
	StPhysicalDeviceMaintenance3Props     = 1000168000
	StMemoryAllocateFlagsInfo             = 1000060000
	StDebugUtilsMessengerCreateInfoEXT    = 1000128004
	StPhysicalDeviceTimelineSemaphoreFeat = 1000207000
	StSemaphoreTypeCreateInfo             = 1000207002
	StTimelineSemaphoreSubmitInfo         = 1000207003
	StSemaphoreWaitInfo                   = 1000207004
	StSemaphoreSignalInfo                 = 1000207005
	StPhysicalDeviceMemoryBudgetPropsEXT  = 1000237000
	StBufferDeviceAddressInfo             = 1000244001
	StPhysicalDeviceBufferDeviceAddrFeat  = 1000257000

	Success                  = 0
	NotReady                 = 1
	Timeout                  = 2
	Incomplete               = 5
	ErrorOutOfHostMemory     = -1
	ErrorOutOfDeviceMemory   = -2
	ErrorInitializationFail  = -3
	ErrorDeviceLost          = -4
	ErrorMemoryMapFailed     = -5
	ErrorLayerNotPresent     = -6
	ErrorExtensionNotPresent = -7
	ErrorFeatureNotPresent   = -8
	ErrorIncompatibleDriver  = -9
	ErrorTooManyObjects      = -10
	ErrorFragmentedPool      = -12
	ErrorUnknown             = -13
	ErrorOutOfPoolMemory     = -1000069000
	ErrorFragmentation       = -1000161000

	MemoryPropertyDeviceLocal  = 0x1
	MemoryPropertyHostVisible  = 0x2
	MemoryPropertyHostCoherent = 0x4
	MemoryPropertyHostCached   = 0x8
	MemoryPropertyLazily       = 0x10
	MemoryPropertyProtected    = 0x20
	MemoryHeapDeviceLocal      = 0x1

	QueueGraphics = 0x1
	QueueCompute  = 0x2
	QueueTransfer = 0x4
	QueueSparse   = 0x8

	BufferUsageTransferSrc   = 0x1
	BufferUsageTransferDst   = 0x2
	BufferUsageStorage       = 0x20
	BufferUsageDeviceAddress = 0x20000

	MemoryAllocateDeviceAddress = 0x2

	SemaphoreTypeTimeline = 1

	CommandPoolResetCommandBuffer = 0x2
	CommandBufferLevelPrimary     = 0
	CommandBufferOneTimeSubmit    = 0x1
	CommandBufferSimultaneousUse  = 0x4

	PipelineStageTopOfPipe     = 0x1
	PipelineStageComputeShader = 0x800
	PipelineStageTransfer      = 0x1000
	PipelineStageHost          = 0x4000
	PipelineStageAllCommands   = 0x10000

	AccessShaderRead    = 0x20
	AccessShaderWrite   = 0x40
	AccessTransferRead  = 0x800
	AccessTransferWrite = 0x1000
	AccessHostRead      = 0x2000
	AccessHostWrite     = 0x4000
	AccessMemoryRead    = 0x8000
	AccessMemoryWrite   = 0x10000

	ShaderStageCompute           = 0x20
	DescriptorTypeStorageBuffer  = 7
	DescriptorPoolFreeDescriptor = 0x1
	PipelineBindPointCompute     = 1

	DebugSeverityVerbose = 0x1
	DebugSeverityInfo    = 0x10
	DebugSeverityWarning = 0x100
	DebugSeverityError   = 0x1000
	DebugTypeGeneral     = 0x1
	DebugTypeValidation  = 0x2
	DebugTypePerformance = 0x4

	WholeSize = ^uint64(0) // VK_WHOLE_SIZE
)

// Names of the extensions package vulkan asks for.
const (
	ExtDebugUtils          = "VK_EXT_debug_utils"
	ExtMemoryBudget        = "VK_EXT_memory_budget"
	ExtPortabilityEnumerat = "VK_KHR_portability_enumeration"
)
