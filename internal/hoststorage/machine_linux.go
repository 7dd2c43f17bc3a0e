//go:build linux

package hoststorage

import (
	"os"
	"syscall"

	"github.com/gpumem/gpumem/storage"
)

// readMachineLimit is total RAM plus total swap (what the kernel's
// overcommit heuristic measures one mapping against), or the process's
// control-group limit where that is lower: in a container the group's
// limit, not the machine's RAM, is where the kernel's OOM killer stops the
// process.
func readMachineLimit() MachineLimit {
	m := MachineLimit{From: "unknown"}
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err == nil {
		unit := uint64(si.Unit)
		if unit == 0 {
			unit = 1
		}
		ram, swap := uint64(si.Totalram), uint64(si.Totalswap)
		if ram <= ^uint64(0)/unit && swap <= ^uint64(0)/unit {
			m = MachineLimit{Bytes: storage.SatAdd(ram*unit, swap*unit), From: "RAM+swap"}
		}
	}
	cgroup, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return m
	}
	if c, ok := cgroupMemoryLimit(os.DirFS("/"), string(cgroup)); ok && (m.Bytes == 0 || c.Bytes < m.Bytes) {
		return c
	}
	return m
}
