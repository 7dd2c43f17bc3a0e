//go:build linux

package vulkan

import (
	"errors"
	"runtime"

	"github.com/ebitengine/purego"
)

// defaultLibrary is the loader's soname: never plain libvulkan.so, which
// only the -dev package installs.
const defaultLibrary = "libvulkan.so.1"

// loadLibrary dlopens path with RTLD_NOW (a broken library fails here, not
// at a later call). dlerror's message is per thread, so the goroutine is
// locked to its thread around purego.Dlopen (which calls both). The loader
// is never closed: drivers may keep threads running inside it.
func loadLibrary(path string) (uintptr, error) {
	runtime.LockOSThread()
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	runtime.UnlockOSThread()
	if err == nil {
		return lib, nil
	}
	if err.Error() == "" {
		return 0, errors.New("dlopen failed and dlerror gave no reason (is the file a shared object for this architecture?)")
	}
	return 0, err
}

// lookupSymbol returns the address of name in lib, or 0 when it is absent.
func lookupSymbol(lib uintptr, name string) uintptr {
	addr, err := purego.Dlsym(lib, name)
	if err != nil {
		return 0
	}
	return addr
}

// call calls the C function at fn with args (integers, handles, and
// pointers converted with uintptr(unsafe.Pointer(p)) in the call
// expression: go:uintptrescapes keeps what they point to on the heap and
// alive until the call returns) and returns its result as a VkResult.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

// call64 is call for the functions returning a 64-bit value
// (vkGetBufferDeviceAddress).
//
//go:uintptrescapes
func call64(fn uintptr, args ...uintptr) uint64 {
	r, _, _ := purego.SyscallN(fn, args...)
	return uint64(r)
}
