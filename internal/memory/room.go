package memory

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// The room a capture's rehearsal laid out, held for its recording (design
// §10.2).
//
// The rehearsal runs the warmup's allocations and frees again and lets go
// of them, so that the recording, which may only use held room, repeats
// its placements. Free room is anyone's: between the rehearsal and each
// reservation of the recording another graph's seal may guard the page it
// lies on (a guarded page serves nothing new), and nothing else would then
// give it back. So the room the rehearsal's last run used is held instead
// (pool.Room, per pool), and each allocation of the recording takes the
// bytes its counterpart in the rehearsal took, in order; a recorded buffer
// whose slice goes back to the recording gives it back to the room.

// RoomStep is one allocation of a rehearsal: its size and where the
// rehearsal placed it. Region is the slice's bytes on its page (effective
// size); a zero Region is an allocation not placed on a pool that carves
// pages (tiny, dedicated, persistent, exclusive pools), which the room
// does not hold.
type RoomStep struct {
	Size   uint64
	Pool   uint8
	Region storage.Region
}

// Placement is the RoomStep of an allocation of size bytes that h (a
// reservation or an allocation) holds.
func (m *Manager) Placement(h handle.Ref, size uint64) RoomStep {
	step := RoomStep{Size: size}
	loc := h.Descriptor().Location()
	if !m.carves(loc.Pool()) {
		return step
	}
	sl, err := m.Find(h)
	if err != nil {
		return step
	}
	step.Pool = loc.Pool()
	step.Region = storage.Region{ID: sl.Region.ID, Offset: sl.Region.Offset, Size: sl.EffectiveSize()}
	return step
}

// carves reports whether pool index is a pool of the dynamic memory that
// carves pages: the small pool or the arena's current pool, the ones a
// reservation is carved from.
func (m *Manager) carves(index uint8) bool {
	a, ok := m.dynamic.(*AdaptiveMemory)
	if !ok {
		return false
	}
	if index == smallIndex {
		return true
	}
	p := a.arena.Pool(index)
	return p != nil && p == a.arena.Current()
}

// RecordingRoom is the room held for a recording: what the rehearsal's
// allocations used on each pool that carves pages, and the rehearsal's
// allocations in order. Its methods run under the caller's lock.
type RecordingRoom struct {
	m     *Manager
	steps []RoomStep
	next  int // the recording's allocations so far
	rooms map[uint8]*pool.Room
}

// HoldRoom holds the bytes the steps were placed on (free at this point:
// the rehearsal let go of them) for a recording that repeats them. A
// refusal (a granule the storage would not map) holds nothing and is
// returned.
func (m *Manager) HoldRoom(steps []RoomStep) (*RecordingRoom, error) {
	r := &RecordingRoom{m: m, steps: steps, rooms: map[uint8]*pool.Room{}}
	ranges := map[uint8][]storage.Region{}
	var order []uint8
	for _, st := range steps {
		if st.Region.Size == 0 || !m.carves(st.Pool) {
			continue // placed off the pools reservations are carved from now (a growth since made its pool outdated)
		}
		if _, ok := ranges[st.Pool]; !ok {
			order = append(order, st.Pool)
		}
		ranges[st.Pool] = append(ranges[st.Pool], st.Region)
	}
	for _, index := range order {
		room, err := m.holdRoom(index, ranges[index])
		if err != nil {
			r.Release()
			return nil, err
		}
		r.rooms[index] = room
	}
	if invariantsOn {
		m.checkInvariants("HoldRoom")
	}
	return r, nil
}

// holdRoom holds ranges of pool index (a pool that carves pages).
func (m *Manager) holdRoom(index uint8, ranges []storage.Region) (*pool.Room, error) {
	if !m.carves(index) {
		return nil, fmt.Errorf("memory: pool %d is not one reservations are carved from", index)
	}
	a := m.dynamic.(*AdaptiveMemory)
	if index == smallIndex {
		return a.small.HoldRoom(m.st, ranges, m.g)
	}
	return a.arena.HoldRoom(m.st, index, ranges, m.g)
}

// route returns the pool that would carve a reservation of size from held
// room under the current mode (reserveHeld's route), or false when none
// that carves pages would: the mode's own pools, a size above the largest
// page or of zero bytes, a size the persistent pool matches, a size the
// arena would have to grow for.
func (m *Manager) route(size uint64) (uint8, bool) {
	a, ok := m.dynamic.(*AdaptiveMemory)
	if !ok || size == 0 || m.aboveLargestPage(size) || m.Mode() == Dedicated || m.Mode() == Persistent {
		return 0, false
	}
	if m.cfg.Persistent == SizeMatch && m.persistent.HasSize(size) {
		return 0, false
	}
	if a.small.Accept(size) {
		return smallIndex, true
	}
	if kind, _ := a.arena.Sizing().Fit(size, a.arena.PageSize()); kind != pool.Fits {
		return 0, false
	}
	return a.arena.Current().Index(), true
}

// Take serves the recording's next allocation, of size bytes, from the
// room: at the bytes the rehearsal's allocation of the same rank took when
// it asked the same size there, else at the first held range that holds
// it. It returns a clone of the slice's handle (bind it, then release the
// clone, as after Reserve), or nil and why the room could not serve it
// (nil as well where the room has no part: the allocation goes to a pool
// that does not carve pages). The caller then tries the pools' free room
// and, when that fails too, tells the user why.
func (r *RecordingRoom) Take(size uint64) (*handle.Handle, error) {
	k := r.next
	r.next++
	var why error
	switch {
	case k >= len(r.steps):
		why = fmt.Errorf("the recording's allocation %d is one its warmup did not make (it made %d on this stream)", k+1, len(r.steps))
	case r.steps[k].Size != size:
		why = fmt.Errorf("the recording's allocation %d asks %d bytes where its warmup's asked %d", k+1, size, r.steps[k].Size)
	}
	index, ok := r.m.route(size)
	if !ok {
		return nil, why // no pool that carves pages serves it: the room has no part
	}
	room := r.rooms[index]
	if why == nil {
		if step := r.steps[k]; step.Region.Size == 0 || step.Pool != index || room == nil {
			why = fmt.Errorf("the rehearsal placed the recording's allocation %d on no page held for it", k+1)
		} else {
			h, err := room.TakeAt(r.m.st, step.Region.ID, step.Region.Offset, size, r.m.g)
			if err == nil {
				r.checked("RecordingRoom.Take")
				return h, nil
			}
			why = err
			if errors.Is(err, pool.ErrRoomTaken) {
				why = fmt.Errorf("the room the rehearsal held for the recording's allocation %d (%d bytes) is taken: an earlier allocation of the recording took it, or a buffer the recording freed is still bound (a clone, a mapping, a hold, another stream's queued use): %w", k+1, size, err)
			}
		}
	}
	if room != nil {
		if h := room.TakeFirst(r.m.st, size, r.m.g); h != nil {
			r.checked("RecordingRoom.Take")
			return h, nil
		}
	}
	return nil, why
}

// Give sets the slice at loc aside for the recording again, once free: the
// room of a buffer the recording allocated and freed, which its later
// allocations reuse. A slice not on a pool that carves pages is left
// alone.
func (r *RecordingRoom) Give(loc handle.Location) {
	if !loc.Placed() || !r.m.carves(loc.Pool()) {
		return
	}
	room := r.rooms[loc.Pool()]
	if room == nil {
		var err error
		if room, err = r.m.holdRoom(loc.Pool(), nil); err != nil {
			return
		}
		r.rooms[loc.Pool()] = room
	}
	room.Give(loc, r.m.g)
	r.checked("RecordingRoom.Give")
}

// Bytes is the room held.
func (r *RecordingRoom) Bytes() uint64 {
	var n uint64
	for _, room := range r.rooms {
		n += room.Bytes()
	}
	return n
}

// Release lets go of the room: its bytes are free room of their pages
// again. It is idempotent.
func (r *RecordingRoom) Release() {
	for _, room := range r.rooms {
		room.Release()
	}
	clear(r.rooms)
}

func (r *RecordingRoom) checked(after string) {
	if invariantsOn {
		r.m.checkInvariants(after)
	}
}
