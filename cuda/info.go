package cuda

// DeviceInfo describes the device a Backend runs on, as the driver
// reported it when the backend opened it (Backend.Info).
type DeviceInfo struct {
	// Ordinal is the device's CUDA ordinal (Options.Device).
	Ordinal int
	// Name is the device's name (cuDeviceGetName).
	Name string
	// TotalMem is the device's memory in bytes (cuDeviceTotalMem_v2).
	TotalMem uint64
	// DriverVersion is the driver's CUDA version as 1000·major + 10·minor
	// (cuDriverGetVersion; 12040 is CUDA 12.4).
	DriverVersion int
	// Features are the optional driver capabilities found.
	Features Features
}

// Features are the optional driver capabilities found when the backend opened the device.
type Features struct {
	// VirtualMemory: the eight VMM symbols are present and the device
	// reports CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED.
	VirtualMemory bool
	// AsyncMemset: cuMemsetD8Async is present.
	AsyncMemset bool
	// Library: the library API (cuLibraryLoadData, cuLibraryGetKernel,
	// cuKernelGetFunction, cuLibraryUnload; CUDA 12.0+) is present.
	// LoadModule does not use it: under lazy module loading (the default
	// since CUDA 12.2) it defers the JIT and its refusal past the load
	// (module.go); modules load through cuModuleLoadDataEx either way.
	Library bool
	// ParamInfo: cuFuncGetParamInfo (CUDA 12.4+) is present, so every
	// kernel's parameters are known; without it, only PTX modules' are
	// (from their .param lists).
	ParamInfo bool
}
