package pool

import (
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
)

// TestOverflowForeseesWhatTheMovesLeave checks freeRoom.overflow, which
// lets a compaction plan skip the pages whose moves cannot succeed, against
// moveWhatFits itself on random layouts: for every candidate page, the
// bytes its live slices leave without a best fit elsewhere, and whether
// any is left, must be what carving the moves leaves. A difference would
// make a plan skip a page it could have emptied (or plan one it cannot).
func TestOverflowForeseesWhatTheMovesLeave(t *testing.T) {
	for seed := range uint64(120) {
		rng := rand.New(rand.NewPCG(seed, 7))
		st := hoststorage.NewHost(32, nil)
		g := handle.NewErrorGraph()
		p := NewSliced(4*MiB, 4*MiB, false, 32, 5, Limits{})
		var live []*handle.Handle
		for range 20 + rng.IntN(60) {
			size := uint64(1 + rng.IntN(int(MiB)))
			if rng.IntN(8) == 0 {
				size = uint64(MiB + rng.IntN(int(2*MiB)))
			}
			live = append(live, slicedReserve(t, p, st, size, g))
		}
		rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		for _, h := range live[:len(live)/2] {
			h.Release()
		}
		sc := compactScope{p}
		source := sc.marks()
		checked := 0
		for i, pg := range p.pages {
			pg.coalesce(g)
			ls := pg.liveSlices()
			if len(ls) == 0 {
				continue
			}
			room := sc.freeRoom(source)
			if !room.exact {
				t.Fatalf("seed %d: one pool, yet freeRoom is not exact", seed)
			}
			wantPacked, wantSpills := room.overflow(scopePage{0, i}, append([]int(nil), ls...), pg, p.align)
			source[0][i] = true
			moves, overflow := sc.moveWhatFits(pg, ls, source, st, g, nil)
			var packed uint64
			for _, j := range overflow {
				_, need := padded(pg.slices[j].Region.Size, p.align)
				packed += need
			}
			releaseMoves(moves, 0)
			source[0][i] = false
			if packed != wantPacked || (len(overflow) > 0) != wantSpills {
				t.Fatalf("seed %d page %d: the moves left %d bytes (%d slices); overflow foresaw %d bytes, spills %v",
					seed, i, packed, len(overflow), wantPacked, wantSpills)
			}
			checked++
		}
		if checked == 0 {
			t.Fatalf("seed %d: no page with live slices to check", seed)
		}
	}
}
