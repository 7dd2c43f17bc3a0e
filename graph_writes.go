// Stream-order failure marks for graph launches (writes.go has the rules).
//
// A host graph replays the closures recorded at capture, so a replayed op
// learns which launch it runs in from the graph's launch slots: a FIFO per
// recorded op, filled by Launch (in launch order, under the device lock) and
// emptied by the op as it runs (in the same order: launches run in stream
// order, and a graph's ops in recorded order). The entry carries the op's
// record as a writer for that launch and what it depends on, so a replayed
// op fails or skips exactly as an enqueued one (W1, W2). A driver graph runs
// no recorded closure at replay; its launch is one step, whose failure
// marks everything the graph writes.

package gpumem

import (
	"sync"

	"github.com/gpumem/gpumem/internal/handle"
)

// launchEntry is what one replayed op needs of the launch it runs in.
type launchEntry struct {
	w    *writeRecord // nil when the op writes nothing
	deps []dependency
}

// launchSlots is a graph's FIFO of launch entries per recorded op.
type launchSlots struct {
	mu   sync.Mutex
	fifo map[int][]launchEntry
}

func (l *launchSlots) push(op int, e launchEntry) {
	l.mu.Lock()
	if l.fifo == nil {
		l.fifo = make(map[int][]launchEntry)
	}
	l.fifo[op] = append(l.fifo[op], e)
	l.mu.Unlock()
}

// pop takes the oldest entry of op (false when no launch filled one).
func (l *launchSlots) pop(op int) (launchEntry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.fifo[op]
	if len(q) == 0 {
		return launchEntry{}, false
	}
	e := q[0]
	q[0] = launchEntry{}
	if len(q) == 1 {
		delete(l.fifo, op)
	} else {
		l.fifo[op] = q[1:]
	}
	return e, true
}

// dropNewest withdraws the newest entry of op: its launch was not enqueued.
func (l *launchSlots) dropNewest(op int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.fifo[op]; len(q) > 0 {
		q = q[:len(q)-1]
		if len(q) == 0 {
			delete(l.fifo, op)
		} else {
			l.fifo[op] = q
		}
	}
}

// slotRun is the closure recorded for op number op of a capture: at each
// replay it takes its launch entry and runs as wrapRun would.
func slotRun(slots *launchSlots, op int, run func() error) func() error {
	return func() error {
		e, ok := slots.pop(op)
		if !ok {
			return run() // the warm-up-free recording pass of a backend, or a foreign replay
		}
		return wrapRun(e.w, e.deps, run)()
	}
}

// readRange is one range a recorded op reads.
type readRange struct {
	d        *handle.Descriptor
	id       handle.ID
	off, len uint64
}

// prepareLaunchLocked makes the launch entries of every recorded op, in
// order, registering each op's record (seq before+1+i) as it goes, so a
// later op of the launch depends on an earlier one. It returns undo, which
// withdraws all of it when the replay is refused.
func (g *Graph) prepareLaunchLocked(before uint64) (undo func()) {
	s := g.s
	d := s.d
	var pushed []int
	var registered []*writeRecord
	pendingLen := len(s.pending)
	for i := range g.opWritten {
		var e launchEntry
		for _, r := range g.opReads[i] {
			e.deps = d.dependenciesLocked(r.d, r.id, r.off, r.len, e.deps)
		}
		if ws := g.written[g.opWritten[i][0]:g.opWritten[i][1]]; len(ws) > 0 {
			e.w = d.newWriteRecordLocked(s, "graph launch", outputsOfWritten(ws))
			e.w.seq = before + 1 + uint64(i)
			d.registerLocked(e.w)
			registered = append(registered, e.w)
		}
		g.slots.push(i, e)
		pushed = append(pushed, i)
	}
	return func() {
		for _, i := range pushed {
			g.slots.dropNewest(i)
		}
		for _, w := range registered {
			d.unregisterLocked(w)
		}
		clear(s.pending[pendingLen:])
		s.pending = s.pending[:pendingLen]
	}
}
