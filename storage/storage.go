package storage

import (
	"sync/atomic"
)

// ID identifies one storage allocation. IDs are process-unique, start at 1 and
// are never reused (S1), so a stale Region can never resolve to a newer
// allocation.
type ID uint64

// nextID is the one process-wide counter of this package: IDs must be unique
// across every storage so that a Region handed to the wrong storage fails to
// resolve instead of aliasing another allocation.
var nextID atomic.Uint64

// NewID returns a process-unique allocation ID, for every storage (S1).
func NewID() ID { return ID(nextID.Add(1)) }

// DefaultAlignment is the base alignment an allocation gets when a caller
// passes 0: the host's and the simulation's storages, and a pool built
// without one, use it.
const DefaultAlignment = 32

// Region is a window of one allocation: Offset and Size are in bytes from the
// allocation's base. Alloc returns a region with Offset 0 spanning the whole
// allocation.
type Region struct {
	ID     ID
	Offset uint64
	Size   uint64
}

// End returns Offset+Size (saturating).
func (r Region) End() uint64 { return SatAdd(r.Offset, r.Size) }

// Sub returns the window [off, off+size) of r, relative to r's offset.
func (r Region) Sub(off, size uint64) Region {
	return Region{ID: r.ID, Offset: SatAdd(r.Offset, off), Size: size}
}

// Resource is a resolved Region: Bytes on the Host backend (exactly the
// window), Ptr (the device address of the window) on the cuda backend. Sim
// resolves to neither.
type Resource struct {
	Region
	Bytes []byte
	Ptr   uintptr
}

// Storage is the backend allocator of whole device allocations. One storage
// serves one stream's memory; the storages of a device share one Budget.
//
// Implementations must be safe for concurrent use.
type Storage interface {
	// Alignment is the base alignment of every allocation, in bytes (> 0).
	Alignment() uint64
	// Alloc allocates size bytes and returns the whole allocation (Offset 0).
	// On refusal it returns an error wrapping ErrOutOfMemory and changes
	// nothing (S3).
	Alloc(size uint64) (Region, error)
	// Dealloc gives the allocation back; it may be queued until Flush. An
	// unknown ID is ignored.
	Dealloc(id ID)
	// Flush hands queued deallocations to the device.
	Flush()
	// Resolve returns the bytes or device address of a window of a live
	// allocation, or ErrUnknownRegion.
	Resolve(r Region) (Resource, error)
	// BytesAllocated is the bytes held from the device, queued deallocations
	// included (S2).
	BytesAllocated() uint64
}
