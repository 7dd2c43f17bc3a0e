//go:build linux

package cuda

import (
	"syscall"

	"github.com/ebitengine/purego"
)

// loadLibrary opens a shared object the way the driver must be opened:
// RTLD_NOW, so a broken library fails here rather than at a later call, and
// RTLD_GLOBAL, as the CUDA runtime itself opens it. The library is never
// closed: unloading libcuda while its worker threads run is not safe.
func loadLibrary(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
}

// lookupSymbol returns the address of name in lib, or 0 when it is absent.
func lookupSymbol(lib uintptr, name string) uintptr {
	addr, err := purego.Dlsym(lib, name)
	if err != nil {
		return 0
	}
	return addr
}

// registerFunc makes *fptr call the C function at addr (non-zero).
func registerFunc(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) }

// threadID returns the calling goroutine's current OS thread id. It is only
// stable on a goroutine locked to its thread.
func threadID() int { return syscall.Gettid() }
