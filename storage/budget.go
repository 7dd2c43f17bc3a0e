package storage

import (
	"sync/atomic"
)

// Budget is the capacity that every storage of one device shares: a device
// has one amount of memory however many streams allocate from it. A nil
// *Budget, or one with capacity 0, is unlimited.
//
// Budget is safe for concurrent use; Take and Give are lock-free.
type Budget struct {
	capacity uint64
	used     atomic.Uint64
}

// NewBudget returns a budget of capacity bytes; 0 means unlimited.
func NewBudget(capacity uint64) *Budget { return &Budget{capacity: capacity} }

// Capacity returns the budget's capacity in bytes (0 = unlimited).
func (b *Budget) Capacity() uint64 {
	if b == nil {
		return 0
	}
	return b.capacity
}

// Used returns the bytes currently taken from the budget.
func (b *Budget) Used() uint64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Take reserves size bytes, or returns an *OutOfMemoryError (wrapping
// ErrOutOfMemory) and takes nothing.
func (b *Budget) Take(size uint64) error {
	if b == nil {
		return nil
	}
	for {
		used := b.used.Load()
		next := SatAdd(used, size)
		if b.capacity != 0 && next > b.capacity {
			return &OutOfMemoryError{Requested: size, Allocated: used, Capacity: b.capacity}
		}
		if next == ^uint64(0) && size != 0 {
			return &OutOfMemoryError{Requested: size, Allocated: used, Capacity: b.capacity}
		}
		if b.used.CompareAndSwap(used, next) {
			return nil
		}
	}
}

// Give returns size bytes to the budget. Giving more than was taken is an
// internal bug and panics.
func (b *Budget) Give(size uint64) {
	if b == nil {
		return
	}
	for {
		used := b.used.Load()
		if size > used {
			panic("storage: budget given back more than it lent")
		}
		if b.used.CompareAndSwap(used, used-size) {
			return
		}
	}
}
