package memory_test

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

const (
	kib = uint64(1) << 10
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

// adaptivePreset is design §12's "adaptive preset": max page 1 GiB, floor
// 2 MiB, alignment 32, with the device figure maxMemory (0: none).
func adaptivePreset(maxMemory uint64) memory.Properties {
	return memory.Properties{MaxPageSize: gib, Alignment: 32, MaxMemory: maxMemory}
}

// props128 is the preset with a 128 MiB max page (scenarios 36–45).
func props128() memory.Properties {
	return memory.Properties{MaxPageSize: 128 * mib, Alignment: 32}
}

// newHostManager builds a manager on Host storage with a budget of
// capacity bytes (0: unlimited).
func newHostManager(t *testing.T, p memory.Properties, c memory.Config, capacity uint64) *memory.Manager {
	t.Helper()
	return newManagerOn(t, hoststorage.NewHost(p.Alignment, storage.NewBudget(capacity)), p, c)
}

func newManagerOn(t *testing.T, st storage.Storage, p memory.Properties, c memory.Config) *memory.Manager {
	t.Helper()
	m, err := memory.New(st, p, c, nil, "s0", nil)
	if err != nil {
		t.Fatalf("memory.New: %v", err)
	}
	return m
}

// alloc emulates the root's reserve-then-bind: a fresh handle, a reserved
// slice bound to it, the reserved clone released. Release the result to
// free the allocation.
func alloc(t *testing.T, m *memory.Manager, size uint64, u memory.PageUpdate) *handle.Handle {
	t.Helper()
	h, err := tryAlloc(m, size, u)
	if err != nil {
		t.Fatalf("reserve %d bytes (%v): %v", size, u, err)
	}
	return h
}

func tryAlloc(m *memory.Manager, size uint64, u memory.PageUpdate) (*handle.Handle, error) {
	reserved, err := m.Reserve(size, u, pool.Bind{})
	if err != nil {
		return nil, err
	}
	h := handle.New(handle.Uninit)
	if err := m.Bind(reserved, h, 0); err != nil {
		reserved.Release()
		h.Release()
		return nil, err
	}
	reserved.Release()
	return h, nil
}

// arena returns the adaptive memory's arena.
func arena(t *testing.T, m *memory.Manager) *pool.Arena {
	t.Helper()
	a, ok := m.Dynamic().(*memory.AdaptiveMemory)
	if !ok {
		t.Fatalf("dynamic memory is %T, want *memory.AdaptiveMemory", m.Dynamic())
	}
	return a.Arena()
}

// wanted is what RelocateWhenWanted would decide for a one-stream device.
func wanted(m *memory.Manager) (relocation.Reason, bool) {
	return m.RelocationNeed().Reason()
}

func wantNoRelocation(t *testing.T, m *memory.Manager) {
	t.Helper()
	if r, ok := wanted(m); ok {
		t.Fatalf("relocation wanted (%v), want none; need %+v, %d bytes allocated", r, m.RelocationNeed(), m.BytesAllocated())
	}
}

func wantRelocation(t *testing.T, m *memory.Manager, want relocation.Reason) {
	t.Helper()
	r, ok := wanted(m)
	if !ok || r != want {
		t.Fatalf("relocation wanted = %v, %v; want %v; need %+v, %d bytes allocated", r, ok, want, m.RelocationNeed(), m.BytesAllocated())
	}
}

func usage(m *memory.Manager) pool.Usage { return m.Report().Usage() }

// dynamicPagesPeak sums PagesPeak over the dynamic memory's pools.
func dynamicPagesPeak(m *memory.Manager) uint64 {
	var n uint64
	for _, r := range m.Report().Dynamic {
		n += r.PagesPeak
	}
	return n
}

func fill(t *testing.T, m *memory.Manager, h handle.Ref, b byte) {
	t.Helper()
	res, err := m.Resolve(h)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	for i := range res.Bytes {
		res.Bytes[i] = b
	}
}

// wantBytes checks that every byte of h's allocation is b and that the
// window has the allocation's size.
func wantBytes(t *testing.T, m *memory.Manager, h handle.Ref, size uint64, b byte) {
	t.Helper()
	res, err := m.Resolve(h)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if uint64(len(res.Bytes)) != size {
		t.Fatalf("resolved %d bytes, want %d", len(res.Bytes), size)
	}
	for i, got := range res.Bytes {
		if got != b {
			t.Fatalf("byte %d = %d, want %d", i, got, b)
		}
	}
}

func region(t *testing.T, m *memory.Manager, h handle.Ref) storage.Region {
	t.Helper()
	s, err := m.Find(h)
	if err != nil {
		t.Fatalf("find: %v", err)
	}
	return s.Region
}

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one wrapping %v", err, target)
	}
}

func samePage(a, b handle.Location) bool {
	return a.Pool() == b.Pool() && a.Page() == b.Page()
}
