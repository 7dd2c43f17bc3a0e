//go:build !linux && !darwin

package storage

// readMachineMemory: this system's memory is not read; a Host then bounds
// one allocation only by what make can give.
func readMachineMemory() uint64 { return 0 }
