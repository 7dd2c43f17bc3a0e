//go:build linux

package dl

import (
	"errors"
	"runtime"

	"github.com/ebitengine/purego"
)

// Open dlopens path with RTLD_NOW, and RTLD_GLOBAL when global (as the CUDA
// runtime opens libcuda) else RTLD_LOCAL. See the package doc for why the
// thread is locked.
func Open(path string, global bool) (uintptr, error) {
	mode := purego.RTLD_NOW | purego.RTLD_LOCAL
	if global {
		mode = purego.RTLD_NOW | purego.RTLD_GLOBAL
	}
	runtime.LockOSThread()
	lib, err := purego.Dlopen(path, mode)
	runtime.UnlockOSThread()
	if err == nil {
		return lib, nil
	}
	if err.Error() == "" {
		return 0, errors.New("dlopen failed and dlerror gave no reason (is the file a shared object for this architecture?)")
	}
	return 0, err
}

// Symbol returns the address of name in lib, or 0 when it is absent.
func Symbol(lib uintptr, name string) uintptr {
	addr, err := purego.Dlsym(lib, name)
	if err != nil {
		return 0
	}
	return addr
}
