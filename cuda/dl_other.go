//go:build !linux

package cuda

import "github.com/gpumem/gpumem/internal/dl"

// loadLibrary always fails: the driver is only loaded on linux (Windows
// ships nvcuda.dll, which this package does not bind).
func loadLibrary(path string) (uintptr, error) { return dl.Open(path, true) }

// lookupSymbol returns 0: no library is ever loaded here.
func lookupSymbol(lib uintptr, name string) uintptr { return dl.Symbol(lib, name) }

// registerFunc is unreachable: loadLibrary never succeeds on this OS.
func registerFunc(fptr any, addr uintptr) {
	panic("cuda: registerFunc without a loaded library")
}

// threadID returns -1: thread ids are not tracked here, so an Executor
// cannot recognise a call from its own worker (see Executor.Do).
func threadID() int { return -1 }
