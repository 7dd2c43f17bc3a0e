package cuda

import (
	"fmt"
	"os"
	"unsafe"
)

// EnvLibrary names the environment variable that overrides the driver
// library path ("libcuda.so.1") when Options.Library is empty. Tests point it
// (or Options.Library) at the fake driver built from testdata/fakecuda.c.
const EnvLibrary = "GPUMEM_LIBCUDA"

// MinDriverVersion is the oldest driver API version the package runs on,
// as cuDriverGetVersion reports it (1000·major + 10·minor): CUDA 11.4, the
// first with cuGraphInstantiateWithFlags, the newest required symbol
// (Linux driver R470). Newer optional groups are listed on Features.
const MinDriverVersion = 11040

// defaultLibrary is the driver's versioned name. Never plain "libcuda.so":
// that is often the toolkit's link-time stub, which loads but fails every
// call.
const defaultLibrary = "libcuda.so.1"

// libraryPath resolves the library to load: explicit, then $GPUMEM_LIBCUDA,
// then libcuda.so.1.
func libraryPath(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if p := os.Getenv(EnvLibrary); p != "" {
		return p
	}
	return defaultLibrary
}

// driver is one loaded driver library with its functions bound. The bound
// functions are plain C calls: they carry no thread or context discipline of
// their own; Context and Stream run them on executors.
//
// Types follow cuda.h on 64-bit linux: CUresult is int32; CUdevice int32;
// handles (CUcontext, CUstream, CUevent, CUmodule, CUfunction, CUgraph,
// CUgraphExec) and CUdeviceptr are pointer-sized; size_t is uintptr;
// unsigned int is uint32; unsigned long long is uint64.
type driver struct {
	path string
	lib  uintptr

	cuInit                     func(flags uint32) int32
	cuDriverGetVersion         func(version *int32) int32
	cuDeviceGet                func(dev *int32, ordinal int32) int32
	cuDeviceGetCount           func(count *int32) int32
	cuDeviceGetName            func(name *byte, length int32, dev int32) int32
	cuDeviceTotalMem           func(bytes *uintptr, dev int32) int32
	cuDeviceGetAttribute       func(value *int32, attr int32, dev int32) int32
	cuDevicePrimaryCtxRetain   func(ctx *uintptr, dev int32) int32
	cuDevicePrimaryCtxRelease  func(dev int32) int32
	cuCtxSetCurrent            func(ctx uintptr) int32
	cuCtxSynchronize           func() int32
	cuMemAlloc                 func(ptr *uintptr, size uintptr) int32
	cuMemFree                  func(ptr uintptr) int32
	cuMemGetInfo               func(free, total *uintptr) int32
	cuMemcpyDtoDAsync          func(dst, src, size, stream uintptr) int32
	cuMemcpyHtoDAsync          func(dst uintptr, src unsafe.Pointer, size, stream uintptr) int32
	cuMemcpyDtoHAsync          func(dst unsafe.Pointer, src, size, stream uintptr) int32
	cuMemcpyDtoD               func(dst, src, size uintptr) int32
	cuStreamCreate             func(stream *uintptr, flags uint32) int32
	cuStreamDestroy            func(stream uintptr) int32
	cuStreamSynchronize        func(stream uintptr) int32
	cuStreamWaitEvent          func(stream, event uintptr, flags uint32) int32
	cuEventCreate              func(event *uintptr, flags uint32) int32
	cuEventRecord              func(event, stream uintptr) int32
	cuEventSynchronize         func(event uintptr) int32
	cuEventQuery               func(event uintptr) int32
	cuEventDestroy             func(event uintptr) int32
	cuModuleLoadDataEx         func(module *uintptr, image unsafe.Pointer, numOptions uint32, options *int32, values *uintptr) int32
	cuModuleGetFunction        func(fn *uintptr, module uintptr, name *byte) int32
	cuModuleUnload             func(module uintptr) int32
	cuLaunchKernel             func(fn uintptr, gx, gy, gz, bx, by, bz, sharedMem uint32, stream uintptr, params, extra unsafe.Pointer) int32
	cuStreamBeginCapture       func(stream uintptr, mode int32) int32
	cuStreamEndCapture         func(stream uintptr, graph *uintptr) int32
	cuStreamIsCapturing        func(stream uintptr, status *int32) int32
	cuGraphInstantiateWithFlag func(exec *uintptr, graph uintptr, flags uint64) int32
	cuGraphLaunch              func(exec, stream uintptr) int32
	cuGraphExecDestroy         func(exec uintptr) int32
	cuGraphDestroy             func(graph uintptr) int32
	cuGetErrorName             func(code int32, name **byte) int32

	// Optional: nil when the library lacks the symbol.
	cuMemsetD8Async    func(dst uintptr, value uint8, size, stream uintptr) int32
	cuFuncGetParamInfo func(fn, index uintptr, offset, size *uintptr) int32 // CUDA 12.4+

	// Optional as a group: vmm is nil unless all eight symbols are present.
	vmm *vmmFuncs
	// Optional as a group: library is nil unless all four symbols are present.
	library *libraryFuncs
}

// libraryFuncs are the context-independent loading functions (CUDA 12.0+):
// a CUlibrary is loaded once for every context, and its CUkernels give a
// CUfunction in the current one.
type libraryFuncs struct {
	cuLibraryLoadData   func(lib *uintptr, code unsafe.Pointer, jitOptions *int32, jitValues *uintptr, numJit uint32, libOptions *int32, libValues *uintptr, numLib uint32) int32
	cuLibraryGetKernel  func(kernel *uintptr, lib uintptr, name *byte) int32
	cuKernelGetFunction func(fn *uintptr, kernel uintptr) int32
	cuLibraryUnload     func(lib uintptr) int32
}

func (l *libraryFuncs) bindings() []binding {
	return []binding{
		{&l.cuLibraryLoadData, []string{"cuLibraryLoadData"}},
		{&l.cuLibraryGetKernel, []string{"cuLibraryGetKernel"}},
		{&l.cuKernelGetFunction, []string{"cuKernelGetFunction"}},
		{&l.cuLibraryUnload, []string{"cuLibraryUnload"}},
	}
}

// vmmFuncs are the virtual memory management functions (CUDA 10.2+).
type vmmFuncs struct {
	cuMemAddressReserve           func(ptr *uintptr, size, alignment, addr uintptr, flags uint64) int32
	cuMemAddressFree              func(ptr, size uintptr) int32
	cuMemCreate                   func(handle *uint64, size uintptr, prop *memAllocationProp, flags uint64) int32
	cuMemRelease                  func(handle uint64) int32
	cuMemMap                      func(ptr, size, offset uintptr, handle uint64, flags uint64) int32
	cuMemUnmap                    func(ptr, size uintptr) int32
	cuMemSetAccess                func(ptr, size uintptr, desc *memAccessDesc, count uintptr) int32
	cuMemGetAllocationGranularity func(granularity *uintptr, prop *memAllocationProp, option int32) int32
}

// memAllocationProp is CUmemAllocationProp (32 bytes on 64-bit).
type memAllocationProp struct {
	allocType            uint32 // CU_MEM_ALLOCATION_TYPE_PINNED = 1
	requestedHandleTypes uint32 // CU_MEM_HANDLE_TYPE_NONE = 0
	locationType         uint32 // CU_MEM_LOCATION_TYPE_DEVICE = 1
	locationID           int32  // device ordinal
	win32HandleMetaData  uintptr
	compressionType      uint8
	gpuDirectRDMACapable uint8
	usage                uint16
	reserved             [4]uint8
}

// memAccessDesc is CUmemAccessDesc (12 bytes).
type memAccessDesc struct {
	locationType uint32 // CU_MEM_LOCATION_TYPE_DEVICE = 1
	locationID   int32
	flags        uint32 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
}

// Compile-time layout checks against cuda.h.
var (
	_ [32 - unsafe.Sizeof(memAllocationProp{})]byte
	_ [unsafe.Sizeof(memAllocationProp{}) - 32]byte
	_ [12 - unsafe.Sizeof(memAccessDesc{})]byte
	_ [unsafe.Sizeof(memAccessDesc{}) - 12]byte
)

// binding ties a Go function variable to the symbols that may provide it,
// preferred first.
type binding struct {
	fptr    any
	symbols []string
}

func (d *driver) required() []binding {
	return []binding{
		{&d.cuInit, []string{"cuInit"}},
		{&d.cuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&d.cuDeviceGet, []string{"cuDeviceGet"}},
		{&d.cuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&d.cuDeviceGetName, []string{"cuDeviceGetName"}},
		{&d.cuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		{&d.cuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&d.cuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		// cuda.h maps the name to _v2 since CUDA 11; older drivers export
		// only the plain name, with the same signature.
		{&d.cuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&d.cuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&d.cuCtxSynchronize, []string{"cuCtxSynchronize"}},
		{&d.cuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&d.cuMemFree, []string{"cuMemFree_v2"}},
		{&d.cuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&d.cuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
		{&d.cuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&d.cuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&d.cuMemcpyDtoD, []string{"cuMemcpyDtoD_v2"}},
		{&d.cuStreamCreate, []string{"cuStreamCreate"}},
		{&d.cuStreamDestroy, []string{"cuStreamDestroy_v2"}},
		{&d.cuStreamSynchronize, []string{"cuStreamSynchronize"}},
		{&d.cuStreamWaitEvent, []string{"cuStreamWaitEvent"}},
		{&d.cuEventCreate, []string{"cuEventCreate"}},
		{&d.cuEventRecord, []string{"cuEventRecord"}},
		{&d.cuEventSynchronize, []string{"cuEventSynchronize"}},
		{&d.cuEventQuery, []string{"cuEventQuery"}},
		{&d.cuEventDestroy, []string{"cuEventDestroy_v2"}},
		{&d.cuModuleLoadDataEx, []string{"cuModuleLoadDataEx"}},
		{&d.cuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&d.cuModuleUnload, []string{"cuModuleUnload"}},
		{&d.cuLaunchKernel, []string{"cuLaunchKernel"}},
		{&d.cuStreamBeginCapture, []string{"cuStreamBeginCapture_v2"}},
		{&d.cuStreamEndCapture, []string{"cuStreamEndCapture"}},
		{&d.cuStreamIsCapturing, []string{"cuStreamIsCapturing"}},
		{&d.cuGraphInstantiateWithFlag, []string{"cuGraphInstantiateWithFlags"}},
		{&d.cuGraphLaunch, []string{"cuGraphLaunch"}},
		{&d.cuGraphExecDestroy, []string{"cuGraphExecDestroy"}},
		{&d.cuGraphDestroy, []string{"cuGraphDestroy"}},
		{&d.cuGetErrorName, []string{"cuGetErrorName"}},
	}
}

func (v *vmmFuncs) bindings() []binding {
	return []binding{
		{&v.cuMemAddressReserve, []string{"cuMemAddressReserve"}},
		{&v.cuMemAddressFree, []string{"cuMemAddressFree"}},
		{&v.cuMemCreate, []string{"cuMemCreate"}},
		{&v.cuMemRelease, []string{"cuMemRelease"}},
		{&v.cuMemMap, []string{"cuMemMap"}},
		{&v.cuMemUnmap, []string{"cuMemUnmap"}},
		{&v.cuMemSetAccess, []string{"cuMemSetAccess"}},
		{&v.cuMemGetAllocationGranularity, []string{"cuMemGetAllocationGranularity"}},
	}
}

// resolve finds every binding's address in lib without registering
// anything; it returns the first binding it cannot resolve, by its preferred
// symbol name.
func resolve(lib uintptr, bs []binding) (addrs []uintptr, missing string) {
	addrs = make([]uintptr, len(bs))
	for i, b := range bs {
		for _, name := range b.symbols {
			if addrs[i] = lookupSymbol(lib, name); addrs[i] != 0 {
				break
			}
		}
		if addrs[i] == 0 {
			return nil, b.symbols[0]
		}
	}
	return addrs, ""
}

func register(bs []binding, addrs []uintptr) {
	for i, b := range bs {
		registerFunc(b.fptr, addrs[i])
	}
}

// loadDriver opens the library at path and binds it. Every symbol is probed
// with dlsym before anything is registered, so a missing required symbol is
// an error wrapping ErrNoDriver (naming the symbol), never a panic, and a
// missing optional one leaves its feature off.
func loadDriver(path string) (*driver, error) {
	lib, err := loadLibrary(path)
	if err != nil {
		return nil, fmt.Errorf("%w: load %s: %v", ErrNoDriver, path, err)
	}
	d := &driver{path: path, lib: lib}
	req := d.required()
	addrs, missing := resolve(lib, req)
	if missing != "" {
		return nil, fmt.Errorf("%w: %s lacks required symbol %s (driver too old? the cuda backend needs CUDA %d.%d, Linux driver R470 or later)",
			ErrNoDriver, path, missing, MinDriverVersion/1000, MinDriverVersion%1000/10)
	}
	register(req, addrs)

	if addr := lookupSymbol(lib, "cuMemsetD8Async"); addr != 0 {
		registerFunc(&d.cuMemsetD8Async, addr)
	}
	if addr := lookupSymbol(lib, "cuFuncGetParamInfo"); addr != 0 {
		registerFunc(&d.cuFuncGetParamInfo, addr)
	}
	v := new(vmmFuncs)
	if addrs, missing := resolve(lib, v.bindings()); missing == "" {
		register(v.bindings(), addrs)
		d.vmm = v
	}
	l := new(libraryFuncs)
	if addrs, missing := resolve(lib, l.bindings()); missing == "" {
		register(l.bindings(), addrs)
		d.library = l
	}
	return d, nil
}

// check turns a CUresult into nil or a *DriverError for op.
func (d *driver) check(op string, rc int32) error {
	if rc == codeSuccess {
		return nil
	}
	return &DriverError{Op: op, Code: int(rc), Name: d.errorName(rc)}
}

// errorName asks the driver for code's name; "" when it does not know it.
func (d *driver) errorName(code int32) string {
	var p *byte
	if d.cuGetErrorName(code, &p) != codeSuccess || p == nil {
		return ""
	}
	return cString(p)
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cStringBytes returns s as a NUL-terminated byte slice for a const char*.
func cStringBytes(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
