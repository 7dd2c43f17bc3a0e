package memory_test

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// A recording's room (design §10.2): the rehearsal's placements, held, are
// taken in order at the bytes the rehearsal took — on a page guarded since
// too — a freed allocation's slice is given back and taken again, and an
// allocation the warmup did not make is told apart from one of another
// size.
func TestRecordingRoomServesTheRehearsalsPlacementsInOrder(t *testing.T) {
	st := hoststorage.NewGranularSim(32, 2*mib, nil)
	m := granularManager(t, st, 0, memory.Config{})
	other := alloc(t, m, 40*kib, memory.Allow) // another graph's buffer, on the small page
	// The rehearsal: a and b of 30 KiB, a freed before b (b reuses a's
	// bytes), and c of 1 MiB on the arena; every hold let go at the end.
	a, _ := m.Reserve(30*kib, memory.AddOnly, pool.Bind{})
	steps := []memory.RoomStep{m.Placement(a, 30*kib)}
	a.Release()
	b, _ := m.Reserve(30*kib, memory.AddOnly, pool.Bind{})
	steps = append(steps, m.Placement(b, 30*kib))
	c, _ := m.Reserve(1*mib, memory.AddOnly, pool.Bind{})
	steps = append(steps, m.Placement(c, 1*mib))
	b.Release()
	c.Release()
	if steps[0].Region != steps[1].Region || steps[2].Region.Size == 0 {
		t.Fatalf("rehearsal placements %+v: want b on a's bytes and c placed", steps)
	}
	room, err := m.HoldRoom(steps)
	if err != nil {
		t.Fatal(err)
	}
	defer room.Release()
	if held := room.Bytes(); held < 30*kib+1*mib {
		t.Fatalf("room holds %d bytes, want at least a's and c's", held)
	}
	// Free room never serves the held bytes; another graph's guard on the
	// small page does not take them from the recording.
	guard, ok := m.Guard(other.Location())
	if !ok {
		t.Fatal("no guard")
	}
	defer guard.Release()
	take := func(size uint64, want storage.Region) *handle.Handle {
		t.Helper()
		r, why := room.Take(size)
		if r == nil {
			t.Fatalf("Take(%d): nothing (%v)", size, why)
		}
		h := handle.New(handle.Uninit)
		if err := m.Bind(r, h, 0); err != nil {
			t.Fatal(err)
		}
		r.Release()
		if got := m.Placement(h, size).Region; got != want {
			t.Fatalf("Take(%d) at %+v, want the rehearsal's %+v", size, got, want)
		}
		return h
	}
	ra := take(30*kib, steps[0].Region)
	loc := ra.Location()
	ra.Release() // the recording frees a: its room goes back
	room.Give(loc)
	rb := take(30*kib, steps[1].Region)
	rc := take(1*mib, steps[2].Region)
	if _, why := room.Take(30 * kib); why == nil || !strings.Contains(why.Error(), "allocation 4 is one its warmup did not make") {
		t.Fatalf("a fourth allocation: %v; want it named as one the warmup did not make", why)
	}
	rb.Release()
	rc.Release()
	room.Release()
	room2, err := m.HoldRoom(steps)
	if err != nil {
		t.Fatal(err)
	}
	defer room2.Release()
	if _, why := room2.Take(31 * kib); why == nil || !strings.Contains(why.Error(), "asks 31744 bytes where its warmup's asked 30720") {
		t.Fatalf("a first allocation of another size: %v; want both sizes named", why)
	}
	other.Release()
}
