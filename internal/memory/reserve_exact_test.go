package memory_test

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// ReserveExact answers ErrOwnSizeTried, with no storage call, only where
// the arena's latest reservation of that size asked the storage for
// exactly its bytes and was refused (pool PL30); a size whose own-size page
// is the larger smallest page gets its dedicated try.
func TestReserveExactSkipsOnlyTheOwnSizeTheArenaWasRefused(t *testing.T) {
	m := newHostManager(t, adaptivePreset(16*mib), memory.Config{}, 16*mib)
	for _, size := range []uint64{10 * mib, 5 * mib} { // a full 10 MiB page and a full own-size 5 MiB page
		defer alloc(t, m, size, memory.Allow).Release()
	}
	if got := m.BytesAllocated(); got != 15*mib {
		t.Fatalf("setup: %d bytes held, want 15 MiB", got)
	}
	// 3 MiB: the 10 MiB page and the own 3 MiB page are both refused.
	if _, err := m.Reserve(3*mib, memory.Allow, pool.Bind{}); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("3 MiB with 1 MiB left = %v, want ErrOutOfMemory", err)
	}
	if _, err := m.ReserveExact(3 * mib); !errors.Is(err, memory.ErrOwnSizeTried) {
		t.Fatalf("ReserveExact(3 MiB) after the arena asked those bytes = %v, want ErrOwnSizeTried", err)
	}
	// 512 KiB: its own-size page is the 2 MiB smallest page, refused; the
	// dedicated 512 KiB fits the 1 MiB left.
	if _, err := m.Reserve(512*kib, memory.Allow, pool.Bind{}); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("512 KiB with 1 MiB left and 2 MiB the smallest page = %v, want ErrOutOfMemory", err)
	}
	h, err := m.ReserveExact(512 * kib)
	if err != nil {
		t.Fatalf("ReserveExact(512 KiB) with 1 MiB left = %v, want a dedicated allocation", err)
	}
	h.Release()
}

// A reservation that found the arena's page sizes exhausted asked the
// storage nothing: ReserveExact tries its dedicated allocation.
func TestReserveExactAfterExhaustedPageSizesTriesTheStorage(t *testing.T) {
	p := memory.Properties{MaxPageSize: 1 << 50, Alignment: 32}
	m := newManagerOn(t, hoststorage.NewSim(32, nil), p, memory.Config{})
	a := arena(t, m)
	var live []*handle.Handle
	defer func() {
		for _, h := range live {
			h.Release()
		}
	}()
	var err error
	for range pool.ArenaSlots + 1 {
		var h *handle.Handle
		if h, err = tryAlloc(m, a.PageSize()+1, memory.Allow); err != nil {
			break
		}
		live = append(live, h)
	}
	if !errors.Is(err, pool.ErrPageSizesExhausted) {
		t.Fatalf("after %d growths: %v, want ErrPageSizesExhausted", a.Growths(), err)
	}
	h, err := m.ReserveExact(a.PageSize() + 1)
	if err != nil {
		t.Fatalf("ReserveExact after exhausted page sizes = %v, want a dedicated allocation", err)
	}
	h.Release()
}
