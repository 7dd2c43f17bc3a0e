package hoststorage

import "sync"

// MachineMemory returns the bytes of memory this machine has for a process:
// on Linux physical memory plus swap, or less where the process's control
// group sets a lower limit (cgroup v2 memory.max, v1
// memory.limit_in_bytes, on the process's group and every group above it);
// physical memory on macOS; 0 where it cannot be read (unknown). It is read
// once, on the first call.
//
// A Host refuses any single allocation that does not fit in it, and the
// host backend uses it as the device's capacity when none is set: the
// kernel kills a process that passes its group's limit, so an allocation
// past it must fail first, as ErrOutOfMemory.
func MachineMemory() uint64 { return machineLimit().Bytes }

// MachineLimit is MachineMemory with where the figure comes from.
type MachineLimit struct {
	Bytes uint64 // 0: unknown
	// From names the limit in force: "RAM+swap", "RAM", "cgroup v2
	// memory.max (/sys/fs/cgroup/...)" or "cgroup v1 memory.limit_in_bytes
	// (...)", "unknown".
	From string
}

// MachineMemoryLimit returns the limit MachineMemory uses and its source,
// for a user to see why a host device has the capacity it has.
func MachineMemoryLimit() MachineLimit { return machineLimit() }

var machineLimit = sync.OnceValue(readMachineLimit)
