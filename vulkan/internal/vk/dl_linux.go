//go:build linux

package vk

import (
	"github.com/ebitengine/purego"

	"github.com/gpumem/gpumem/internal/dl"
)

// DefaultLibrary is the loader's soname: never plain libvulkan.so, which
// only the -dev package installs.
const DefaultLibrary = "libvulkan.so.1"

// LoadLibrary dlopens the loader with RTLD_NOW and RTLD_LOCAL; never
// closed, drivers keep threads running inside it (package internal/dl says
// why the thread is locked around dlopen).
func LoadLibrary(path string) (uintptr, error) { return dl.Open(path, false) }

// LookupSymbol returns the address of name in lib, or 0 when it is absent.
func LookupSymbol(lib uintptr, name string) uintptr { return dl.Symbol(lib, name) }

// Call calls the C function at fn with args (integers, handles, and
// pointers converted with uintptr(unsafe.Pointer(p)) in the call
// expression: go:uintptrescapes keeps what they point to on the heap and
// alive until the call returns) and returns its result as a VkResult.
//
//go:uintptrescapes
func Call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

// Call64 is call for the functions returning a 64-bit value
// (vkGetBufferDeviceAddress).
//
//go:uintptrescapes
func Call64(fn uintptr, args ...uintptr) uint64 {
	r, _, _ := purego.SyscallN(fn, args...)
	return uint64(r)
}
