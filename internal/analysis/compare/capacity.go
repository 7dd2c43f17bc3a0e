package compare

import (
	"context"

	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/storage"
)

// capacityGranule is the resolution of the capacity search.
const capacityGranule = 1 << 20

// refineProbes bounds the downward scan after the bisection.
const refineProbes = 64

type capacityResult struct {
	capacity uint64
	rep      *replay.Report
}

// minCapacity searches whole MiB for the smallest capacity at which the
// trace runs without a failed allocation (C2), between floor — the peak
// live bytes rounded up to a MiB, at least 1 MiB (below the peak live
// bytes nothing runs) — and the unlimited replay's peak (which ran; the
// search widens by doubling if it fails under the capacity bound).
//
// Out-of-memory is not always monotonic in capacity (a policy may place
// differently with less room and fare better), so bisection alone may stop
// above a smaller clean capacity. The search is:
//
//  1. Bisection between floor and the clean upper bound: hi ran clean,
//     hi − 1 MiB failed.
//  2. Refinement: a scan upward from floor over at most refineProbes
//     evenly spaced capacities below the bisection's failing bound (every
//     MiB when the range is that small). At the first that runs clean, a
//     second bisection between it and the scan point below it (which
//     failed).
//
// The result is the smallest capacity found: it ran clean and 1 MiB less
// failed (or is floor, below which nothing runs). It is not proven the
// global minimum: an island of clean capacities between two scan points
// can be missed. Probes stay bounded: the widening (≤ 40), two bisections
// over at most 2^40 MiB, and the scan (≤ refineProbes); on real traces
// about 20–90 replays, most failing fast.
func minCapacity(ctx context.Context, name string, events []trace.Event, peakLive, peakUnlimited, maxPage uint64, dev deviceOptions, progress func(string) func(int, int)) (*capacityResult, int, error) {
	floor := max(1, storage.RoundUp(peakLive, capacityGranule)/capacityGranule)
	hi := max(storage.RoundUp(max(peakUnlimited, peakLive), capacityGranule)/capacityGranule, floor)
	var best *capacityResult
	probes := 0
	probed := map[uint64]bool{}
	try := func(mib uint64) (bool, error) {
		probes++
		probed[mib] = true
		rep, err := replayOnce(ctx, name, events, mib*capacityGranule, maxPage, dev, probeReplay, 0, progress("capacity search"))
		if err != nil {
			return false, err
		}
		if rep.FailedAllocs != 0 {
			return false, nil
		}
		if best == nil || mib*capacityGranule < best.capacity {
			best = &capacityResult{capacity: mib * capacityGranule, rep: rep}
		}
		return true, nil
	}
	// bisect narrows (lo failed, hi clean) to hi − lo = 1 and returns hi.
	bisect := func(lo, hi uint64) (uint64, error) {
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			ok, err := try(mid)
			if err != nil {
				return 0, err
			}
			if ok {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi, nil
	}

	ok, err := try(hi)
	if err != nil {
		return nil, probes, err
	}
	lo := floor - 1 // fails: below the peak live bytes (0 MiB is never probed)
	for !ok {
		// The unlimited peak did not suffice under the capacity bound:
		// widen until a capacity runs.
		if hi >= 1<<40 {
			return nil, probes, nil
		}
		lo, hi = hi, hi*2
		if ok, err = try(hi); err != nil {
			return nil, probes, err
		}
	}
	if hi == floor {
		return best, probes, nil
	}
	if lo < floor {
		// Try floor first: a trace often runs at its peak live bytes.
		if ok, err := try(floor); err != nil {
			return nil, probes, err
		} else if ok {
			return best, probes, nil
		}
		lo = floor
	}
	if hi, err = bisect(lo, hi); err != nil {
		return nil, probes, err
	}

	// Refinement below the bisection's failing bound hi − 1.
	if top := hi - 1; top > floor {
		step := max(1, (top-floor+refineProbes-1)/refineProbes)
		prev := floor - 1 // the last scan point, which failed
		for p := floor; p < top; p += step {
			if probed[p] {
				// Known: clean probes are ≥ hi, so a probed point failed.
				prev = p
				continue
			}
			ok, err := try(p)
			if err != nil {
				return nil, probes, err
			}
			if ok {
				if _, err := bisect(max(prev, floor-1), p); err != nil {
					return nil, probes, err
				}
				break
			}
			prev = p
		}
	}
	return best, probes, nil
}
