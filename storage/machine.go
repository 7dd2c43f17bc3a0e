package storage

import "sync"

// MachineMemory returns the bytes of memory this machine has for a process:
// physical memory plus swap on Linux, physical memory on macOS, 0 where it
// cannot be read (unknown). It is read once, on the first call.
//
// A Host refuses any single allocation that does not fit in it, and the
// host backend uses it as the device's capacity when none is set.
func MachineMemory() uint64 { return machineMemory() }

var machineMemory = sync.OnceValue(readMachineMemory)
