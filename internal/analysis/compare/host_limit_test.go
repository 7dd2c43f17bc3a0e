package compare

import (
	"context"
	"errors"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/hoststorage"
)

// A host replay the machine cannot hold is refused before it starts,
// naming the limit's source, the policy and the way out; within the limit
// it passes. The plan counts what the policies reserve, not what is live.
func TestHostReplayBeyondTheMachineIsRefusedBeforeItStarts(t *testing.T) {
	limit := hoststorage.MachineLimit{Bytes: 20 << 30, From: "cgroup v2 memory.max (/sys/fs/cgroup/memory.max)"}
	for _, c := range []struct {
		reserved, heap, capacity uint64
		ok                       bool
	}{
		{18 << 30, 0, 0, false}, // the 18 GiB snapshot that was killed at 20.4 GB
		{13 << 30, 512 << 20, 0, true},
		{14<<30 + 512<<20, 0, 0, false}, // reserved and its slack pass 15 GiB
		{13 << 30, 2 << 30, 0, false},
		{1 << 30, 0, 24 << 30, false},
		{1 << 30, 0, 20 << 30, true},
	} {
		err := hostHolds(hostPlan{reserved: c.reserved, heap: c.heap, policy: "adaptive-pages"}, c.capacity, limit)
		if c.ok != (err == nil) {
			t.Errorf("reserved %d, heap %d, capacity %d: %v, want ok=%v", c.reserved, c.heap, c.capacity, err, c.ok)
			continue
		}
		if err != nil && (!errors.Is(err, ErrHostTooSmall) || !strings.Contains(err.Error(), "memory.max") || !strings.Contains(err.Error(), "-backend sim")) {
			t.Errorf("reserved %d, capacity %d: %q names neither the limit's source nor -backend sim", c.reserved, c.capacity, err)
		}
		if err != nil && c.capacity == 0 && !strings.Contains(err.Error(), "adaptive-pages") {
			t.Errorf("reserved %d: %q does not name the policy that reserves it", c.reserved, err)
		}
	}
	if err := hostHolds(hostPlan{reserved: 1 << 62}, 0, hoststorage.MachineLimit{}); err != nil {
		t.Fatalf("an unknown limit refused: %v", err)
	}
	// Through Run, on this machine: a trace whose peak passes the real
	// limit is refused before any replay (Sim storage would accept it).
	m := hoststorage.MachineMemory()
	if m == 0 || m > trace.MaxSize {
		t.Skip("this machine's memory is unknown or beyond one allocation's size")
	}
	events := []trace.Event{{Op: trace.OpAlloc, T: 0, ID: 1, Size: m}, {Op: trace.OpFree, T: 1, ID: 1}}
	_, err := Run(context.Background(), Source{Name: "huge", Events: events}, Options{Host: true, SkipCapacity: true})
	if !errors.Is(err, ErrHostTooSmall) {
		t.Fatalf("Run on host of a trace as large as the machine: %v, want ErrHostTooSmall", err)
	}
}

// The plan of a host replay is what the policies reserve on Sim, which is
// more than the peak live bytes (the old guard's figure) and the same as
// the host replay's own peak reserved; while Run replays on the host the
// process's soft memory limit is the plan's need, and afterwards it is
// what it was.
func TestHostReplayIsPlannedByWhatItReservesAndBoundsTheHeap(t *testing.T) {
	if hoststorage.MachineMemory() != 0 && hoststorage.MachineMemory() < 2<<30 {
		t.Skip("this machine has under 2 GiB")
	}
	// Small allocations in a page each freed in turn around a long-lived
	// one: the pages stay, so reserved passes live.
	var events []trace.Event
	tm := int64(0)
	add := func(op trace.Op, id, size uint64) {
		events = append(events, trace.Event{Op: op, T: tm, ID: id, Size: size})
		tm++
	}
	id := uint64(1)
	for range 8 {
		add(trace.OpAlloc, id, 3<<20)
		add(trace.OpAlloc, id+1, 1<<20)
		add(trace.OpFree, id, 0)
		id += 2
	}
	ctx := context.Background()
	names := []string{AdaptivePages, Exclusive, Torch}
	plan, err := planHost(ctx, names, events, maxPageFor(events), Options{}.device(), nil)
	if err != nil {
		t.Fatal(err)
	}
	live, err := peakLive(events)
	if err != nil {
		t.Fatal(err)
	}
	if plan.reserved <= live {
		t.Fatalf("plan reserves %d, not above the peak live %d", plan.reserved, live)
	}
	before := debug.SetMemoryLimit(-1)
	var during []int64
	c, err := Run(ctx, Source{Name: "pinned", Events: events}, Options{Host: true, Policies: names, SkipCapacity: true,
		Progress: func(_, step string, _, _ int) {
			if step != "host plan" {
				during = append(during, debug.SetMemoryLimit(-1))
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	var most uint64
	for _, p := range c.Policies {
		if !isTorch(p.Name) {
			most = max(most, p.PeakReserved)
		}
	}
	if most != plan.reserved {
		t.Errorf("host replays reserve at most %d, the Sim plan said %d", most, plan.reserved)
	}
	if len(during) == 0 {
		t.Fatal("no progress reported")
	}
	for _, l := range during {
		if l >= before || uint64(l) < plan.reserved {
			t.Fatalf("memory limit during the host replay %d, want below the previous %d and at least the plan's %d", l, before, plan.reserved)
		}
	}
	if after := debug.SetMemoryLimit(-1); after != before {
		t.Fatalf("memory limit after Run %d, want it restored to %d", after, before)
	}
}
