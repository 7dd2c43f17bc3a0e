//go:build linux

package cuda

import (
	"errors"
	"runtime"
	"syscall"

	"github.com/ebitengine/purego"
)

// loadLibrary opens a shared object the way the driver must be opened:
// RTLD_NOW, so a broken library fails here rather than at a later call, and
// RTLD_GLOBAL, as the CUDA runtime itself opens it. The library is never
// closed: unloading libcuda while its worker threads run is not safe.
//
// dlerror's message is per thread: dlopen and dlerror must run on one OS
// thread, or the goroutine may move between them and read another thread's
// (empty) message. purego.Dlopen makes both calls, so the goroutine is
// locked to its thread around it. Should the message still be empty, the
// error says so rather than printing nothing.
func loadLibrary(path string) (uintptr, error) {
	runtime.LockOSThread()
	lib, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
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

// registerFunc makes *fptr call the C function at addr (non-zero).
func registerFunc(fptr any, addr uintptr) { purego.RegisterFunc(fptr, addr) }

// threadID returns the calling goroutine's current OS thread id. It is only
// stable on a goroutine locked to its thread.
func threadID() int { return syscall.Gettid() }
