package shadowmodel

// The monitor: Stats and Report sampled from a goroutine of their own
// while the workers run, checked for sanity (in use ≤ reserved, allocated
// ≤ capacity) and for counters that never decrease.

import (
	"fmt"
	"time"

	"github.com/gpumem/gpumem"
)

func (r *runState) monitor(done <-chan struct{}) {
	var prev gpumem.Stats
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		default:
		}
		st := r.d.Stats()
		r.checkStats(-1, -1, st)
		if i > 0 {
			r.checkMonotonic(prev, st)
		}
		prev = st
		if i%8 == 0 {
			rep := r.d.Report()
			r.checkReport(-1, -1, rep)
			if i%64 == 0 {
				_ = rep.String()
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *runState) checkStats(worker, op int, st gpumem.Stats) {
	if st.BytesInUse > st.BytesReserved {
		r.violate(worker, op, "Stats: BytesInUse %d > BytesReserved %d", st.BytesInUse, st.BytesReserved)
	}
	if c := r.cfg.Capacity; c != 0 && st.BytesAllocated > c {
		r.violate(worker, op, "Stats: BytesAllocated %d > capacity %d", st.BytesAllocated, c)
	}
	if st.StorageDeallocs > st.StorageAllocs {
		r.violate(worker, op, "Stats: StorageDeallocs %d > StorageAllocs %d", st.StorageDeallocs, st.StorageAllocs)
	}
	if st.Relocation.Leaked > 0 && r.waitFaults.Load() == 0 {
		r.violate(worker, op, "Stats: %d leaked relocations without an injected wait fault", st.Relocation.Leaked)
	}
}

func (r *runState) checkMonotonic(a, b gpumem.Stats) {
	type pair struct {
		name string
		a, b uint64
	}
	ps := []pair{
		{"Growths", a.Growths, b.Growths}, {"AllocNr", a.AllocNr, b.AllocNr},
		{"Relocation.Moves", a.Relocation.Moves, b.Relocation.Moves},
		{"Relocation.BytesMoved", a.Relocation.BytesMoved, b.Relocation.BytesMoved},
		{"Relocation.PagesReleased", a.Relocation.PagesReleased, b.Relocation.PagesReleased},
		{"Relocation.NothingToMove", a.Relocation.NothingToMove, b.Relocation.NothingToMove},
		{"Relocation.Abandoned", a.Relocation.Abandoned, b.Relocation.Abandoned},
		{"Relocation.Leaked", a.Relocation.Leaked, b.Relocation.Leaked},
		{"StorageAllocs", a.StorageAllocs, b.StorageAllocs}, {"StorageDeallocs", a.StorageDeallocs, b.StorageDeallocs},
		{"ReserveRetries", a.ReserveRetries, b.ReserveRetries}, {"ExplicitCleanups", a.ExplicitCleanups, b.ExplicitCleanups},
		{"Captures.Sealed", a.Captures.Sealed, b.Captures.Sealed}, {"Captures.Doomed", a.Captures.Doomed, b.Captures.Doomed},
		{"Captures.Abandoned", a.Captures.Abandoned, b.Captures.Abandoned},
	}
	for i := range a.Relocation.Runs {
		ps = append(ps, pair{fmt.Sprintf("Relocation.Runs[%d]", i), a.Relocation.Runs[i], b.Relocation.Runs[i]})
	}
	for k, v := range a.FailedReserves {
		ps = append(ps, pair{"FailedReserves[" + k + "]", v, b.FailedReserves[k]})
	}
	for _, p := range ps {
		if p.b < p.a {
			r.violate(-1, -1, "Stats.%s went down from %d to %d", p.name, p.a, p.b)
		}
	}
}

func (r *runState) checkReport(worker, op int, rep gpumem.Report) {
	for _, s := range rep.Streams {
		u := s.Usage()
		if u.BytesInUse > u.BytesReserved || u.BytesUnmapped > u.BytesReserved {
			r.violate(worker, op, "Report: %s usage %+v: in use or unmapped above reserved", s.Name, u)
		}
	}
}
