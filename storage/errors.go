package storage

import (
	"errors"
	"fmt"
)

var (
	// ErrOutOfMemory is returned by Alloc when the budget or the device
	// refuses an allocation. Nothing changed; the caller may free or reclaim
	// memory (an explicit cleanup) and retry, or raise the capacity.
	ErrOutOfMemory = errors.New("storage: out of memory")

	// ErrUnknownRegion is returned by Resolve when the region's allocation is
	// not live in this storage (never allocated, or already deallocated), or
	// when the window lies outside it.
	ErrUnknownRegion = errors.New("storage: unknown region")

	// ErrDevicePoisoned marks a sticky device fault (illegal address, hardware
	// exception, ECC error, device lost). Nothing on the device can be trusted
	// afterwards: close it and open a new one.
	ErrDevicePoisoned = errors.New("storage: device poisoned")
)

// IsDevicePoisoned reports whether err is, or wraps, ErrDevicePoisoned.
func IsDevicePoisoned(err error) bool { return errors.Is(err, ErrDevicePoisoned) }

// OutOfMemoryError carries the numbers of a refused allocation; it unwraps to
// ErrOutOfMemory. Reach it with errors.As.
type OutOfMemoryError struct {
	Requested uint64 // bytes asked for
	Allocated uint64 // bytes the budget held when it refused
	Capacity  uint64 // the budget's capacity
	// Limit, when nonzero, says the host refused on its own, whatever the
	// budget: one host allocation may be at most Limit bytes on this
	// machine. Machine is the machine's memory (physical plus swap, or its
	// control group's limit where lower; 0 when unknown, and Limit is then
	// what make can give).
	Limit   uint64
	Machine uint64
}

func (e *OutOfMemoryError) Error() string {
	if e.Limit != 0 && e.Machine != 0 {
		return fmt.Sprintf("storage: out of memory: %d bytes requested in one host allocation, more than this machine can give (it has %d bytes of memory, physical plus swap; one allocation may be at most %d bytes): allocate less, and keep gpumem.WithCapacity and the max page size within the machine's memory",
			e.Requested, e.Machine, e.Limit)
	}
	if e.Limit != 0 {
		return fmt.Sprintf("storage: out of memory: %d bytes requested in one host allocation, more than the Go runtime can make (at most %d bytes): allocate less, or lower the max page size",
			e.Requested, e.Limit)
	}
	if e.Capacity == 0 {
		return fmt.Sprintf("storage: out of memory: the backend refused %d bytes with %d bytes allocated (no capacity is set: the request itself is too large for the machine, or free memory)",
			e.Requested, e.Allocated)
	}
	return fmt.Sprintf("storage: out of memory: %d bytes requested, %d of %d bytes already allocated (raise the capacity or free memory)",
		e.Requested, e.Allocated, e.Capacity)
}

// Unwrap returns ErrOutOfMemory.
func (e *OutOfMemoryError) Unwrap() error { return ErrOutOfMemory }
