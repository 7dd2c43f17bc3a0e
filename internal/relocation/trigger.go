// When to relocate (design §8): reasons, the need an arena reports, and the
// trigger that stalls a relocation which moved nothing. The protocol a reason
// starts is described in doc.go.
//
// Relocation never runs ahead of need. A relocation changes where later
// allocations land, and placement is path-dependent: moving allocations into
// the room current pages hold uses up room later allocations would have
// had, so a relocation made "in time", while the device still had room,
// could make a later allocation fail that the same trace without it placed
// (docs/decisions/2026-12-01-relocate-only-on-failure.md). So memory pressure
// is answered only when a reservation has failed, and only after a cleanup
// without relocation did not cure it (the device's make-room path, design
// §8.1): up to that moment a relocating device does exactly what one
// without relocation does, and it can only need less.

package relocation

import "fmt"

// Reason says what asked for a relocation, and so which TargetRoom its plan
// may use (design §8.1).
type Reason uint8

const (
	// Explicit: an explicit cleanup, which exists to give memory back; raised
	// by Reclaim. Room Held.
	Explicit Reason = iota
	// MemoryPressure: a reservation failed for want of device memory and a
	// cleanup without relocation did not make room; raised by the device's
	// make-room path through ReclaimFor. Room Held.
	MemoryPressure
	// ArenaFull: all 64 page sizes are taken, so the next growth has nowhere
	// to go; raised by RelocateWhenWanted, and by the make-room path after
	// pool.ErrPageSizesExhausted (after a cleanup without relocation did
	// not free a slot). Room MayAllocate.
	ArenaFull
	// Capture: a capture starts, and every page it touches will be guarded
	// for the graph's life; raised by capture prepare through RelocateDevice.
	// Room MayAllocate.
	Capture
	// Compact: current pages hold free room between live allocations, and
	// emptying the sparsest of them gives whole pages back; raised by the
	// make-room path's compacting stages (after a cleanup and a relocation off
	// outdated pages both failed to make room) and by Device.Defragment,
	// through CompactPages. Room Held: a compaction that took a new page to empty
	// one would free nothing.
	Compact

	// NumReasons is the number of reasons, for per-reason counters.
	NumReasons = 5
)

func (r Reason) String() string {
	switch r {
	case Explicit:
		return "Explicit"
	case MemoryPressure:
		return "MemoryPressure"
	case ArenaFull:
		return "ArenaFull"
	case Capture:
		return "Capture"
	case Compact:
		return "Compact"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Room returns the room a relocation for r may carve targets in. Explicit,
// MemoryPressure and Compact run when memory is short (or to give it back),
// where a new page would cost more than it frees: Held. ArenaFull and Capture must empty the outdated pools
// whatever the current pages hold: MayAllocate. An unknown reason is an
// internal bug and panics.
func (r Reason) Room() TargetRoom {
	switch r {
	case Explicit, MemoryPressure, Compact:
		return Held
	case ArenaFull, Capture:
		return MayAllocate
	}
	panic(fmt.Sprintf("relocation: Room of unknown %v", r))
}

// NeedKind is what an arena wants.
type NeedKind uint8

const (
	// NeedNothing: no relocation (nothing outdated, or stalled).
	NeedNothing NeedKind = iota
	// NeedArenaFull: every page size is taken; relocate whatever the device
	// holds.
	NeedArenaFull
)

func (k NeedKind) String() string {
	switch k {
	case NeedNothing:
		return "NeedNothing"
	case NeedArenaFull:
		return "NeedArenaFull"
	}
	return fmt.Sprintf("NeedKind(%d)", uint8(k))
}

// Need is what one stream's arena wants, computed from its ArenaState.
type Need struct {
	Kind NeedKind
}

// Reason is the relocation n asks for: NeedNothing gives none,
// NeedArenaFull gives ArenaFull (design §8.2). An unknown kind is an
// internal bug and panics.
func (n Need) Reason() (Reason, bool) {
	switch n.Kind {
	case NeedNothing:
		return Explicit, false
	case NeedArenaFull:
		return ArenaFull, true
	}
	panic(fmt.Sprintf("relocation: Reason of unknown %v", n.Kind))
}

// ArenaShape is what can change the outcome of a plan that moved nothing: a
// new current page (room to move into), an outdated pool or page appearing or
// going, a guard appearing or going on an outdated page. Room freed inside
// current pages does not show; the next plan after a new page, a growth or an
// explicit cleanup finds it. Bound allocations are not counted (it keeps the
// arena's State cheap), so releasing a binding alone does not unstall.
type ArenaShape struct {
	CurrentPages    uint64 // pages of the current pool
	OutdatedPools   int    // pools a growth left behind
	OutdatedPages   uint64 // pages those pools hold
	OutdatedGuarded int    // how many of those pages are guarded
}

// ArenaState is what an arena reports to its Trigger.
type ArenaState struct {
	HasOutdated bool       // an outdated pool exists
	Full        bool       // all 64 slots hold a pool
	Shape       ArenaShape // see ArenaShape
}

// Trigger decides from an ArenaState whether an arena wants a relocation, and
// remembers a relocation that moved nothing (the stall) so it is not planned
// again until the arena's shape changes. The zero value is ready: no stall.
type Trigger struct {
	stalled bool
	shape   ArenaShape // the shape at the stall; meaningful while stalled
}

// Need returns what s wants (design §8.3): nothing outdated, or the stalled
// shape equal to s.Shape (all four counters) → NeedNothing; else s.Full →
// NeedArenaFull; else NeedNothing.
func (t *Trigger) Need(s ArenaState) Need {
	switch {
	case !s.HasOutdated:
		return Need{Kind: NeedNothing}
	case t.stalled && t.shape == s.Shape:
		return Need{Kind: NeedNothing}
	case s.Full:
		return Need{Kind: NeedArenaFull}
	}
	return Need{Kind: NeedNothing}
}

// Settled records the outcome of a relocation of the arena now in state s: a
// relocation that moved something clears the stall; one that moved nothing
// (or failed) stalls on s.Shape, so the same fruitless plan is not repeated
// before every reservation.
func (t *Trigger) Settled(moved bool, s ArenaState) {
	t.stalled = !moved
	if moved {
		t.shape = ArenaShape{}
		return
	}
	t.shape = s.Shape
}
