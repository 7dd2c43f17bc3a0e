//go:build !linux

package vulkan

import "errors"

const defaultLibrary = "libvulkan.so.1"

// loadLibrary refuses: the backend is built and tested on Linux only.
func loadLibrary(string) (uintptr, error) {
	return 0, errors.New("the vulkan backend loads libvulkan.so.1 on Linux only")
}

func lookupSymbol(uintptr, string) uintptr { return 0 }

// call is never reached: no loader loads here.
func call(uintptr, ...uintptr) int32 { return vkErrInitializationFail }

func call64(uintptr, ...uintptr) uint64 { return 0 }
