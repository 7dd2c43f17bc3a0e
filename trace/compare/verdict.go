package compare

import (
	"context"

	"github.com/gpumem/gpumem/replay"
	"github.com/gpumem/gpumem/trace"
)

// Verdict says whether a policy fits the capacity asked about
// (Options.Capacity less Options.Overhead, the allocator's share).
type Verdict struct {
	Fits     bool   `json:"fits"`
	Capacity uint64 `json:"allocator_capacity_bytes"`
	// PeakReserved is the peak at that capacity; Headroom what was left
	// of the capacity then (fits only).
	PeakReserved uint64 `json:"peak_reserved_bytes"`
	Headroom     uint64 `json:"headroom_bytes"`
	// OutOfMemory is the first failed allocation (does not fit only).
	OutOfMemory *replay.FailureState `json:"out_of_memory,omitempty"`
	// Margin is the capacity less the policy's smallest device
	// (PolicyResult.MinDevice): the room the workload could still grow
	// into, where Headroom is only what was left at this run's peak — a
	// policy that keeps releasing its cache shows headroom it cannot grow
	// into. Negative when the capacity is below the smallest device;
	// absent when the smallest capacity was not searched.
	Margin *int64 `json:"margin_bytes,omitempty"`
	// SlowPath is what fitting this capacity cost (up to the failed
	// allocation when it does not fit).
	SlowPath *SlowPath `json:"slow_path,omitempty"`
}

// setMargin sets Margin for a device of capacity bytes and the policy's
// smallest device.
func (v *Verdict) setMargin(capacity, minDevice uint64) {
	m := int64(capacity) - int64(minDevice)
	v.Margin = &m
}

// verdictAt replays events at capacity, stopping at the first failed
// allocation, and says whether the policy fits.
func verdictAt(ctx context.Context, name string, events []trace.Event, capacity, maxPage uint64, how deviceOptions, progress func(done, total int)) (*Verdict, error) {
	rep, err := replayOnce(ctx, name, events, capacity, maxPage, how, true, 0, progress)
	if err != nil {
		return nil, err
	}
	v := &Verdict{Capacity: capacity, PeakReserved: rep.PeakDevice, SlowPath: slowPathOf(name, rep)}
	if rep.FailedAllocs == 0 {
		v.Fits = true
		v.Headroom = capacity - min(capacity, rep.PeakDevice)
		return v, nil
	}
	v.OutOfMemory = rep.FirstFailureState
	if v.OutOfMemory == nil {
		v.OutOfMemory = &replay.FailureState{Event: rep.FirstFailure}
	}
	return v, nil
}
