// When to relocate (design §8): reasons, the need an arena reports, and the
// trigger that stalls a relocation which moved nothing. The protocol a reason
// starts is described in doc.go.
//
// The decision is split in two because the inputs live in two places. A
// stream's arena knows whether anything is outdated and how big the next page
// is, but not what the other streams hold; the device knows the total only by
// asking every stream. So the arena's Trigger produces a Need (plain data,
// cheap), and only a Need that could lead to a relocation asks the device for
// its byte count (Need.Reason), once.
//
// Pressure is High when allocated + page > capacity − page, that is when the
// device holds more than capacity − 2·page: the last moment a relocation can
// still free what the device needs, since once the device refuses a page
// there is nowhere left to copy to. Both sides saturate, so a page larger
// than the capacity gives a threshold of 0 (always High), never a wrapped,
// huge one.

package relocation

import (
	"fmt"

	"github.com/gpumem/gpumem/storage"
)

// Reason says what asked for a relocation, and so which TargetRoom its plan
// may use (design §8.1).
type Reason uint8

const (
	// Explicit: an explicit cleanup, which exists to give memory back; raised
	// by Reclaim. Room Held.
	Explicit Reason = iota
	// MemoryPressure: the next page would leave the device too little room;
	// raised by RelocateWhenWanted. Room Held.
	MemoryPressure
	// ArenaFull: all 64 page sizes are taken, so the next growth has nowhere
	// to go; raised by RelocateWhenWanted, and by the make-room path after
	// pool.ErrPageSizesExhausted. Room MayAllocate.
	ArenaFull
	// Capture: a capture starts, and every page it touches will be guarded
	// for the graph's life; raised by capture prepare through RelocateDevice.
	// Room MayAllocate.
	Capture

	// NumReasons is the number of reasons, for per-reason counters.
	NumReasons = 4
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
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Room returns the room a relocation for r may carve targets in. Explicit and
// MemoryPressure run when memory is short, where a new page would cost more
// than it frees: Held. ArenaFull and Capture must empty the outdated pools
// whatever the current pages hold: MayAllocate. An unknown reason is an
// internal bug and panics.
func (r Reason) Room() TargetRoom {
	switch r {
	case Explicit, MemoryPressure:
		return Held
	case ArenaFull, Capture:
		return MayAllocate
	}
	panic(fmt.Sprintf("relocation: Room of unknown %v", r))
}

// NeedKind is what an arena wants before the device's byte count is known.
type NeedKind uint8

const (
	// NeedNothing: no relocation (nothing outdated, stalled, or a device
	// whose capacity is unknown).
	NeedNothing NeedKind = iota
	// NeedArenaFull: every page size is taken; relocate whatever the device
	// holds.
	NeedArenaFull
	// NeedUnderPressure: relocate if the device's bytes leave too little
	// room for one more page (Need.Reason decides).
	NeedUnderPressure
)

func (k NeedKind) String() string {
	switch k {
	case NeedNothing:
		return "NeedNothing"
	case NeedArenaFull:
		return "NeedArenaFull"
	case NeedUnderPressure:
		return "NeedUnderPressure"
	}
	return fmt.Sprintf("NeedKind(%d)", uint8(k))
}

// Need is computed from one stream's arena before the device-wide byte count
// is known. Capacity (the device's, 0 = unknown) and PageSize (the next
// current page) matter only to NeedUnderPressure.
type Need struct {
	Kind     NeedKind
	Capacity uint64
	PageSize uint64
}

// Reason judges n against the device: NeedNothing gives none; NeedArenaFull
// gives ArenaFull whatever the device holds; NeedUnderPressure gives
// MemoryPressure iff satAdd(allocated(), PageSize) > satSub(Capacity,
// PageSize), else none (design §8.2).
//
// allocated is the sum of BytesAllocated over every stream of the device,
// which costs a walk over the streams: Reason calls it at most once, and only
// for NeedUnderPressure. An unknown kind is an internal bug and panics.
func (n Need) Reason(allocated func() uint64) (Reason, bool) {
	switch n.Kind {
	case NeedNothing:
		return Explicit, false
	case NeedArenaFull:
		return ArenaFull, true
	case NeedUnderPressure:
		if storage.SatAdd(allocated(), n.PageSize) > storage.SatSub(n.Capacity, n.PageSize) {
			return MemoryPressure, true
		}
		return Explicit, false
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
	PageSize    uint64     // size of the next current page
	HasOutdated bool       // an outdated pool exists
	Full        bool       // all 64 slots hold a pool
	Shape       ArenaShape // see ArenaShape
}

// Trigger decides from an ArenaState whether an arena wants a relocation, and
// remembers a relocation that moved nothing (the stall) so it is not planned
// again until the arena's shape changes. The zero value has capacity 0
// (unknown) and no stall.
type Trigger struct {
	capacity uint64
	stalled  bool
	shape    ArenaShape // the shape at the stall; meaningful while stalled
}

// NewTrigger returns a trigger for a device of capacity bytes (0 = unknown:
// such a device is never judged under pressure).
func NewTrigger(capacity uint64) Trigger { return Trigger{capacity: capacity} }

// Capacity returns the device capacity the trigger judges against.
func (t *Trigger) Capacity() uint64 { return t.capacity }

// Need returns what s wants (design §8.3): nothing outdated, or the stalled
// shape equal to s.Shape (all four counters) → NeedNothing; else s.Full →
// NeedArenaFull; else a known capacity → NeedUnderPressure{capacity,
// s.PageSize}; else NeedNothing.
func (t *Trigger) Need(s ArenaState) Need {
	switch {
	case !s.HasOutdated:
		return Need{Kind: NeedNothing}
	case t.stalled && t.shape == s.Shape:
		return Need{Kind: NeedNothing}
	case s.Full:
		return Need{Kind: NeedArenaFull}
	case t.capacity > 0:
		return Need{Kind: NeedUnderPressure, Capacity: t.capacity, PageSize: s.PageSize}
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
