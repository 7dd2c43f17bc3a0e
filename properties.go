// The device's memory properties, as a backend reports them and a user
// overrides them (WithProperties).

package gpumem

import (
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/storage"
)

// Properties are what a device tells its memory about itself: the largest
// page the pools make, the base alignment, and the memory a workload may
// count on. A Backend reports them (Backend.Properties), WithProperties
// overrides them, and Device.Properties says which the device uses. They
// are the memory's own figures, apart from the device's capacity
// (WithCapacity): a capacity bounds what the storages may hold, these
// shape how the pools carve it.
type Properties struct {
	// MaxPageSize is the largest page the pools make. A buffer larger than
	// it is a dedicated allocation of its own (design §6.3), so it bounds
	// pooling, not the buffers a device serves; a backend whose driver has
	// a hard bound on one allocation refuses larger ones in its storage.
	MaxPageSize uint64
	// Alignment is the base alignment of every allocation.
	Alignment uint64
	// MaxMemory is the budget the runtime stands behind for a whole
	// workload; 0 = no figure, which turns off the granule unmap under
	// pressure (design §6.4). Relocation never reads it. A device lowers
	// its backend's figure to the capacity (WithCapacity) when that is
	// lower; properties given WithProperties are taken as they are.
	MaxMemory uint64
}

// internal is p as the memory manager takes it: the same fields (the
// conversion fails to compile the day they differ).
func (p Properties) internal() memory.Properties { return memory.Properties(p) }

// hostProperties returns the host and sim backends' default properties for
// a capacity (0 = unknown): alignment 32, MaxMemory = capacity, max page =
// capacity/4 rounded down to the alignment, or 1 GiB without a capacity.
// A buffer larger than the max page is still served, as a dedicated
// allocation, whenever the capacity holds it.
func hostProperties(capacity uint64) Properties {
	const align = storage.DefaultAlignment
	maxPage := uint64(1 << 30)
	if capacity != 0 {
		maxPage = max(align, capacity/4/align*align)
	}
	return Properties{MaxPageSize: maxPage, Alignment: align, MaxMemory: capacity}
}
