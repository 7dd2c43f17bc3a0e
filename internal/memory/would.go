// Dry runs of a reservation: what Reserve, ReserveExact and Cleanup would
// do, found without doing them (pool would.go), for a device that answers
// whether an allocation would fit before it is made (gpumem's WouldFit).
//
// Each Would form takes the route its counterpart takes (addRoute,
// heldRoute, the adaptive memory's route), in the same order, and asks
// each pool its dry form in a pool.View: the pools as they are, less what
// the steps before the reservation (its periodic cleanup, an explicit one
// the caller stands for) would give back.

package memory

import (
	"github.com/gpumem/gpumem/internal/pool"
)

// WouldReserve is Reserve(size, u) in view v, changing nothing: under
// Allow the periodic cleanup first (recorded in v), then reserveAdding's
// route; under AddOnly that route alone; under Forbidden held room or
// ErrPageUpdateForbidden. v.Attempts counts the reservations this
// allocation made before (each counted one more reservation, allocNr).
func (m *Manager) WouldReserve(size uint64, u PageUpdate, v *pool.View) pool.Would {
	switch u {
	case Allow:
		m.WouldCleanup(v, pool.Periodic)
		return m.wouldReserveAdding(size, u, v)
	case AddOnly:
		return m.wouldReserveAdding(size, u, v)
	}
	if w := m.wouldReserveHeld(size, v); w.OK() {
		return w
	}
	return pool.Would{Err: m.errForbidden(size)}
}

// allocNrIn is allocNr as the view's reservation sees it: one more for
// each attempt before it.
func (m *Manager) allocNrIn(v *pool.View) uint64 { return m.allocNr + uint64(v.Attempts) }

// wouldReserveAdding is reserveAdding in v.
func (m *Manager) wouldReserveAdding(size uint64, u PageUpdate, v *pool.View) pool.Would {
	r := m.addRoute(size, m.cfg.Persistent == SizeMatch && m.persistent.HasSizeIn(v, size))
	if r.dedicated {
		return m.dedicated.WouldAllocMayRelease(v, size, u == Allow, m.g)
	}
	if r.persistentHeld {
		if w := m.persistent.WouldTryReserve(v, size); w.OK() {
			return w
		}
	}
	if r.persistentNew {
		return m.persistent.WouldAlloc(v, size)
	}
	return m.dynamic.WouldReserve(v, size)
}

// wouldReserveHeld is reserveHeld in v (WouldFail with a nil Err: no held
// room serves size).
func (m *Manager) wouldReserveHeld(size uint64, v *pool.View) pool.Would {
	switch m.heldRoute(size) {
	case heldDedicated:
		return m.dedicated.WouldTryReserve(v, size)
	case heldPersistent:
		return m.persistent.WouldTryReserve(v, size)
	case heldSizeMatch:
		if w := m.persistent.WouldTryReserve(v, size); w.OK() {
			return w
		}
	}
	return m.dynamic.WouldTryReserve(v, size)
}

// WouldReserveExact is ReserveExact in v, after the view's latest
// reservation last (whose refused own-size page ReserveExact reads).
func (m *Manager) WouldReserveExact(size uint64, v *pool.View, last pool.Would) pool.Would {
	if m.ownSizeTriedIn(v, &last, size) {
		return pool.Would{Err: errOwnSizeTried(size)}
	}
	return m.dedicated.WouldAllocMayRelease(v, size, true, m.g)
}

// WouldCleanup is Cleanup(kind) in v: what each pool would give back,
// recorded in v (and told to its dry storage), in cleanup's order; a
// periodic one on granular storage under pressure unmaps free granules.
func (m *Manager) WouldCleanup(v *pool.View, kind pool.CleanupKind) {
	if kind == pool.Explicit {
		m.persistent.WouldCleanup(v, kind)
	}
	m.dedicated.WouldReclaim(v, m.g)
	m.dynamic.WouldCleanup(v, m.allocNrIn(v), kind)
	if kind == pool.Explicit {
		return
	}
	if m.granule > 0 && m.underPressureAt(v.Storage().Allocated()) {
		if u, ok := m.dynamic.(*AdaptiveMemory); ok {
			u.WouldUnmapFree(v)
		}
	}
}

// WouldYieldKeptRoomIn is YieldKeptRoom in v (recorded there).
func (m *Manager) WouldYieldKeptRoomIn(v *pool.View, size uint64) bool {
	a, ok := m.keptRoomArena(size, v)
	return ok && a.arena.WouldYieldKeptRoom(v, size)
}

// HasOutdatedIn is HasOutdated in v.
func (m *Manager) HasOutdatedIn(v *pool.View) bool {
	return m.relocating != nil && m.relocating.HasOutdatedIn(v)
}

// CanCompactIn is CanCompact in v.
func (m *Manager) CanCompactIn(v *pool.View, underPressure bool) bool {
	return m.relocating != nil && m.relocating.CanCompactIn(v, underPressure)
}

// CanMakeHoleIn is CanMakeHole in v.
func (m *Manager) CanMakeHoleIn(v *pool.View, size uint64) bool {
	return m.relocating != nil && m.relocating.CanMakeHoleIn(v, size)
}

// WouldReserve implements Dynamic: Reserve's route, each pool's dry form.
func (a *AdaptiveMemory) WouldReserve(v *pool.View, size uint64) pool.Would {
	switch a.route(size) {
	case toTiny:
		if w := a.tiny.WouldTryReserve(v, 0); w.OK() {
			return w
		}
		return a.tiny.WouldAlloc(v, 0)
	case toSmall:
		if w := a.small.WouldTryReserve(v, size); w.OK() {
			return w
		}
		return a.small.WouldAlloc(v, size)
	}
	return a.arena.WouldReserve(v, size)
}

// WouldTryReserve implements Dynamic.
func (a *AdaptiveMemory) WouldTryReserve(v *pool.View, size uint64) pool.Would {
	switch a.route(size) {
	case toTiny:
		return a.tiny.WouldTryReserve(v, 0)
	case toSmall:
		return a.small.WouldTryReserve(v, size)
	}
	return a.arena.WouldTryReserve(v, size)
}

// WouldCleanup implements Dynamic: Cleanup's steps in v.
func (a *AdaptiveMemory) WouldCleanup(v *pool.View, allocNr uint64, kind pool.CleanupKind) {
	a.tiny.WouldCleanup(v, allocNr, kind)
	if kind != pool.Explicit && !a.arena.HasOutdated() {
		return
	}
	a.small.WouldCleanup(v, kind)
	a.arena.WouldCleanup(v, kind)
}

// WouldUnmapFree is UnmapFree in v.
func (a *AdaptiveMemory) WouldUnmapFree(v *pool.View) {
	a.small.WouldUnmapFree(v)
	a.arena.WouldUnmapFree(v)
}

// HasOutdatedIn implements Relocating.
func (a *AdaptiveMemory) HasOutdatedIn(v *pool.View) bool { return a.arena.HasOutdatedIn(v) }

// WouldReserve implements Dynamic: held room in every accepting bucket,
// else a page in the smallest accepting one.
func (e *ExclusivePools) WouldReserve(v *pool.View, size uint64) pool.Would {
	if w := e.WouldTryReserve(v, size); w.OK() {
		return w
	}
	for _, b := range e.buckets {
		if b.Accept(size) {
			return b.WouldAlloc(v, size)
		}
	}
	return pool.Would{Err: e.errTooBig(size)}
}

// WouldTryReserve implements Dynamic.
func (e *ExclusivePools) WouldTryReserve(v *pool.View, size uint64) pool.Would {
	for _, b := range e.buckets {
		if !b.Accept(size) {
			continue
		}
		if w := b.WouldTryReserve(v, size); w.OK() {
			return w
		}
	}
	return pool.Would{}
}

// WouldCleanup implements Dynamic.
func (e *ExclusivePools) WouldCleanup(v *pool.View, allocNr uint64, kind pool.CleanupKind) {
	for _, b := range e.buckets {
		b.WouldCleanup(v, allocNr, kind)
	}
}

// WouldTake is Take in the room, changing nothing: whether the recording's
// next allocation, of size bytes, would be served from the room (at its
// rehearsal counterpart's bytes, or the first held range that holds it).
func (r *RecordingRoom) WouldTake(size uint64) bool {
	k := r.next
	index, ok := r.m.route(size)
	if !ok {
		return false
	}
	room := r.rooms[index]
	if room == nil {
		return false
	}
	if k < len(r.steps) && r.steps[k].Size == size {
		if step := r.steps[k]; step.Region.Size != 0 && step.Pool == index && room.CanTakeAt(step.Region.ID, step.Region.Offset, size) {
			return true
		}
	}
	return room.CanTakeFirst(size)
}
