package compare

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/trace"
)

// A host replay the machine cannot hold is refused before it starts,
// naming the limit's source and the way out; within the limit it passes.
func TestHostReplayBeyondTheMachineIsRefusedBeforeItStarts(t *testing.T) {
	limit := storage.MachineLimit{Bytes: 20 << 30, From: "cgroup v2 memory.max (/sys/fs/cgroup/memory.max)"}
	for _, c := range []struct {
		peak, capacity uint64
		ok             bool
	}{
		{18 << 30, 0, false}, // the 18 GiB snapshot that was killed at 20.4 GB
		{15 << 30, 0, true},
		{15<<30 + 1, 0, false},
		{1 << 30, 24 << 30, false},
		{1 << 30, 20 << 30, true},
	} {
		err := hostHolds(c.peak, c.capacity, limit)
		if c.ok != (err == nil) {
			t.Errorf("peak %d, capacity %d: %v, want ok=%v", c.peak, c.capacity, err, c.ok)
			continue
		}
		if err != nil && (!errors.Is(err, ErrHostTooSmall) || !strings.Contains(err.Error(), "memory.max") || !strings.Contains(err.Error(), "-backend sim")) {
			t.Errorf("peak %d, capacity %d: %q names neither the limit's source nor -backend sim", c.peak, c.capacity, err)
		}
	}
	if err := hostHolds(1<<62, 0, storage.MachineLimit{}); err != nil {
		t.Fatalf("an unknown limit refused: %v", err)
	}
	// Through Run, on this machine: a trace whose peak passes the real
	// limit is refused before any replay (Sim storage would accept it).
	m := storage.MachineMemory()
	if m == 0 || m > trace.MaxSize {
		t.Skip("this machine's memory is unknown or beyond one allocation's size")
	}
	events := []trace.Event{{Op: trace.OpAlloc, T: 0, ID: 1, Size: m}, {Op: trace.OpFree, T: 1, ID: 1}}
	_, err := Run(context.Background(), Source{Name: "huge", Events: events}, Options{Host: true, SkipCapacity: true})
	if !errors.Is(err, ErrHostTooSmall) {
		t.Fatalf("Run on host of a trace as large as the machine: %v, want ErrHostTooSmall", err)
	}
}
