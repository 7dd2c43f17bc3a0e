package compare

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// HostShare is the share of the host's memory a host replay's peak live
// bytes may take: the policies reserve more than live (up to a fifth more
// on the shared snapshots at unlimited capacity), and the process holds
// the trace and the models beside the device's bytes, so a peak near the
// limit is killed by the kernel (an 18 GiB snapshot was, at 20.4 GB RSS)
// rather than refused.
const HostShare = 0.75

// hostHolds refuses a host replay whose peak live passes HostShare of the
// host's memory limit, or whose -capacity is above that limit (host storage
// would then allocate past it). An unknown limit (0) refuses nothing.
func hostHolds(peakLive, capacity uint64, limit storage.MachineLimit) error {
	if limit.Bytes == 0 {
		return nil
	}
	if capacity > limit.Bytes {
		return fmt.Errorf("%w: capacity %s is above the host's %s (%s): give a smaller -capacity, or -backend sim (accounting only, any size)",
			ErrHostTooSmall, pool.Bytes(capacity), pool.Bytes(limit.Bytes), limit.From)
	}
	if float64(peakLive) > HostShare*float64(limit.Bytes) {
		return fmt.Errorf("%w: the trace's peak live %s is above %.0f%% of the host's %s (%s), and a host replay holds every byte: use -backend sim (accounting only, any size)",
			ErrHostTooSmall, pool.Bytes(peakLive), HostShare*100, pool.Bytes(limit.Bytes), limit.From)
	}
	return nil
}
