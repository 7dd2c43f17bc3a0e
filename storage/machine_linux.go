//go:build linux

package storage

import "syscall"

// readMachineMemory is total RAM plus total swap: what the kernel's
// overcommit heuristic measures one mapping against.
func readMachineMemory() uint64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	unit := uint64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	ram, swap := uint64(si.Totalram), uint64(si.Totalswap)
	if ram > ^uint64(0)/unit || swap > ^uint64(0)/unit {
		return 0
	}
	return SatAdd(ram*unit, swap*unit)
}
