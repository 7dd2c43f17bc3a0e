package gpumem

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/internal/units"
)

// Report describes every stream's pools.
type Report struct {
	Backend string
	Streams []StreamReport
}

// StreamReport is one stream's memory.
type StreamReport struct {
	Name  string
	Pools memory.PoolsReport
}

// Usage is what a pool, a stream or the device holds: bytes reserved, in
// use, lost to padding and held back for freed buffers something still
// uses (pending free), and the number of live allocations.
type Usage = pool.Usage

// Usage sums every stream.
func (r Report) Usage() Usage {
	var u pool.Usage
	for _, s := range r.Streams {
		u = u.Combine(s.Pools.Usage())
	}
	return u
}

// String renders the report as a table: per pool its kind, page size,
// pages, peak pages, outdated pages, bytes reserved / in use / padding /
// pending free, the live allocations and the largest allocation.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gpumem memory report (%s backend)\n", r.Backend)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "stream\tpool\tpage size\tpages\tpeak\toutdated\treserved\tin use\tpadding\tpending free\tallocs\tlargest\t")
	for _, s := range r.Streams {
		rows := []pool.Report{s.Pools.Persistent, s.Pools.Dedicated}
		rows = append(rows, s.Pools.Dynamic...)
		for _, p := range rows {
			if p.PagesPeak == 0 && p.Pages == 0 {
				continue
			}
			page, outdated := "-", "-"
			switch k := p.Kind.(type) {
			case pool.SlicedKind:
				page = units.Bytes(k.PageSize).String()
			case pool.AdaptiveKind:
				page = units.Bytes(k.PageSize).String()
				outdated = fmt.Sprint(k.OutdatedPages)
			case pool.ExclusiveKind:
				page = "≤" + units.Bytes(k.MaxAlloc).String()
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", s.Name, pool.KindName(p.Kind), page, p.Pages, p.PagesPeak, outdated,
				units.Bytes(p.Usage.BytesReserved), units.Bytes(p.Usage.BytesInUse), units.Bytes(p.Usage.BytesPadding), units.Bytes(p.Usage.BytesPendingFree),
				p.Usage.Allocations, units.Bytes(p.LargestAlloc))
		}
	}
	w.Flush()
	fmt.Fprintf(&b, "total: %s\n", r.Usage())
	return b.String()
}

// CaptureStats counts capture windows.
type CaptureStats struct {
	Sealed, Doomed, Abandoned uint64
	// Reused counts the buffers a recording allocated and freed again
	// whose slices went back to its later allocations (stream-ordered
	// reuse, design §10.3), ReusedBytes their requested bytes.
	Reused, ReusedBytes uint64
}

// Stats are the device's counters: every manager's plus the device's own.
type Stats struct {
	Growths        uint64
	AllocNr        uint64
	Relocation     relocation.Stats
	BytesAllocated uint64 // held from the device (storage)
	BytesReserved  uint64 // held by pools
	// BytesInUse is the requested bytes of the buffers the user has not
	// freed (an allocation once, however many clones hold it). It drops at
	// the Free of a buffer's last reference even while a queued op on
	// another stream, a mapping, a capture or a graph still uses the
	// buffer: the user holds nothing then, as when the op is on the
	// buffer's own stream. The bytes such a use holds back stay in BytesReserved and
	// BytesAllocated until it ends, and are BytesPendingFree meanwhile.
	// The snapshot's active_allocated blocks' requested sizes add up to it.
	BytesInUse uint64
	// BytesPendingFree is the effective bytes (requested size plus
	// padding) of freed buffers whose slices something still binds — a
	// queued op on another stream than the buffer's, a mapping, a capture,
	// a graph's allocation guard — so the pools cannot reuse them yet: the
	// snapshot's active_pending_free blocks. A buffer freed with ops still
	// queued on its own stream is not counted: its slice is free at once,
	// for that stream's later work to reuse in stream order.
	BytesPendingFree uint64
	StorageAllocs    uint64
	StorageDeallocs  uint64
	ReserveRetries   uint64
	// DedicatedFallbacks counts reservations served with storage of their
	// own (the dedicated pool) after every make-room stage failed: the
	// page the dynamic memory needed did not fit the device, the exact
	// size did (design §8.1).
	DedicatedFallbacks uint64
	// OwnSizePages counts pool pages taken at a reservation's own size
	// because the device refused a page of the current size (whole pages
	// only, design §5.3): the arena's own-size storage, which stays in the
	// pool for later reservations, where a dedicated fallback goes back at
	// its free.
	OwnSizePages     uint64
	ExplicitCleanups uint64
	GuardedPages     uint64            // live page and allocation guards (one per touched page of each sealed graph)
	FailedReserves   map[string]uint64 // by error kind (FailureKind)
	Captures         CaptureStats
}

// Report describes every stream's pools.
func (d *Device) Report() Report {
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	r := Report{Backend: d.backend.Name()}
	for _, s := range d.streams {
		r.Streams = append(r.Streams, StreamReport{Name: s.name, Pools: s.mem.Report()})
	}
	return r
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	st := Stats{
		ReserveRetries:     d.counters.reserveRetries,
		DedicatedFallbacks: d.counters.dedicatedFallbacks,
		ExplicitCleanups:   d.counters.explicitCleanups,
		Captures:           d.counters.captures,
		FailedReserves:     make(map[string]uint64, len(d.counters.failedReserves)),
	}
	for k, v := range d.counters.failedReserves {
		st.FailedReserves[k] = v
	}
	for _, s := range d.streams {
		ms := s.mem.Stats()
		st.Growths += ms.Growths
		st.OwnSizePages += ms.OwnSizePages
		st.AllocNr += ms.AllocNr
		st.Relocation.Add(ms.Relocation)
		st.BytesAllocated += s.mem.BytesAllocated()
		u := s.mem.Report().Usage()
		st.BytesReserved += u.BytesReserved
		st.BytesInUse += u.BytesInUse
		st.BytesPendingFree += u.BytesPendingFree
		st.StorageAllocs += s.st.allocs.Load()
		st.StorageDeallocs += s.st.deallocs.Load()
		st.GuardedPages += uint64(s.mem.Guards())
	}
	return st
}
