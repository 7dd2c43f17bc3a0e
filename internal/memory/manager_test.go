package memory_test

import (
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
)

// Scenario 34, first sentence.
func TestPersistentAndDedicatedAllocationsLeaveArenaPageSizeAtFloor(t *testing.T) {
	m := newManagerOn(t, hoststorage.NewSim(32, nil), adaptivePreset(0), memory.Config{})
	m.SetMode(memory.Persistent)
	weights := alloc(t, m, 100*mib, memory.Allow)
	defer weights.Release()
	m.SetMode(memory.Auto)
	m.SetMode(memory.Dedicated)
	scratch := alloc(t, m, 200*mib, memory.Allow)
	defer scratch.Release()
	m.SetMode(memory.Auto)

	if p := weights.Location().Pool(); p != memory.PersistentIndex {
		t.Fatalf("persistent allocation on pool %d, want %d", p, memory.PersistentIndex)
	}
	if p := scratch.Location().Pool(); p != memory.DedicatedIndex {
		t.Fatalf("dedicated allocation on pool %d, want %d", p, memory.DedicatedIndex)
	}
	h := alloc(t, m, 1*mib, memory.Allow)
	defer h.Release()
	a := arena(t, m)
	if a.PageSize() != 2*mib || m.Stats().Growths != 0 {
		t.Fatalf("arena page size %d after %d growths, want 2 MiB and none", a.PageSize(), m.Stats().Growths)
	}
	if got := a.Current().Report().LargestAlloc; got != 1*mib {
		t.Fatalf("arena largest allocation = %d, want 1 MiB", got)
	}
}

// Scenario 34, second and third sentences.
func TestDedicatedWindowInsidePersistentWindowRestoresPersistent(t *testing.T) {
	m := newManagerOn(t, hoststorage.NewSim(32, nil), adaptivePreset(0), memory.Config{})
	m.SetMode(memory.Persistent)
	weight := alloc(t, m, 1*mib, memory.Allow)
	defer weight.Release()
	m.SetMode(memory.Dedicated)
	if m.Mode() != memory.Dedicated {
		t.Fatalf("mode = %v, want dedicated", m.Mode())
	}
	scratch := alloc(t, m, 200*mib, memory.Allow)
	m.SetMode(memory.Auto)
	if m.Mode() != memory.Persistent {
		t.Fatalf("mode after closing the dedicated window = %v, want persistent", m.Mode())
	}
	m.SetMode(memory.Auto)
	if m.Mode() != memory.Auto {
		t.Fatalf("mode after closing both windows = %v, want auto", m.Mode())
	}
	if got := usage(m).BytesReserved; got != 201*mib {
		t.Fatalf("reserved = %d, want 201 MiB", got)
	}

	scratch.Release()
	h := alloc(t, m, 1*mib, memory.Allow)
	defer h.Release()
	if got := usage(m).BytesReserved; got != 1*mib+2*mib {
		t.Fatalf("reserved = %d, want 1 MiB (the weight) + 2 MiB (one arena page)", got)
	}
	if got := m.BytesAllocated(); got != 3*mib {
		t.Fatalf("allocated = %d, want 3 MiB", got)
	}
	if d := m.Report().Dedicated; d.Pages != 0 || d.Usage.BytesReserved != 0 {
		t.Fatalf("dedicated report = %+v, want nothing held", d)
	}
}

// Scenario 35.
func TestNestedPersistentWindowsStayPersistentUntilLastAuto(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{}, 0)
	m.SetMode(memory.Persistent)
	m.SetMode(memory.Persistent)
	m.SetMode(memory.Auto)
	if m.Mode() != memory.Persistent {
		t.Fatalf("mode = %v, want persistent", m.Mode())
	}
	h := alloc(t, m, 1*kib, memory.Allow)
	defer h.Release()
	if p := h.Location().Pool(); p != memory.PersistentIndex {
		t.Fatalf("1 KiB on pool %d, want persistent", p)
	}
	if got := dynamicPagesPeak(m); got != 0 {
		t.Fatalf("dynamic PagesPeak = %d, want 0", got)
	}
	m.SetMode(memory.Auto)
	if m.Mode() != memory.Auto {
		t.Fatalf("mode = %v, want auto", m.Mode())
	}
	d := alloc(t, m, 1*kib, memory.Allow)
	defer d.Release()
	if p := d.Location().Pool(); p == memory.PersistentIndex || p == memory.DedicatedIndex {
		t.Fatalf("1 KiB on pool %d, want a dynamic pool", p)
	}
	if got := dynamicPagesPeak(m); got != 1 {
		t.Fatalf("dynamic PagesPeak = %d, want 1", got)
	}
	m.SetMode(memory.Auto) // no window left: a no-op
	if m.Mode() != memory.Auto {
		t.Fatalf("mode = %v after popping an empty stack, want auto", m.Mode())
	}
}

// Scenario 38.
func TestLookupIsIdentityChecked(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	live := alloc(t, m, 1*kib, memory.Allow) // a live slice at (small, page 0, slice 0)
	defer live.Release()
	if loc := live.Location(); loc.Page() != 0 || loc.Slice() != 0 {
		t.Fatalf("first allocation at %v, want page 0 slice 0", loc)
	}

	never := handle.New(handle.Uninit)
	defer never.Release()
	b := never.Binding()
	defer b.Release()
	_, err := m.Find(b)
	wantErrIs(t, err, handle.ErrNotFound)
	_, err = m.Resolve(b)
	wantErrIs(t, err, handle.ErrNotFound)
	_, err = m.FindAt(live.Location(), b)
	wantErrIs(t, err, handle.ErrNotFound)

	reserved, err := m.Reserve(1*kib, memory.Allow, pool.Bind{})
	if err != nil {
		t.Fatal(err)
	}
	assigned := handle.New(handle.Uninit)
	defer assigned.Release()
	if err := m.Bind(reserved, assigned, 42); err != nil {
		t.Fatal(err)
	}
	_, err = m.Find(reserved)
	wantErrIs(t, err, handle.ErrNotFound)
	reserved.Release()
	if _, err := m.Resolve(assigned); err != nil {
		t.Fatalf("assigned handle does not resolve: %v", err)
	}
	if c, err := m.Cursor(assigned); err != nil || c != 42 {
		t.Fatalf("cursor = %d, %v; want 42", c, err)
	}
	r2, err := m.Reserve(1*kib, memory.Allow, pool.Bind{})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Release()
	wantErrIs(t, m.Bind(r2, assigned, 0), memory.ErrAlreadyPlaced)
}

// Held bindings survive a renumbering explicit cleanup (design §6.4).
func TestExplicitCleanupRenumbersSmallPagesUnderHeldBinding(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	var hs []*handle.Handle
	// 64 KiB slices: 32 fill one 2 MiB small page (Host storage backs pages
	// whole); one more opens page 1.
	for i := 0; i < 33; i++ {
		hs = append(hs, alloc(t, m, 64*kib, memory.Allow))
	}
	last := hs[32]
	if last.Location().Page() != 1 {
		t.Fatalf("33rd 64 KiB at %v, want page 1", last.Location())
	}
	fill(t, m, last, 0x5a)
	b := last.Binding()
	defer b.Release()
	releaseAll(hs[:32]...)
	m.Cleanup(pool.Explicit)
	if b.Location().Page() != 0 {
		t.Fatalf("binding at %v after cleanup, want page 0", b.Location())
	}
	wantBytes(t, m, b, 64*kib, 0x5a)
	if got := usage(m).BytesReserved; got != 2*mib {
		t.Fatalf("reserved = %d, want one 2 MiB page", got)
	}
	last.Release()
}

// design §6.2: under SizeMatch an Auto allocation whose effective size
// matches a persistent bucket is served from it; another size is dynamic.
func TestSizeMatchServesAutoAllocationFromMatchingPersistentBucket(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{Persistent: memory.SizeMatch}, 0)
	m.SetMode(memory.Persistent)
	w := alloc(t, m, 40, memory.Allow) // effective 64 B
	m.SetMode(memory.Auto)
	w.Release()

	same := alloc(t, m, 50, memory.Allow) // effective 64 B: the freed persistent slice
	defer same.Release()
	if p := same.Location().Pool(); p != memory.PersistentIndex {
		t.Fatalf("50 B under SizeMatch on pool %d, want persistent", p)
	}
	again := alloc(t, m, 64, memory.Allow) // bucket exists, no free slice: a new persistent slice
	defer again.Release()
	if p := again.Location().Pool(); p != memory.PersistentIndex {
		t.Fatalf("64 B under SizeMatch on pool %d, want persistent", p)
	}
	other := alloc(t, m, 100, memory.Allow) // effective 128 B: no bucket
	defer other.Release()
	if p := other.Location().Pool(); p == memory.PersistentIndex {
		t.Fatalf("100 B without a matching bucket served by the persistent pool")
	}
}

// design §6.1: Disabled ignores Persistent windows; Enforced makes Persistent
// the base mode.
func TestPersistentMemorySettingsChooseTheMode(t *testing.T) {
	m := newHostManager(t, adaptivePreset(0), memory.Config{Persistent: memory.Disabled}, 0)
	m.SetMode(memory.Persistent)
	if m.Mode() != memory.Auto {
		t.Fatalf("Disabled: mode in a Persistent window = %v, want auto", m.Mode())
	}
	h := alloc(t, m, 1*kib, memory.Allow)
	if h.Location().Pool() == memory.PersistentIndex {
		t.Fatalf("Disabled: allocation served by the persistent pool")
	}
	h.Release()

	m = newHostManager(t, adaptivePreset(0), memory.Config{Persistent: memory.Enforced}, 0)
	if m.Mode() != memory.Persistent {
		t.Fatalf("Enforced: base mode = %v, want persistent", m.Mode())
	}
	h = alloc(t, m, 1*kib, memory.Allow)
	if h.Location().Pool() != memory.PersistentIndex {
		t.Fatalf("Enforced: allocation on pool %d, want persistent", h.Location().Pool())
	}
	h.Release()

	base := memory.Dedicated
	m = newHostManager(t, adaptivePreset(0), memory.Config{BaseMode: &base}, 0)
	if m.Mode() != memory.Dedicated {
		t.Fatalf("BaseMode override: mode = %v, want dedicated", m.Mode())
	}
}

// A reservation for a buffer (pool.Bind) binds it whatever serves it: on a
// new page through the clone the page returns (Bind), on held room in the
// search itself. Either way the buffer itself comes back and resolves with
// its cursor, and AllocNr counts one reservation per call.
func TestReserveBindsTheBufferOnANewPageAndOnHeldRoom(t *testing.T) {
	m := newHostManager(t, props128(), memory.Config{}, 0)
	first := handle.New(handle.Uninit)
	defer first.Release()
	if got, err := m.Reserve(1*kib, memory.Allow, pool.Bind{To: first, Cursor: 5}); err != nil || got != first {
		t.Fatalf("new page: got %v, err %v; want the buffer's own handle", got, err)
	}
	second := handle.New(handle.Uninit)
	defer second.Release()
	if got, err := m.Reserve(1*kib, memory.Allow, pool.Bind{To: second, Cursor: 9}); err != nil || got != second {
		t.Fatalf("held room: got %v, err %v; want the buffer's own handle", got, err)
	}
	for h, want := range map[*handle.Handle]uint64{first: 5, second: 9} {
		if c, err := m.Cursor(h); err != nil || c != want {
			t.Fatalf("allocation %d: cursor %d, %v; want %d", h.ID(), c, err, want)
		}
	}
	if first.Location() == second.Location() {
		t.Fatalf("both allocations at %v", first.Location())
	}
	if n := m.Stats().AllocNr; n != 2 {
		t.Fatalf("AllocNr %d after two reservations, want 2", n)
	}
	_, err := m.Reserve(1*kib, memory.Allow, pool.Bind{To: second})
	wantErrIs(t, err, memory.ErrAlreadyPlaced)
}

// Every dynamic route binds a freed slice to the next buffer of its size:
// the tiny pool (0 bytes), the small pool, the arena, and the exclusive
// pages' buckets.
func TestReserveBindsAFreedSliceOnEveryDynamicRoute(t *testing.T) {
	for _, c := range []struct {
		size uint64
		cfg  memory.Config
	}{
		{0, memory.Config{}},
		{1 * kib, memory.Config{}},
		{256 * kib, memory.Config{}},
		{256 * kib, memory.Config{Dynamic: memory.ExclusivePages}},
	} {
		size := c.size
		m := newHostManager(t, props128(), c.cfg, 0)
		first := handle.New(handle.Uninit)
		if got, err := m.Reserve(size, memory.Allow, pool.Bind{To: first}); err != nil || got != first {
			t.Fatalf("%d bytes: first reservation %v, %v; want the buffer bound", size, got, err)
		}
		at := first.Location()
		first.Release()
		again := handle.New(handle.Uninit)
		if got, err := m.Reserve(size, memory.Allow, pool.Bind{To: again, Cursor: 3}); err != nil || got != again {
			t.Fatalf("%d bytes: reservation on the freed slice: %v, %v; want the buffer bound", size, got, err)
		}
		if again.Location() != at {
			t.Fatalf("%d bytes: bound at %v, the freed slice was at %v", size, again.Location(), at)
		}
		if c, err := m.Cursor(again); err != nil || c != 3 {
			t.Fatalf("%d bytes: cursor %d, %v; want 3", size, c, err)
		}
		again.Release()
	}
}
