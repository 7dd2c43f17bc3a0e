package hoststorage

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// Reliability 2026-12 §8: the single-allocation bound on a known machine is
// its memory less the runtime headroom, alignment padding included.
func TestHostLimitIsTheMachinesMemoryLessHeadroom(t *testing.T) {
	const machine = hostHeadroom + 4096
	b := storage.NewBudget(0)
	h := newHostOn(32, b, machine)
	r, err := h.Alloc(4096 - 32)
	if err != nil {
		t.Fatalf("Alloc(4064) on a 4 KiB limit: %v", err)
	}
	_, err = h.Alloc(4096 - 31)
	var oom *storage.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, storage.ErrOutOfMemory) || oom.Limit != 4096-32 || oom.Machine != machine {
		t.Fatalf("Alloc(4065) on a 4 KiB limit: %v (%+v), want OutOfMemoryError{Limit 4064, Machine %d}", err, oom, machine)
	}
	if !strings.Contains(err.Error(), "machine") || !strings.Contains(err.Error(), "WithCapacity") {
		t.Fatalf("%q names neither the machine nor the fix", err)
	}
	if b.Used() != 4096-32 || h.BytesAllocated() != 4096-32 {
		t.Fatalf("the refusal changed accounting: budget %d, bytes %d", b.Used(), h.BytesAllocated())
	}
	h.Dealloc(r.ID)

	if got := hostLimit(hostHeadroom / 2); got != 0 {
		t.Fatalf("hostLimit below the headroom = %d, want 0", got)
	}
	tiny := newHostOn(32, nil, hostHeadroom/2)
	if _, err := tiny.Alloc(1); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Alloc(1) on a machine smaller than the headroom: %v, want ErrOutOfMemory", err)
	}
	if _, err := tiny.Alloc(0); err != nil {
		t.Fatalf("Alloc(0) takes no bytes: %v", err)
	}
}

// On a machine whose memory is unknown only make's bound applies: 2^48
// panics in makeslice on 64-bit systems, so it and everything from 2^47 up
// is refused.
func TestHostOnAnUnknownMachineRefusesWhatMakeCannotGive(t *testing.T) {
	h := newHostOn(32, nil, 0)
	for _, size := range []uint64{1 << 48, 1 << 50, maxMake, maxMake - 31, ^uint64(0)} {
		_, err := h.Alloc(size)
		var oom *storage.OutOfMemoryError
		if !errors.As(err, &oom) || !errors.Is(err, storage.ErrOutOfMemory) || oom.Machine != 0 || oom.Limit != maxMake-32 {
			t.Fatalf("Alloc(%d) on an unknown machine: %v (%+v), want OutOfMemoryError{Limit %d, Machine 0}", size, err, oom, maxMake-32)
		}
		if !strings.Contains(err.Error(), "Go runtime") {
			t.Fatalf("%q does not say make's bound refused", err)
		}
	}
	if h.BytesAllocated() != 0 {
		t.Fatal("a refused allocation changed accounting")
	}
}
