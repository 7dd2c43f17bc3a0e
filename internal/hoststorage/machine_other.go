//go:build !linux && !darwin

package hoststorage

// readMachineLimit: this system's memory is not read; a Host then bounds
// one allocation only by what make can give.
func readMachineLimit() MachineLimit { return MachineLimit{From: "unknown"} }
