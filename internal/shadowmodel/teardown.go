package shadowmodel

import (
	"maps"
	"slices"
)

// teardown closes the graphs, verifies every buffer through every handle,
// cleans up, checks the accounting against the shadow, frees everything
// and checks nothing is left. After a violation it only closes the graphs.
func (r *runState) teardown() {
	for _, w := range r.workers {
		for _, id := range slices.Sorted(maps.Keys(w.graphs)) {
			gr := w.graphs[id]
			delete(w.graphs, id)
			w.closeGraph(gr, id%2 == 0) // every other one is launched again, as closeOp does at random
		}
	}
	if r.stop.Load() {
		return
	}
	for i := range r.streams {
		r.workers[0].sync(i)
	}
	verifyAll := func(why string) {
		for _, w := range r.workers {
			for _, a := range w.live {
				for _, ref := range a.refs {
					got, err := w.bufs[ref].Read(bg)
					r.pulse()
					if w.checkRead(a, got, err, why) {
						a.foreign = 0
					}
				}
			}
		}
	}
	verifyAll("final Read")
	moves := r.d.Stats().Relocation.Moves
	if err := r.d.Cleanup(bg); err != nil {
		r.violate(-1, -1, "final Device.Cleanup: %v", err)
	}
	if r.d.Stats().Relocation.Moves != moves {
		verifyAll("Read after the final cleanup relocated")
	}
	var live, allocs uint64
	for _, w := range r.workers {
		for _, a := range w.live {
			live += a.size
			allocs++
		}
	}
	st := r.d.Stats()
	leaked := st.Relocation.Leaked > 0
	if st.GuardedPages != 0 {
		r.violate(-1, -1, "%d page guards left with every graph closed", st.GuardedPages)
	}
	if st.BytesInUse != live && !leaked || st.BytesInUse < live {
		r.violate(-1, -1, "Stats.BytesInUse %d after the final cleanup; the live buffers hold %d bytes (%d allocations)", st.BytesInUse, live, allocs)
	}
	for _, w := range r.workers {
		for len(w.live) > 0 {
			a := w.live[0]
			w.free(a, w.bufs[a.refs[0]], a.refs[0])
		}
	}
	if err := r.d.Cleanup(bg); err != nil {
		r.violate(-1, -1, "Device.Cleanup after freeing everything: %v", err)
	}
	// On every backend, Vulkan's included (its frees go back off the
	// caller's path, and the cleanup waits for them: gpumem.Releaser),
	// the explicit cleanup leaves nothing allocated.
	st = r.d.Stats()
	if !leaked && (st.BytesInUse != 0 || st.BytesReserved != 0 || st.BytesAllocated != 0) {
		r.violate(-1, -1, "after freeing everything and a cleanup: in use %d, reserved %d, allocated %d bytes; want 0 (no relocation leaked)",
			st.BytesInUse, st.BytesReserved, st.BytesAllocated)
	}
	if rep := r.d.Report(); !leaked && rep.Usage().Allocations != 0 {
		r.violate(-1, -1, "Report: %d allocations left after freeing everything", rep.Usage().Allocations)
	}
}
