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

// StreamReport is one stream's memory: every pool it holds, by the role
// the pool plays.
type StreamReport struct {
	Name string
	// Persistent is the exact-fit pool Persistent windows use; Dedicated
	// the pool of buffers with storage of their own.
	Persistent, Dedicated PoolReport
	// Dynamic is the dynamic memory's pools, smallest first: with
	// Adaptive, the tiny pool, the small pool, the arena's current pool
	// (Kind "adaptive") and then its outdated pools, whose pages
	// relocation empties; with ExclusivePages, its buckets ascending.
	Dynamic []PoolReport
}

// PoolReport describes one pool: what it holds now and the most it held.
type PoolReport struct {
	// Kind names the pool's placement policy: "sliced" (pages of one size
	// carved into slices), "adaptive" (the arena's current pool, whose
	// page size grows), "exclusive" (one allocation per page), "direct"
	// (one storage allocation per buffer) or "persistent" (exact fit). The
	// names are stable: Report.String prints them.
	Kind string
	// PageSize is the page size of a sliced or adaptive pool; 0 for the
	// others.
	PageSize uint64
	// MaxAlloc is the largest allocation the pool serves: a sliced pool's
	// largest slice, an exclusive bucket's largest allocation; 0 for the
	// others.
	MaxAlloc uint64
	// OutdatedPages is, for the adaptive pool, the pages the arena's
	// outdated pools still hold (their own reports follow it in
	// StreamReport.Dynamic).
	OutdatedPages uint64
	Pages         uint64 // pages held now
	PagesPeak     uint64 // the most pages ever held at once
	LargestAlloc  uint64 // the largest size ever served
	Usage         Usage
}

// Usage is what a pool, a stream or the device holds: bytes reserved, in
// use, lost to padding and held back for freed buffers something still
// uses (pending free), and the number of live allocations.
//
// A buffer is in use until its last reference is freed. One freed while
// something still binds its memory (another stream's queued op, a mapping,
// a graph's guard) is pending free: the user holds nothing, yet the pool
// cannot reuse its room until the binding goes.
type Usage struct {
	Allocations  uint64 // live allocations
	BytesInUse   uint64 // their requested sizes
	BytesPadding uint64 // the padding alignment added to them
	// BytesPendingFree is the effective sizes (requested size plus
	// padding) of pending-free allocations.
	BytesPendingFree uint64
	BytesReserved    uint64 // bytes held from the storage: pages' address space
	// BytesUnmapped is the part of BytesReserved no mapped granule backs:
	// 0 on storage that backs pages whole.
	BytesUnmapped uint64
}

// BytesMapped is the reserved bytes that are backed: BytesReserved less
// BytesUnmapped. It is what the pages cost the device.
func (u Usage) BytesMapped() uint64 { return pool.Usage(u).BytesMapped() }

// BytesOccupied is the bytes allocations take from their pages: live
// ones' requested sizes and padding, and pending-free ones. The rest of
// BytesMapped is free room.
func (u Usage) BytesOccupied() uint64 { return pool.Usage(u).BytesOccupied() }

// String sums u up in a line: allocations, bytes in use, padding, pending
// free, reserved (and mapped), and the share of reserved bytes in use.
func (u Usage) String() string { return pool.Usage(u).String() }

// Usage sums the stream's pools.
func (s StreamReport) Usage() Usage {
	u := s.Persistent.Usage.internal().Combine(s.Dedicated.Usage.internal())
	for _, p := range s.Dynamic {
		u = u.Combine(p.Usage.internal())
	}
	return Usage(u)
}

// Usage sums every stream.
func (r Report) Usage() Usage {
	var u pool.Usage
	for _, s := range r.Streams {
		u = u.Combine(s.Usage().internal())
	}
	return Usage(u)
}

// internal is u as the pools count it: the same fields (the conversion
// fails to compile the day they differ).
func (u Usage) internal() pool.Usage { return pool.Usage(u) }

// streamReport is m's pools as a user reads them.
func streamReport(name string, m memory.PoolsReport) StreamReport {
	r := StreamReport{Name: name, Persistent: poolReport(m.Persistent), Dedicated: poolReport(m.Dedicated)}
	for _, p := range m.Dynamic {
		r.Dynamic = append(r.Dynamic, poolReport(p))
	}
	return r
}

// poolReport is r with its kind spelled out in fields.
func poolReport(r pool.Report) PoolReport {
	p := PoolReport{Kind: pool.KindName(r.Kind), Pages: r.Pages, PagesPeak: r.PagesPeak, LargestAlloc: r.LargestAlloc, Usage: Usage(r.Usage)}
	switch k := r.Kind.(type) {
	case pool.SlicedKind:
		p.PageSize, p.MaxAlloc = k.PageSize, k.MaxSlice
	case pool.AdaptiveKind:
		p.PageSize, p.OutdatedPages = k.PageSize, k.OutdatedPages
	case pool.ExclusiveKind:
		p.MaxAlloc = k.MaxAlloc
	}
	return p
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
		rows := append([]PoolReport{s.Persistent, s.Dedicated}, s.Dynamic...)
		for _, p := range rows {
			if p.PagesPeak == 0 && p.Pages == 0 {
				continue
			}
			page, outdated := "-", "-"
			switch p.Kind {
			case "sliced":
				page = units.Bytes(p.PageSize).String()
			case "adaptive":
				page = units.Bytes(p.PageSize).String()
				outdated = fmt.Sprint(p.OutdatedPages)
			case "exclusive":
				page = "≤" + units.Bytes(p.MaxAlloc).String()
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t\n", s.Name, p.Kind, page, p.Pages, p.PagesPeak, outdated,
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
	Relocation     RelocationStats
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
		r.Streams = append(r.Streams, streamReport(s.name, s.mem.Report()))
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
	var rel relocation.Stats
	for _, s := range d.streams {
		ms := s.mem.Stats()
		st.Growths += ms.Growths
		st.OwnSizePages += ms.OwnSizePages
		st.AllocNr += ms.AllocNr
		rel.Add(ms.Relocation)
		st.BytesAllocated += s.mem.BytesAllocated()
		u := s.mem.Report().Usage()
		st.BytesReserved += u.BytesReserved
		st.BytesInUse += u.BytesInUse
		st.BytesPendingFree += u.BytesPendingFree
		st.StorageAllocs += s.st.allocs.Load()
		st.StorageDeallocs += s.st.deallocs.Load()
		st.GuardedPages += uint64(s.mem.Guards())
	}
	st.Relocation = relocationStats(rel)
	return st
}
