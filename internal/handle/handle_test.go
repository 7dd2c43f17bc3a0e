package handle_test

import (
	"sync"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
)

// design §12.2 scenario 4.
func TestLocationUpdateIsVisibleThroughEveryHandleAndBindingClone(t *testing.T) {
	h := handle.New(handle.Uninit)
	hc := h.Clone()
	b := h.Binding()
	bc := b.Clone()
	cb := hc.Binding()
	refs := []handle.Ref{h, hc, b, bc, cb}
	for _, r := range refs {
		if r.Descriptor() != h.Descriptor() {
			t.Fatal("a clone has its own descriptor")
		}
	}
	for _, loc := range []handle.Location{
		handle.MustLocation(3, 10, 20),
		handle.MustLocation(255, handle.MaxPage, 0),
	} {
		hc.Descriptor().SetLocation(loc) // written through any one owner
		for i, r := range refs {
			if got := r.Descriptor().Location(); got != loc {
				t.Fatalf("ref %d sees %v, want %v", i, got, loc)
			}
		}
		if h.Location() != loc || b.Location() != loc || bc.Location() != loc {
			t.Fatal("Location accessor disagrees with the descriptor")
		}
	}
	for _, r := range []interface{ Release() }{h, hc, b, bc, cb} {
		r.Release()
	}
}

// design §12.2 scenario 5: counters.
func TestCountersFollowHandlesAndBindings(t *testing.T) {
	slice := handle.New(handle.MustLocation(0, 0, 0)) // the pool's own handle
	if !slice.IsFree() || !slice.CanMut() || slice.IsBound() {
		t.Fatal("a fresh slice handle is not free, mutable and unbound")
	}
	user := slice.Clone()
	if user.IsFree() || !user.CanMut() {
		t.Fatalf("slice + one user: free %v canMut %v; want false, true", user.IsFree(), user.CanMut())
	}
	second := user.Clone()
	if user.CanMut() {
		t.Fatal("slice + two user handles: CanMut still true")
	}
	second.Release()
	if !user.CanMut() {
		t.Fatal("releasing the second user handle did not restore CanMut")
	}
	b := user.Binding()
	if !user.IsBound() || !user.CanMut() {
		t.Fatalf("with a binding: bound %v canMut %v; want true, true", user.IsBound(), user.CanMut())
	}
	d := user.Descriptor()
	if d.Refs() != 3 || d.Handles() != 2 {
		t.Fatalf("refs %d handles %d, want 3 and 2", d.Refs(), d.Handles())
	}
	user.Release()
	if slice.IsFree() {
		t.Fatal("free while a binding holds the address")
	}
	b.Release()
	if !slice.IsFree() || slice.IsBound() {
		t.Fatal("all user references released but the slice is not free")
	}
	slice.Release()
}

// design §12.2 scenario 5: identity.
func TestAllocationIDsIncreaseAndNeverRepeat(t *testing.T) {
	seen := map[handle.ID]bool{}
	var prev handle.ID
	for range 100 {
		h := handle.New(handle.Uninit)
		id := h.ID()
		if id == 0 || id <= prev || seen[id] {
			t.Fatalf("ID %d after %d", id, prev)
		}
		c := h.Clone()
		if c.ID() != id || c.Descriptor().ID() != id {
			t.Fatal("a clone changed the ID")
		}
		seen[id], prev = true, id
		c.Release()
		h.Release() // a released ID is never handed out again
	}
}

// design §12.2 scenario 5: a second Release of one object panics.
func TestSecondReleasePanics(t *testing.T) {
	mustPanic := func(t *testing.T, name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Fatalf("%s did not panic", name)
			}
		}()
		f()
	}
	t.Run("handle", func(t *testing.T) {
		h := handle.New(handle.Uninit)
		c := h.Clone()
		c.Release()
		if !c.Released() || h.Released() {
			t.Fatal("Released reports the wrong object")
		}
		mustPanic(t, "second Handle.Release", c.Release)
		if d := h.Descriptor(); d.Refs() != 1 || d.Handles() != 1 {
			t.Fatalf("the panicking Release changed counters: refs %d handles %d", d.Refs(), d.Handles())
		}
		h.Release()
	})
	t.Run("binding", func(t *testing.T) {
		h := handle.New(handle.Uninit)
		b := h.Binding()
		b.Release()
		mustPanic(t, "second Binding.Release", b.Release)
		if d := h.Descriptor(); d.Refs() != 1 {
			t.Fatalf("the panicking Release changed refs to %d", d.Refs())
		}
		h.Release()
	})
	t.Run("use after release", func(t *testing.T) {
		h := handle.New(handle.Uninit)
		b := h.Binding()
		b.Release()
		mustPanic(t, "Clone of a released Binding", func() { b.Clone() })
		h.Release()
		mustPanic(t, "Clone of a released Handle", func() { h.Clone() })
		mustPanic(t, "Binding of a released Handle", func() { h.Binding() })
	})
}

// The device lock serialises every call on a descriptor: goroutines that
// take it around their clones and releases leave the counters exact (and
// the race detector sees every access ordered).
func TestClonesAndReleasesSerialisedByALockKeepCountersExact(t *testing.T) {
	h := handle.New(handle.Uninit)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				mu.Lock()
				c := h.Clone()
				b := c.Binding()
				b.Release()
				c.Release()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if d := h.Descriptor(); d.Refs() != 1 || d.Handles() != 1 {
		t.Fatalf("refs %d handles %d after balanced clones, want 1 and 1", d.Refs(), d.Handles())
	}
	h.Release()
}

// CloneInto counts like Clone and fills the caller's Handle: clones made
// into one array cost no allocation each.
func TestCloneIntoCountsLikeCloneWithoutAllocating(t *testing.T) {
	h := handle.New(handle.Uninit)
	clones := make([]handle.Handle, 3)
	if n := testing.AllocsPerRun(10, func() {
		for i := range clones {
			h.CloneInto(&clones[i]).Release()
		}
	}); n != 0 {
		t.Fatalf("CloneInto allocated %v objects", n)
	}
	for i := range clones {
		h.CloneInto(&clones[i])
	}
	if d := h.Descriptor(); d.Refs() != 4 || d.Handles() != 4 || clones[2].Descriptor() != d {
		t.Fatalf("after 3 clones into an array: refs %d handles %d", d.Refs(), d.Handles())
	}
	for i := range clones {
		clones[i].Release()
	}
	if d := h.Descriptor(); d.Refs() != 1 || d.Handles() != 1 {
		t.Fatalf("after releasing them: refs %d handles %d, want 1 and 1", d.Refs(), d.Handles())
	}
	h.Release()
}

// RaiseAt keeps the lowest index named since the signal was lowered and
// raises the parent; Raise names none (0); a lowered signal forgets.
func TestSignalRaiseAtKeepsTheLowestIndex(t *testing.T) {
	var pool, page handle.Signal
	page.Forward(&pool)
	page.RaiseAt(7)
	page.RaiseAt(9)
	if !page.Raised() || !pool.Raised() || page.Lowest() != 7 {
		t.Fatalf("after RaiseAt(7), RaiseAt(9): raised %v, parent %v, lowest %d; want true, true, 7", page.Raised(), pool.Raised(), page.Lowest())
	}
	page.RaiseAt(3)
	if page.Lowest() != 3 {
		t.Fatalf("lowest %d after RaiseAt(3), want 3", page.Lowest())
	}
	page.Lower()
	page.RaiseAt(5)
	if page.Lowest() != 5 {
		t.Fatalf("lowest %d after Lower and RaiseAt(5), want 5", page.Lowest())
	}
	page.Raise()
	if page.Lowest() != 0 {
		t.Fatalf("lowest %d after Raise, want 0", page.Lowest())
	}
	var none *handle.Signal
	none.RaiseAt(1) // nobody listens: nothing happens
}

// A watch is told at the release that leaves the allocation free, before
// the holder's signal is raised, and once only: the holder's signal is the
// descriptor's own again afterwards.
func TestWatchReleaseIsToldWhenTheLastBindingGoes(t *testing.T) {
	var page handle.Signal
	slice := handle.New(handle.MustLocation(0, 0, 4))
	slice.Descriptor().SignalFree(&page)
	user := slice.Clone()
	bind := user.Binding()
	user.Release()  // freed while bound: not free yet
	var told []bool // the page's signal at each call
	slice.Descriptor().WatchRelease(func() { told = append(told, page.Raised()) })
	if len(told) != 0 || page.Raised() {
		t.Fatalf("told %v, page raised %v before the binding went", told, page.Raised())
	}
	bind.Release()
	if len(told) != 1 || told[0] {
		t.Fatalf("told %v at the binding's release, want one call before the page's signal rose", told)
	}
	if !page.Raised() || page.Lowest() != 4 {
		t.Fatalf("page signal raised %v lowest %d, want raised at slice 4", page.Raised(), page.Lowest())
	}
	if slice.Descriptor().FreeSignal() != &page {
		t.Fatal("the holder's signal is not the descriptor's own again")
	}
	page.Lower()
	reuse := slice.Clone() // the free slice carved again: its descriptor reused
	reuse.Release()
	if len(told) != 1 || !page.Raised() {
		t.Fatalf("told %v after the descriptor's reuse, want the one call; page raised %v", told, page.Raised())
	}
}

// A watch survives its descriptor's free signal being replaced (a
// relocation landing a held-free allocation on another page re-points it
// while a binding still holds it): FreeSignal gives the slice's signal,
// never the watch's, and the release tells the watch, then raises the new
// signal only.
func TestWatchReleaseSurvivesANewFreeSignal(t *testing.T) {
	var oldPage, newPage handle.Signal
	slice := handle.New(handle.MustLocation(0, 0, 2))
	slice.Descriptor().SignalFree(&oldPage)
	user := slice.Clone()
	bind := user.Binding()
	user.Release()
	told := 0
	slice.Descriptor().WatchRelease(func() { told++ })
	if slice.Descriptor().FreeSignal() != &oldPage {
		t.Fatal("FreeSignal returned the watch, not the page's signal")
	}
	slice.Descriptor().SignalFree(&newPage) // the relocation's commit
	if slice.Descriptor().FreeSignal() != &newPage {
		t.Fatal("FreeSignal is not the new page's signal")
	}
	bind.Release()
	if told != 1 {
		t.Fatalf("watch told %d times at the last binding's release, want 1", told)
	}
	if !newPage.Raised() || oldPage.Raised() {
		t.Fatalf("new page raised %v, old page raised %v: want only the new one", newPage.Raised(), oldPage.Raised())
	}
}

// OnRaise is told each time the signal goes up from lowered, by Raise,
// RaiseAt or a release, and not while it stays raised: a pool lists the
// pages that rose from it instead of looking at every page.
func TestSignalOnRaiseIsToldOncePerRise(t *testing.T) {
	var pool, page handle.Signal
	page.Forward(&pool)
	rises := 0
	page.OnRaise(func() { rises++ })
	slice := handle.New(handle.MustLocation(0, 0, 2))
	slice.Descriptor().SignalFree(&page)
	user := slice.Clone()
	user.Release() // the slice is free: the page rises
	page.RaiseAt(5)
	page.Raise()
	if rises != 1 || !pool.Raised() {
		t.Fatalf("told %d times, parent raised %v; want once, true", rises, pool.Raised())
	}
	page.Lower()
	page.Raise()
	page.Lower()
	page.RaiseAt(1)
	if rises != 3 {
		t.Fatalf("told %d times after two more rises, want 3", rises)
	}
	pool.Lower()
	pool.Raise() // the parent's rise says nothing to the child's listener
	if rises != 3 {
		t.Fatalf("told %d times after the parent rose alone, want 3", rises)
	}
}
