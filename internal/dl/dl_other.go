//go:build !linux

package dl

import (
	"fmt"
	"runtime"
)

// Open always fails: drivers are loaded on Linux only.
func Open(path string, global bool) (uintptr, error) {
	return 0, fmt.Errorf("%w: loading %s on %s", ErrUnsupportedOS, path, runtime.GOOS)
}

// Symbol returns 0: no library is ever loaded here.
func Symbol(lib uintptr, name string) uintptr { return 0 }
