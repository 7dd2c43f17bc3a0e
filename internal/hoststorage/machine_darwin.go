//go:build darwin

package hoststorage

import (
	"encoding/binary"
	"syscall"
)

// readMachineLimit is hw.memsize, the physical memory (macOS swap grows on
// demand and has no fixed total).
func readMachineLimit() MachineLimit {
	s, err := syscall.Sysctl("hw.memsize")
	if err != nil || len(s) == 0 || len(s) > 8 {
		return MachineLimit{From: "unknown"}
	}
	// Sysctl drops a trailing NUL byte: pad the little-endian uint64 back.
	var b [8]byte
	copy(b[:], s)
	return MachineLimit{Bytes: binary.LittleEndian.Uint64(b[:]), From: "RAM"}
}
