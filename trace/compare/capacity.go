package compare

import (
	"context"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/trace"
)

// capacityGranule is the resolution of the capacity search.
const capacityGranule = 1 << 20

type capacityResult struct {
	capacity uint64
	rep      *trace.ReplayReport
}

// minCapacity bisects over whole MiB between the peak live bytes (nothing
// can run below them) and the unlimited replay's peak (which ran) for the
// smallest capacity at which the trace runs without a failed allocation
// (C2). Out-of-memory is assumed monotonic in capacity, as bisection needs;
// the reported capacity itself always ran clean.
func minCapacity(ctx context.Context, name string, events []trace.Event, peakLive, peakUnlimited, maxPage uint64, dev deviceOptions, progress func(string) func(int, int)) (*capacityResult, int, error) {
	lo := storage.RoundUp(peakLive, capacityGranule) / capacityGranule // may fail
	hi := storage.RoundUp(max(peakUnlimited, peakLive), capacityGranule) / capacityGranule
	var best *capacityResult
	probes := 0
	try := func(mib uint64) (bool, error) {
		probes++
		rep, err := replayOnce(ctx, name, events, mib*capacityGranule, maxPage, dev, true, 0, progress("capacity search"))
		if err != nil {
			return false, err
		}
		if rep.FailedAllocs == 0 {
			best = &capacityResult{capacity: mib * capacityGranule, rep: rep}
			return true, nil
		}
		return false, nil
	}
	ok, err := try(hi)
	if err != nil {
		return nil, probes, err
	}
	for !ok {
		// The unlimited peak did not suffice under pressure judgement:
		// widen until a capacity runs.
		lo = hi
		hi = hi * 2
		if ok, err = try(hi); err != nil {
			return nil, probes, err
		}
		if hi > 1<<40 {
			return nil, probes, nil
		}
	}
	if lo == hi {
		return best, probes, nil
	}
	if ok, err := try(lo); err != nil {
		return nil, probes, err
	} else if ok {
		return best, probes, nil
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := try(mid)
		if err != nil {
			return nil, probes, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid
		}
	}
	// best holds the last successful probe, which is hi.
	if best.capacity != hi*capacityGranule {
		if _, err := try(hi); err != nil {
			return nil, probes, err
		}
	}
	return best, probes, nil
}
