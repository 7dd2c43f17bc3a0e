// Package driver binds the CUDA driver API with purego: the library loaded
// at run time (no cgo), every function the cuda package calls bound to its
// versioned symbol, the C structures they take and the CUresult codes.
//
// # Owns
//
//   - Loading: the library opened with RTLD_NOW | RTLD_GLOBAL, never closed
//     (package internal/dl says why).
//   - binding: the versioned symbols (cuMemAlloc_v2,
//     cuStreamBeginCapture_v2, ...), each probed with dlsym before it is
//     registered, so a missing required symbol is reported by name, never a
//     panic or a nil call; missing optional ones (the eight VMM functions as
//     a group, the four of the library API as a group, cuFuncGetParamInfo,
//     cuMemsetD8Async) leave their function nil.
//   - The layouts of the structures passed (checked against cuda.h at
//     compile time) and the CUresult codes the cuda package tells apart.
//
// # Does not know
//
// Threads, contexts, errors or the gpumem interfaces: a bound function is a
// plain C call that returns its CUresult. Package cuda runs the calls on
// the right threads and turns the results into its errors and types.
package driver

import (
	"unsafe"
)

// Driver is one loaded driver library with its functions bound. The bound
// functions are plain C calls: they carry no thread or context discipline of
// their own; package cuda runs them on its executors.
//
// Types follow cuda.h on 64-bit linux: CUresult is int32; CUdevice int32;
// handles (CUcontext, CUstream, CUevent, CUmodule, CUfunction, CUgraph,
// CUgraphExec) and CUdeviceptr are pointer-sized; size_t is uintptr;
// unsigned int is uint32; unsigned long long is uint64.
type Driver struct {
	Path string
	lib  uintptr

	CuInit                     func(flags uint32) int32
	CuDriverGetVersion         func(version *int32) int32
	CuDeviceGet                func(dev *int32, ordinal int32) int32
	CuDeviceGetCount           func(count *int32) int32
	CuDeviceGetName            func(name *byte, length int32, dev int32) int32
	CuDeviceTotalMem           func(bytes *uintptr, dev int32) int32
	CuDeviceGetAttribute       func(value *int32, attr int32, dev int32) int32
	CuDevicePrimaryCtxRetain   func(ctx *uintptr, dev int32) int32
	CuDevicePrimaryCtxRelease  func(dev int32) int32
	CuCtxSetCurrent            func(ctx uintptr) int32
	CuCtxSynchronize           func() int32
	CuMemAlloc                 func(ptr *uintptr, size uintptr) int32
	CuMemFree                  func(ptr uintptr) int32
	CuMemGetInfo               func(free, total *uintptr) int32
	CuMemcpyDtoDAsync          func(dst, src, size, stream uintptr) int32
	CuMemcpyHtoDAsync          func(dst uintptr, src unsafe.Pointer, size, stream uintptr) int32
	CuMemcpyDtoHAsync          func(dst unsafe.Pointer, src, size, stream uintptr) int32
	CuMemcpyDtoD               func(dst, src, size uintptr) int32
	CuStreamCreate             func(stream *uintptr, flags uint32) int32
	CuStreamDestroy            func(stream uintptr) int32
	CuStreamSynchronize        func(stream uintptr) int32
	CuStreamWaitEvent          func(stream, event uintptr, flags uint32) int32
	CuEventCreate              func(event *uintptr, flags uint32) int32
	CuEventRecord              func(event, stream uintptr) int32
	CuEventSynchronize         func(event uintptr) int32
	CuEventQuery               func(event uintptr) int32
	CuEventDestroy             func(event uintptr) int32
	CuModuleLoadDataEx         func(module *uintptr, image unsafe.Pointer, numOptions uint32, options *int32, values *uintptr) int32
	CuModuleGetFunction        func(fn *uintptr, module uintptr, name *byte) int32
	CuModuleUnload             func(module uintptr) int32
	CuLaunchKernel             func(fn uintptr, gx, gy, gz, bx, by, bz, sharedMem uint32, stream uintptr, params, extra unsafe.Pointer) int32
	CuStreamBeginCapture       func(stream uintptr, mode int32) int32
	CuStreamEndCapture         func(stream uintptr, graph *uintptr) int32
	CuStreamIsCapturing        func(stream uintptr, status *int32) int32
	CuGraphInstantiateWithFlag func(exec *uintptr, graph uintptr, flags uint64) int32
	CuGraphLaunch              func(exec, stream uintptr) int32
	CuGraphExecDestroy         func(exec uintptr) int32
	CuGraphDestroy             func(graph uintptr) int32
	cuGetErrorName             func(code int32, name **byte) int32

	// Optional: nil when the library lacks the symbol.
	CuMemsetD8Async    func(dst uintptr, value uint8, size, stream uintptr) int32
	CuFuncGetParamInfo func(fn, index uintptr, offset, size *uintptr) int32 // CUDA 12.4+

	// Optional as a group: vmm is nil unless all eight symbols are present.
	VMM *VMMFuncs
	// Optional as a group: library is nil unless all four symbols are present.
	Library *LibraryFuncs
}

// LibraryFuncs are the context-independent loading functions (CUDA 12.0+):
// a CUlibrary is loaded once for every context, and its CUkernels give a
// CUfunction in the current one.
type LibraryFuncs struct {
	cuLibraryLoadData   func(lib *uintptr, code unsafe.Pointer, jitOptions *int32, jitValues *uintptr, numJit uint32, libOptions *int32, libValues *uintptr, numLib uint32) int32
	cuLibraryGetKernel  func(kernel *uintptr, lib uintptr, name *byte) int32
	cuKernelGetFunction func(fn *uintptr, kernel uintptr) int32
	cuLibraryUnload     func(lib uintptr) int32
}

func (l *LibraryFuncs) bindings() []binding {
	return []binding{
		{&l.cuLibraryLoadData, []string{"cuLibraryLoadData"}},
		{&l.cuLibraryGetKernel, []string{"cuLibraryGetKernel"}},
		{&l.cuKernelGetFunction, []string{"cuKernelGetFunction"}},
		{&l.cuLibraryUnload, []string{"cuLibraryUnload"}},
	}
}

// VMMFuncs are the virtual memory management functions (CUDA 10.2+).
type VMMFuncs struct {
	CuMemAddressReserve           func(ptr *uintptr, size, alignment, addr uintptr, flags uint64) int32
	CuMemAddressFree              func(ptr, size uintptr) int32
	CuMemCreate                   func(handle *uint64, size uintptr, prop *MemAllocationProp, flags uint64) int32
	CuMemRelease                  func(handle uint64) int32
	CuMemMap                      func(ptr, size, offset uintptr, handle uint64, flags uint64) int32
	CuMemUnmap                    func(ptr, size uintptr) int32
	CuMemSetAccess                func(ptr, size uintptr, desc *MemAccessDesc, count uintptr) int32
	CuMemGetAllocationGranularity func(granularity *uintptr, prop *MemAllocationProp, option int32) int32
}

// MemAllocationProp is CUmemAllocationProp (32 bytes on 64-bit).
type MemAllocationProp struct {
	AllocType            uint32 // CU_MEM_ALLOCATION_TYPE_PINNED = 1
	requestedHandleTypes uint32 // CU_MEM_HANDLE_TYPE_NONE = 0
	LocationType         uint32 // CU_MEM_LOCATION_TYPE_DEVICE = 1
	LocationID           int32  // device ordinal
	win32HandleMetaData  uintptr
	compressionType      uint8
	gpuDirectRDMACapable uint8
	usage                uint16
	reserved             [4]uint8
}

// MemAccessDesc is CUmemAccessDesc (12 bytes).
type MemAccessDesc struct {
	LocationType uint32 // CU_MEM_LOCATION_TYPE_DEVICE = 1
	LocationID   int32
	Flags        uint32 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
}

// Compile-time layout checks against cuda.h.
var (
	_ [32 - unsafe.Sizeof(MemAllocationProp{})]byte
	_ [unsafe.Sizeof(MemAllocationProp{}) - 32]byte
	_ [12 - unsafe.Sizeof(MemAccessDesc{})]byte
	_ [unsafe.Sizeof(MemAccessDesc{}) - 12]byte
)

// binding ties a Go function variable to the symbols that may provide it,
// preferred first.
type binding struct {
	fptr    any
	symbols []string
}

func (d *Driver) required() []binding {
	return []binding{
		{&d.CuInit, []string{"cuInit"}},
		{&d.CuDriverGetVersion, []string{"cuDriverGetVersion"}},
		{&d.CuDeviceGet, []string{"cuDeviceGet"}},
		{&d.CuDeviceGetCount, []string{"cuDeviceGetCount"}},
		{&d.CuDeviceGetName, []string{"cuDeviceGetName"}},
		{&d.CuDeviceTotalMem, []string{"cuDeviceTotalMem_v2"}},
		{&d.CuDeviceGetAttribute, []string{"cuDeviceGetAttribute"}},
		{&d.CuDevicePrimaryCtxRetain, []string{"cuDevicePrimaryCtxRetain"}},
		// cuda.h maps the name to _v2 since CUDA 11; older drivers export
		// only the plain name, with the same signature.
		{&d.CuDevicePrimaryCtxRelease, []string{"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"}},
		{&d.CuCtxSetCurrent, []string{"cuCtxSetCurrent"}},
		{&d.CuCtxSynchronize, []string{"cuCtxSynchronize"}},
		{&d.CuMemAlloc, []string{"cuMemAlloc_v2"}},
		{&d.CuMemFree, []string{"cuMemFree_v2"}},
		{&d.CuMemGetInfo, []string{"cuMemGetInfo_v2"}},
		{&d.CuMemcpyDtoDAsync, []string{"cuMemcpyDtoDAsync_v2"}},
		{&d.CuMemcpyHtoDAsync, []string{"cuMemcpyHtoDAsync_v2"}},
		{&d.CuMemcpyDtoHAsync, []string{"cuMemcpyDtoHAsync_v2"}},
		{&d.CuMemcpyDtoD, []string{"cuMemcpyDtoD_v2"}},
		{&d.CuStreamCreate, []string{"cuStreamCreate"}},
		{&d.CuStreamDestroy, []string{"cuStreamDestroy_v2"}},
		{&d.CuStreamSynchronize, []string{"cuStreamSynchronize"}},
		{&d.CuStreamWaitEvent, []string{"cuStreamWaitEvent"}},
		{&d.CuEventCreate, []string{"cuEventCreate"}},
		{&d.CuEventRecord, []string{"cuEventRecord"}},
		{&d.CuEventSynchronize, []string{"cuEventSynchronize"}},
		{&d.CuEventQuery, []string{"cuEventQuery"}},
		{&d.CuEventDestroy, []string{"cuEventDestroy_v2"}},
		{&d.CuModuleLoadDataEx, []string{"cuModuleLoadDataEx"}},
		{&d.CuModuleGetFunction, []string{"cuModuleGetFunction"}},
		{&d.CuModuleUnload, []string{"cuModuleUnload"}},
		{&d.CuLaunchKernel, []string{"cuLaunchKernel"}},
		{&d.CuStreamBeginCapture, []string{"cuStreamBeginCapture_v2"}},
		{&d.CuStreamEndCapture, []string{"cuStreamEndCapture"}},
		{&d.CuStreamIsCapturing, []string{"cuStreamIsCapturing"}},
		{&d.CuGraphInstantiateWithFlag, []string{"cuGraphInstantiateWithFlags"}},
		{&d.CuGraphLaunch, []string{"cuGraphLaunch"}},
		{&d.CuGraphExecDestroy, []string{"cuGraphExecDestroy"}},
		{&d.CuGraphDestroy, []string{"cuGraphDestroy"}},
		{&d.cuGetErrorName, []string{"cuGetErrorName"}},
	}
}

func (v *VMMFuncs) bindings() []binding {
	return []binding{
		{&v.CuMemAddressReserve, []string{"cuMemAddressReserve"}},
		{&v.CuMemAddressFree, []string{"cuMemAddressFree"}},
		{&v.CuMemCreate, []string{"cuMemCreate"}},
		{&v.CuMemRelease, []string{"cuMemRelease"}},
		{&v.CuMemMap, []string{"cuMemMap"}},
		{&v.CuMemUnmap, []string{"cuMemUnmap"}},
		{&v.CuMemSetAccess, []string{"cuMemSetAccess"}},
		{&v.CuMemGetAllocationGranularity, []string{"cuMemGetAllocationGranularity"}},
	}
}

// resolve finds every binding's address in lib without registering
// anything; it returns the first binding it cannot resolve, by its preferred
// symbol name.
func resolve(lib uintptr, bs []binding) (addrs []uintptr, missing string) {
	addrs = make([]uintptr, len(bs))
	for i, b := range bs {
		for _, name := range b.symbols {
			if addrs[i] = LookupSymbol(lib, name); addrs[i] != 0 {
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
		RegisterFunc(b.fptr, addrs[i])
	}
}

// Load opens the library at path and binds it. Every symbol is probed with
// dlsym before anything is registered: a library that does not load is
// the loader's error; a missing required symbol is returned by name
// (missing) with nothing registered, never a panic; a missing optional one
// leaves its function nil.
func Load(path string) (d *Driver, missing string, err error) {
	lib, err := LoadLibrary(path)
	if err != nil {
		return nil, "", err
	}
	d = &Driver{Path: path, lib: lib}
	req := d.required()
	addrs, missing := resolve(lib, req)
	if missing != "" {
		return nil, missing, nil
	}
	register(req, addrs)

	if addr := LookupSymbol(lib, "cuMemsetD8Async"); addr != 0 {
		RegisterFunc(&d.CuMemsetD8Async, addr)
	}
	if addr := LookupSymbol(lib, "cuFuncGetParamInfo"); addr != 0 {
		RegisterFunc(&d.CuFuncGetParamInfo, addr)
	}
	v := new(VMMFuncs)
	if addrs, missing := resolve(lib, v.bindings()); missing == "" {
		register(v.bindings(), addrs)
		d.VMM = v
	}
	l := new(LibraryFuncs)
	if addrs, missing := resolve(lib, l.bindings()); missing == "" {
		register(l.bindings(), addrs)
		d.Library = l
	}
	return d, "", nil
}

// ErrorName asks the driver for code's name; "" when it does not know it.
func (d *Driver) ErrorName(code int32) string {
	var p *byte
	if d.cuGetErrorName(code, &p) != CodeSuccess || p == nil {
		return ""
	}
	return CString(p)
}

// CString copies a NUL-terminated C string.
func CString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// CStringBytes returns s as a NUL-terminated byte slice for a const char*.
func CStringBytes(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
