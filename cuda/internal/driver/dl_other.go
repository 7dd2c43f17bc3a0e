//go:build !linux

package driver

import "github.com/gpumem/gpumem/internal/dl"

// LoadLibrary always fails: the driver is only loaded on linux (Windows
// ships nvcuda.dll, which this package does not bind).
func LoadLibrary(path string) (uintptr, error) { return dl.Open(path, true) }

// LookupSymbol returns 0: no library is ever loaded here.
func LookupSymbol(lib uintptr, name string) uintptr { return dl.Symbol(lib, name) }

// RegisterFunc is unreachable: LoadLibrary never succeeds on this OS.
func RegisterFunc(fptr any, addr uintptr) {
	panic("cuda: RegisterFunc without a loaded library")
}
