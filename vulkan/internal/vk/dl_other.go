//go:build !linux

package vk

import "github.com/gpumem/gpumem/internal/dl"

const DefaultLibrary = "libvulkan.so.1"

// LoadLibrary refuses (dl.ErrUnsupportedOS): the backend is built and
// tested on Linux only.
func LoadLibrary(path string) (uintptr, error) { return dl.Open(path, false) }

func LookupSymbol(lib uintptr, name string) uintptr { return dl.Symbol(lib, name) }

// Call is never reached: no loader loads here.
func Call(uintptr, ...uintptr) int32 { return ErrorInitializationFail }

func Call64(uintptr, ...uintptr) uint64 { return 0 }
