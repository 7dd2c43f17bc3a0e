//go:build linux

package driver

import (
	"github.com/ebitengine/purego"

	"github.com/gpumem/gpumem/internal/dl"
)

// LoadLibrary opens the driver the way it must be opened: RTLD_NOW, and
// RTLD_GLOBAL as the CUDA runtime itself opens it; never closed (package
// internal/dl says why, and why the thread is locked around dlopen).
func LoadLibrary(path string) (uintptr, error) { return dl.Open(path, true) }

// LookupSymbol returns the address of name in lib, or 0 when it is absent.
func LookupSymbol(lib uintptr, name string) uintptr { return dl.Symbol(lib, name) }

// RegisterFunc makes *fptr call the C function at addr (non-zero).
func RegisterFunc(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) }
