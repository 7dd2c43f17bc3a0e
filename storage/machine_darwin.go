//go:build darwin

package storage

import (
	"encoding/binary"
	"syscall"
)

// readMachineMemory is hw.memsize, the physical memory (macOS swap grows on
// demand and has no fixed total).
func readMachineMemory() uint64 {
	s, err := syscall.Sysctl("hw.memsize")
	if err != nil || len(s) == 0 || len(s) > 8 {
		return 0
	}
	// Sysctl drops a trailing NUL byte: pad the little-endian uint64 back.
	var b [8]byte
	copy(b[:], s)
	return binary.LittleEndian.Uint64(b[:])
}
