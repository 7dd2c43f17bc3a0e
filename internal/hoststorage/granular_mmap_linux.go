//go:build linux

// The host mapping of granular ranges on Linux: an untouched anonymous
// private mapping per reservation, MADV_DONTNEED to give granules back
// (design in granular_host.go).

package hoststorage

import (
	"os"
	"syscall"
)

// hostMapping is the Linux range backing; nil on systems without one.
var hostMapping rangeBacking = mmapBacking{}

type mmapBacking struct{}

func (mmapBacking) reserve(size uint64) ([]byte, error) {
	return syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
}

func (mmapBacking) discard(b []byte) error { return syscall.Madvise(b, syscall.MADV_DONTNEED) }

func (mmapBacking) release(b []byte) error { return syscall.Munmap(b) }

func osPageSize() uint64 { return uint64(os.Getpagesize()) }
