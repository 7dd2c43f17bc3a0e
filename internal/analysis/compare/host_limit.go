package compare

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/storage"
)

// HostShare is the share of the host's memory a host replay may plan to
// use (hostNeed). The rest is for what the plan does not see: the
// kernel's page cache and the runtime's own overshoot of a soft limit. A
// replay past the machine is killed by the kernel (an 18 GiB snapshot
// was, at 20.4 GB RSS) rather than refused, so the plan errs low.
const HostShare = 0.75

// hostSlack is what a host replay holds beyond its devices' bytes and the
// heap it started with: the replay's own bookkeeping (reports, timelines,
// a device's tables), a sixteenth of the bytes plus a fixed amount.
func hostSlack(reserved uint64) uint64 { return reserved/16 + 64<<20 }

// hostPlan is what a host replay will hold at most, and why.
type hostPlan struct {
	// reserved is the largest peak reserved of any gpumem policy's
	// replay at unlimited capacity (on Sim, which reserves exactly what
	// host storage does): no step of Run holds more device bytes at
	// once, since the replays run one after another and a capped replay
	// reserves no more than the cap.
	reserved uint64
	policy   string // the policy that reserves it
	// heap is the Go heap in use before the replays (the trace, the
	// models' inputs).
	heap uint64
}

// need is the memory the replay may use: what it starts with, its
// devices' bytes, and hostSlack.
func (p hostPlan) need() uint64 {
	return storage.SatAdd(storage.SatAdd(p.heap, p.reserved), hostSlack(p.reserved))
}

// planHost measures what a host replay of events will hold: each gpumem
// policy among names replayed once on Sim at unlimited capacity. The
// peak live bytes alone undercount it: a policy reserves more than is
// live (up to 1.4× on the embedded trace), and that is what host storage
// allocates.
func planHost(ctx context.Context, names []string, events []trace.Event, maxPage uint64, how deviceOptions, progress func(policy, step string, done, total int)) (hostPlan, error) {
	sim := how
	sim.host = false
	var p hostPlan
	for _, name := range names {
		if isTorch(name) {
			continue // the PyTorch model keeps accounts only
		}
		var told func(done, total int)
		if progress != nil {
			told = func(done, total int) { progress(name, "host plan", done, total) }
		}
		rep, err := replayOnce(ctx, name, events, 0, maxPage, sim, fullReplay, 0, told)
		if err != nil {
			return hostPlan{}, err
		}
		if rep.PeakDevice > p.reserved {
			p.reserved, p.policy = rep.PeakDevice, name
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.heap = ms.HeapAlloc
	return p, nil
}

// hostHolds refuses a host replay whose plan passes HostShare of the
// host's memory limit, or whose -capacity is above that limit (host
// storage would then allocate past it). An unknown limit (0) refuses
// nothing.
func hostHolds(p hostPlan, capacity uint64, limit hoststorage.MachineLimit) error {
	if limit.Bytes == 0 {
		return nil
	}
	if capacity > limit.Bytes {
		return fmt.Errorf("%w: capacity %s is above the host's %s (%s): give a smaller -capacity, or -backend sim (accounting only, any size)",
			ErrHostTooSmall, units.Bytes(capacity), units.Bytes(limit.Bytes), limit.From)
	}
	if need := p.need(); float64(need) > HostShare*float64(limit.Bytes) {
		return fmt.Errorf("%w: a host replay holds every byte a policy reserves, and %s reserves %s at its peak (%s with the replay's own memory), above %.0f%% of the host's %s (%s): use -backend sim (accounting only, any size), or fewer -policies",
			ErrHostTooSmall, p.policy, units.Bytes(p.reserved), units.Bytes(need), HostShare*100, units.Bytes(limit.Bytes), limit.From)
	}
	return nil
}

// boundHeap lowers the process's soft memory limit (runtime/debug) to
// the plan's need for the duration of a host replay and returns the
// function that puts the previous limit back. Host storage is Go heap:
// a page a replay gives back is garbage until the collector runs, and
// with the default GOGC the heap grows to twice what is live before it
// does, so a replay of one policy took 2.2× its peak reserved in RSS.
// Under the limit the collector runs before the heap passes what the
// replay holds. A limit already lower (GOMEMLIMIT) is kept; a limit
// someone else set meanwhile is not overwritten.
func boundHeap(p hostPlan) (restore func()) {
	want := int64(min(p.need(), uint64(1<<62)))
	prev := debug.SetMemoryLimit(-1)
	if want >= prev {
		return func() {}
	}
	debug.SetMemoryLimit(want)
	return func() {
		if debug.SetMemoryLimit(-1) == want {
			debug.SetMemoryLimit(prev)
		}
	}
}
