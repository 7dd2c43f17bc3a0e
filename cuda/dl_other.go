//go:build !linux

package cuda

import (
	"fmt"
	"runtime"
)

// loadLibrary always fails: the driver is only loaded on linux (Windows
// ships nvcuda.dll, which this package does not bind).
func loadLibrary(path string) (uintptr, error) {
	return 0, fmt.Errorf("loading %s is not supported on %s", path, runtime.GOOS)
}

// lookupSymbol returns 0: no library is ever loaded here.
func lookupSymbol(lib uintptr, name string) uintptr { return 0 }

// registerFunc is unreachable: loadLibrary never succeeds on this OS.
func registerFunc(fptr any, addr uintptr) {
	panic("cuda: registerFunc without a loaded library")
}

// threadID returns -1: thread ids are not tracked here, so an Executor
// cannot recognise a call from its own worker (see Executor.Do).
func threadID() int { return -1 }
