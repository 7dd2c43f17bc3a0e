package gpumem

import (
	"errors"
	"testing"
)

// Make-room's last stage (stageKeptRoom): on whole pages a page a staple
// size opened keeps its open room from sizes that would break its tiling
// (pool PL37), but never to the point of running out of memory. Here 2 MiB
// buffers, a staple once forty were served (four 10 MiB pages' worth), fill
// five pages and open a sixth, whose 8 MiB of open room is kept for them; a
// 3 MiB buffer (no whole number of them in 8 MiB, above an eighth of the
// page) would take a page of its own, but the device is full and nothing
// can move. The kept room serves it, and every byte survives; a device
// without the stage failed it. Without compaction WouldFit says so first;
// with it, WouldFit cannot foresee a compaction's moves and says it may fit.
func TestKeptRoomServesAnAllocationTheDeviceCannotPlaceElsewhere(t *testing.T) {
	for _, compacting := range []bool{true, false} {
		opts := capacityOptions(60 * mib)
		if !compacting {
			opts = append(opts, WithoutCompaction())
		}
		keptRoomServes(t, openHost(t, opts...), compacting)
	}
}

func keptRoomServes(t *testing.T, d *Device, compacting bool) {
	t.Helper()
	s := d.DefaultStream()
	first := mustAlloc(t, s, 10*mib) // the arena's first page: 10 MiB pages
	live := []Buffer{first}
	for range 21 {
		live = append(live, mustAlloc(t, s, 2*mib))
	}
	if got := d.Stats().BytesReserved; got != 60*mib {
		t.Fatalf("setup: %d MiB reserved, want six 10 MiB pages: the device full", got/mib)
	}
	want := make([][]byte, len(live))
	for i, b := range live {
		want[i] = pattern(b.Size(), byte(i+1))
		mustWrite(t, b, want[i])
	}
	f := s.WouldFit(3 * mib)
	if compacting && !(f.Maybe && f.How == FitCompaction) || !compacting && !(f.OK && f.How == FitHeld) {
		t.Fatalf("compacting %v: WouldFit(3 MiB) = %v, want OK from held room without compaction (the kept room yields before the allocation fails), may fit with it", compacting, f)
	}
	b, err := s.Alloc(bg, 3*mib)
	if err != nil {
		if errors.Is(err, ErrOutOfMemory) {
			t.Fatalf("compacting %v: 3 MiB with 8 MiB of kept room free and the device full: %v", compacting, err)
		}
		t.Fatal(err)
	}
	if got := d.Stats().BytesReserved; got != 60*mib {
		t.Fatalf("%d MiB reserved after the 3 MiB allocation, want 60: it took the kept room", got/mib)
	}
	w := pattern(3*mib, 99)
	mustWrite(t, b, w)
	wantBytes(t, b, w)
	for i, b := range live {
		wantBytes(t, b, want[i])
	}
}
