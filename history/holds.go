package history

import "fmt"

// HoldChecker follows what a trace's held releases depend on (design
// §13.1): which IDs are live, which freed ones are held until their
// release, and each stream's open holds. The Encoder and the tool's Decode
// run every event through one, so a release names a buffer a held free
// left taken and a pass an open hold, and what the Encoder writes decodes
// (E2). It is exported for readers of the format; it is not safe for
// concurrent use.
//
// Its memory is one map entry per live ID, plus one per held free (kept
// after the release, so a second release is named as such).
type HoldChecker struct {
	unit     string         // "line" (Decode) or "event" (Encoder), for the messages
	live     map[uint64]int // live ID → where it was allocated
	held     map[uint64]int // ID freed with held, not released yet → where it was freed
	released map[uint64]int // ID released → where
	holds    map[int]int    // stream → open holds
}

// NewHoldChecker returns a HoldChecker whose messages call a position a
// unit ("line" for a reader, "event" for a writer).
func NewHoldChecker(unit string) *HoldChecker {
	return &HoldChecker{unit: unit, live: map[uint64]int{}, held: map[uint64]int{}, released: map[uint64]int{}, holds: map[int]int{}}
}

// Check applies e, at position pos, or refuses it with an error wrapping
// ErrInvalidEvent that names the field at fault; a refused event changes
// nothing.
func (c *HoldChecker) Check(e Event, pos int) error {
	switch e.Op {
	case OpAlloc:
		if at, ok := c.held[e.ID]; ok {
			return fmt.Errorf("%w: field \"id\" is %d: alloc of an ID whose held free (%s %d) has no release yet", ErrInvalidEvent, e.ID, c.unit, at)
		}
		c.live[e.ID] = pos
		delete(c.released, e.ID)
	case OpFree:
		if e.Held {
			if at, ok := c.held[e.ID]; ok {
				return fmt.Errorf("%w: field \"held\": id %d is held already, by the free at %s %d, which has no release yet", ErrInvalidEvent, e.ID, c.unit, at)
			}
			c.held[e.ID] = pos
		}
		delete(c.live, e.ID)
	case OpRelease:
		if _, ok := c.held[e.ID]; ok {
			delete(c.held, e.ID)
			c.released[e.ID] = pos
			return nil
		}
		if at, ok := c.released[e.ID]; ok {
			return fmt.Errorf("%w: field \"id\" is %d: a second release (the first is at %s %d)", ErrInvalidEvent, e.ID, c.unit, at)
		}
		if at, ok := c.live[e.ID]; ok {
			return fmt.Errorf("%w: field \"id\" is %d: release before its free (allocated at %s %d, not freed since)", ErrInvalidEvent, e.ID, c.unit, at)
		}
		return fmt.Errorf("%w: field \"id\" is %d: release of a buffer no free with \"held\":true left taken", ErrInvalidEvent, e.ID)
	case OpHold:
		c.holds[e.Stream]++
	case OpPass:
		if c.holds[e.Stream] == 0 {
			return fmt.Errorf("%w: field \"stream\" is %d: pass without an open hold on that stream", ErrInvalidEvent, e.Stream)
		}
		c.holds[e.Stream]--
	}
	return nil
}
