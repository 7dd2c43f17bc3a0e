//go:build linux

package cuda

import (
	"syscall"

	"github.com/ebitengine/purego"

	"github.com/gpumem/gpumem/internal/dl"
)

// loadLibrary opens the driver the way it must be opened: RTLD_NOW, and
// RTLD_GLOBAL as the CUDA runtime itself opens it; never closed (package
// internal/dl says why, and why the thread is locked around dlopen).
func loadLibrary(path string) (uintptr, error) { return dl.Open(path, true) }

// lookupSymbol returns the address of name in lib, or 0 when it is absent.
func lookupSymbol(lib uintptr, name string) uintptr { return dl.Symbol(lib, name) }

// registerFunc makes *fptr call the C function at addr (non-zero).
func registerFunc(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) }

// threadID returns the calling goroutine's current OS thread id. It is only
// stable on a goroutine locked to its thread.
func threadID() int { return syscall.Gettid() }
