package handle

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// ID is an allocation's identity: from 1, never reused (H3).
type ID uint64

// nextID is the process-wide allocation counter: IDs must stay unique across
// devices so that a buffer handed to the wrong device never matches.
var nextID atomic.Uint64

// Descriptor is what every owner of one allocation shares: its ID, its
// current location and two explicit counters (H1). Rewriting the location
// re-points every Handle and Binding at once (H4).
//
// Every field is plain: the caller's lock (the device lock) serialises every
// call on a descriptor and on its handles and bindings, so a locked
// instruction per counter update would buy nothing (the reserve-and-free
// pair made some forty of them).
type Descriptor struct {
	id      ID
	loc     Location
	refs    int32 // live Handle and Binding objects
	handles int32 // live Handle objects
	// keys counts the structures that key on the descriptor without
	// referring to the allocation (Key); kept: one keeps it for good
	// (Keep). Neither counts in refs, so neither keeps the slice from
	// reuse; both keep the cell from a Recycler (H6).
	keys int32
	kept bool
	// signal, when set, is raised each time a release leaves the allocation
	// free (refs ≤ 1): the page holding it learns that it may have room
	// again without scanning. The holder of the allocation sets it.
	signal *Signal
	// home is the Recycler whose cell holds the descriptor, nil when New
	// made it: the cell goes back there once nothing refers to or keys on
	// the descriptor (H6).
	home *Recycler
}

// Every descriptor is the first field of a cell (New, Recycler), followed
// by its first handle and a spare one that the first Clone hands out: the
// spare is found at a fixed offset instead of through a pointer, which
// keeps a cell in the 80-byte size class. The spare is unused while its d
// is nil.
const spareOffset = unsafe.Offsetof(cell{}.spare)

// spare returns the spare handle of d's cell.
func (d *Descriptor) spare() *Handle {
	return (*Handle)(unsafe.Add(unsafe.Pointer(d), spareOffset))
}

// Signal is a flag raised when an allocation becomes free, forwarding to an
// optional parent (a page's signal forwards to its pool's), so whoever keeps
// many allocations learns cheaply that one of them may be reusable. The
// zero value is lowered and has no parent.
type Signal struct {
	raised bool
	// low is, while raised, an index no release below which raised the
	// signal: the lowest slice index passed to RaiseAt since the signal
	// was last lowered, 0 after a Raise. A page rescans from there.
	low    uint32
	parent *Signal
	// watch, set only on a signal WatchRelease put in front of a
	// descriptor's own, is called when a release leaves that descriptor
	// free; the descriptor's signal is then parent again.
	watch func()
	// onRaise, when set (OnRaise), is called each time the signal goes up
	// from lowered.
	onRaise func()
}

// Forward sets the parent; call it before the signal is shared.
func (s *Signal) Forward(parent *Signal) { s.parent = parent }

// OnRaise makes fn be called, under the caller's lock, each time the signal
// goes up from lowered (not while it stays raised): whoever keeps many
// signals lists the raised ones as they rise instead of looking at every
// one. fn must not raise or lower the signal.
func (s *Signal) OnRaise(fn func()) { s.onRaise = fn }

// Raise raises the signal and its ancestors, saying nothing of where.
func (s *Signal) Raise() {
	for ; s != nil; s = s.parent {
		up := !s.raised
		s.raised = true
		s.low = 0
		if up && s.onRaise != nil {
			s.onRaise()
		}
	}
}

// RaiseAt raises the signal for the slice at index i (and raises its
// ancestors): Lowest then stays at or below i until the signal is lowered.
func (s *Signal) RaiseAt(i uint32) {
	if s == nil {
		return
	}
	if !s.raised {
		s.raised, s.low = true, i
		if s.onRaise != nil {
			s.onRaise()
		}
	} else if i < s.low {
		s.low = i
	}
	s.parent.Raise()
}

// Lowest returns, while the signal is raised, an index below which no
// RaiseAt came since it was last lowered (0 after a Raise).
func (s *Signal) Lowest() uint32 { return s.low }

// Raised reports whether the signal was raised since it was last lowered.
func (s *Signal) Raised() bool { return s.raised }

// Lower lowers this signal (not its parent).
func (s *Signal) Lower() { s.raised = false }

// SignalFree makes every later release that leaves the allocation free
// raise f (nil: nobody listens). Pools use it to skip pages on which
// nothing became free since they last looked. Watches (WatchRelease) stay
// in front of f: a relocation that lands a held-free allocation on
// another page re-points its signal while a binding taken during the copy
// still holds it, and its release must still be told.
func (d *Descriptor) SignalFree(f *Signal) {
	s := d.signal
	if s == nil || s.watch == nil {
		d.signal = f
		return
	}
	for s.parent != nil && s.parent.watch != nil {
		s = s.parent
	}
	s.parent = f
}

// FreeSignal returns the flag set by SignalFree, or nil; never a watch's
// (WatchRelease), which belongs to the allocation, not to its slice.
func (d *Descriptor) FreeSignal() *Signal {
	s := d.signal
	for s != nil && s.watch != nil {
		s = s.parent
	}
	return s
}

// WatchRelease calls fn, under the caller's lock, at the release that
// next leaves the allocation free (refs ≤ 1), before its free signal is
// raised; the descriptor's free signal is the holder's own again from
// then on. A device's history watches a buffer freed while something still
// binds it, to record its memory's release at the moment it goes back to
// its page: noticed any later, the slice may have been carved again (a
// reservation's or a relocation target's clone reuses the free slice's
// descriptor), and the history would see it taken, not free. Call it only
// on a descriptor that is not free. A later SignalFree keeps the watch in
// front of the new signal, and FreeSignal skips it. Watches stack: each
// is called once, newest first.
func (d *Descriptor) WatchRelease(fn func()) {
	d.signal = &Signal{parent: d.signal, watch: fn}
}

// released is called after a reference went: it raises the free signal
// when only the slice's own reference is left, after telling the watchers
// (WatchRelease).
func (d *Descriptor) released(refs int32) {
	if refs <= 1 {
		for s := d.signal; s != nil && s.watch != nil; s = d.signal {
			d.signal = s.parent
			s.watch()
		}
		d.signal.RaiseAt(d.loc.Slice()) // a slice's descriptor carries its index (PL3)
	}
	if refs == 0 {
		d.recycle()
	}
}

// recycle returns d's cell to its Recycler once nothing refers to (refs)
// or keys on (keys, kept) the descriptor (H6).
func (d *Descriptor) recycle() {
	if d.home != nil && d.refs == 0 && d.keys == 0 && !d.kept {
		d.home.put((*cell)(unsafe.Pointer(d))) // d heads a Recycler cell
	}
}

// Key records that a structure keys on the descriptor (a map of pending
// writers, a cross-stream note) without referring to the allocation: the
// slice may be reused, but the cell is not handed to another allocation
// until Unkey, so the structure never finds a later allocation under its
// key. Call it only while something refers to the allocation.
func (d *Descriptor) Key() { d.keys++ }

// Unkey drops a key Key took. The last one returns the cell to its
// Recycler when nothing refers to the allocation any more.
func (d *Descriptor) Unkey() {
	d.keys--
	if d.keys < 0 {
		panic(fmt.Sprintf("handle: allocation %d unkeyed more often than keyed", d.id))
	}
	d.recycle()
}

// Keep keeps the cell from its Recycler for good: for structures that may
// key on the descriptor for as long as they live (a capture window and the
// graph it seals), whose ends are not worth counting.
func (d *Descriptor) Keep() { d.kept = true }

// ID returns the allocation ID.
func (d *Descriptor) ID() ID { return d.id }

// RecycledBy reports whether Recycler r made the descriptor (nil: never).
func (d *Descriptor) RecycledBy(r *Recycler) bool { return r != nil && d.home == r }

// Location returns the current location.
func (d *Descriptor) Location() Location { return d.loc }

// SetLocation rewrites the location for every owner.
func (d *Descriptor) SetLocation(l Location) { d.loc = l }

// Refs returns the live Handle and Binding objects.
func (d *Descriptor) Refs() int { return int(d.refs) }

// Handles returns the live Handle objects.
func (d *Descriptor) Handles() int { return int(d.handles) }

// IsFree reports refs ≤ 1: only the pool's slice refers to the allocation.
func (d *Descriptor) IsFree() bool { return d.refs <= 1 }

// CanMut reports handles ≤ 2: the slice's handle plus exactly one user
// handle. Bindings do not count, so guards and pending work never block an
// in-place update.
func (d *Descriptor) CanMut() bool { return d.handles <= 2 }

// IsBound reports refs > handles: something holds the address.
func (d *Descriptor) IsBound() bool { return d.refs > d.handles }

// Ref is anything that refers to an allocation: *Handle or *Binding.
type Ref interface {
	Descriptor() *Descriptor
}

// Handle is an owning reference to an allocation. Release it exactly once.
type Handle struct {
	d        *Descriptor
	released bool
}

// New returns a fresh descriptor at loc with one Handle (refs = 1,
// handles = 1).
func New(loc Location) *Handle {
	c := &cell{}
	c.d.id = ID(nextID.Add(1))
	c.d.loc = loc
	c.d.refs = 1
	c.d.handles = 1
	c.h.d = &c.d
	return &c.h
}

// cell is what New allocates at once: the descriptor, its first handle
// and a spare handle for the first Clone. An allocation's handle is
// cloned once at least (the pool's reservation, or the slice's copy of a
// buffer's handle), so one allocation serves what would otherwise be two.
// Interior pointers keep the whole cell alive while any part is
// referenced.
type cell struct {
	d     Descriptor
	h     Handle
	spare Handle
}

// Descriptor returns the shared descriptor.
func (h *Handle) Descriptor() *Descriptor { return h.d }

// ID returns the allocation ID.
func (h *Handle) ID() ID { return h.d.id }

// Location returns the current location.
func (h *Handle) Location() Location { return h.d.Location() }

// Clone returns a new Handle on the same descriptor (refs+1, handles+1).
func (h *Handle) Clone() *Handle {
	h.check("Clone")
	h.d.refs++
	h.d.handles++
	if s := h.d.spare(); s.d == nil {
		s.d = h.d // the spare beside the descriptor, used once
		return s
	}
	return &Handle{d: h.d}
}

// CloneInto is Clone into a Handle the caller provides (an element of an
// array of clones made at once, as a relocation plan makes one per live
// allocation of a page), so that many clones cost one allocation. dst must
// not be in use: a zero Handle, or one whose Release has been called and
// that nothing refers to any longer.
func (h *Handle) CloneInto(dst *Handle) *Handle {
	h.check("Clone")
	h.d.refs++
	h.d.handles++
	*dst = Handle{d: h.d}
	return dst
}

// Binding returns a new Binding on the same descriptor (refs+1).
func (h *Handle) Binding() *Binding {
	h.check("Binding")
	h.d.refs++
	return &Binding{d: h.d}
}

// Release drops this Handle. A second Release of the same object panics: it
// is an internal bug that would corrupt the counters.
func (h *Handle) Release() {
	if h.released {
		panic(fmt.Sprintf("handle: Handle of allocation %d released twice", h.d.id))
	}
	h.released = true
	h.d.handles--
	h.d.refs--
	n := h.d.refs
	if n < 0 {
		panic(fmt.Sprintf("handle: allocation %d reference count below zero", h.d.id))
	}
	h.d.released(n)
}

// Released reports whether Release was called on this object.
func (h *Handle) Released() bool { return h.released }

// IsFree reports whether only the pool's slice refers to the allocation.
func (h *Handle) IsFree() bool { return h.d.IsFree() }

// CanMut reports whether the allocation may be updated in place.
func (h *Handle) CanMut() bool { return h.d.CanMut() }

// IsBound reports whether something holds the allocation's address.
func (h *Handle) IsBound() bool { return h.d.IsBound() }

func (h *Handle) check(op string) {
	if h.released {
		panic(fmt.Sprintf("handle: %s on a released Handle of allocation %d", op, h.d.id))
	}
}

// Binding refers to an allocation's address (a host mapping, a guard, a
// pending cross-stream use). It is not an owner: it keeps the slice from
// reuse but does not count against CanMut.
type Binding struct {
	d        *Descriptor
	released bool
}

// Descriptor returns the shared descriptor.
func (b *Binding) Descriptor() *Descriptor { return b.d }

// Location returns the current location.
func (b *Binding) Location() Location { return b.d.Location() }

// Clone returns a new Binding (refs+1).
func (b *Binding) Clone() *Binding {
	if b.released {
		panic(fmt.Sprintf("handle: Clone on a released Binding of allocation %d", b.d.id))
	}
	b.d.refs++
	return &Binding{d: b.d}
}

// Released reports whether Release was called on this object.
func (b *Binding) Released() bool { return b.released }

// Release drops this Binding; a second Release of one object panics.
func (b *Binding) Release() {
	if b.released {
		panic(fmt.Sprintf("handle: Binding of allocation %d released twice", b.d.id))
	}
	b.released = true
	b.d.refs--
	n := b.d.refs
	if n < 0 {
		panic(fmt.Sprintf("handle: allocation %d reference count below zero", b.d.id))
	}
	b.d.released(n)
}
