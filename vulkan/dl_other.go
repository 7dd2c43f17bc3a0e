//go:build !linux

package vulkan

import "github.com/gpumem/gpumem/internal/dl"

const defaultLibrary = "libvulkan.so.1"

// loadLibrary refuses (dl.ErrUnsupportedOS): the backend is built and
// tested on Linux only.
func loadLibrary(path string) (uintptr, error) { return dl.Open(path, false) }

func lookupSymbol(lib uintptr, name string) uintptr { return dl.Symbol(lib, name) }

// call is never reached: no loader loads here.
func call(uintptr, ...uintptr) int32 { return vkErrInitializationFail }

func call64(uintptr, ...uintptr) uint64 { return 0 }
