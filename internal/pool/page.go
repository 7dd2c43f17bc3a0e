package pool

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// page is one storage allocation carved into slices, kept in offset order
// and tiling it exactly (PL1–PL4 in the package doc).
//
// Reservation is first fit on effective size. Comparing the stored size
// instead (an earlier design) lost the old padding bytes on each
// reuse-with-split and broke PL2; comparing the effective size keeps it
// exact.
//
// Cost: a reservation scans the page's slices once (O(slices)), and a split
// shifts the slices after the chosen one. Slices are values in one array
// (56 bytes each), so a scan touches contiguous memory.
//
// On granular storage a page also records which of its granules are mapped
// (granules.go): a reservation maps what its slice covers before it returns
// (PL6), and cleanup unmaps the granules no live slice touches (PL7).
type page struct {
	region storage.Region // the whole allocation
	slices []Slice
	align  uint64
	pool   uint8
	index  int // page index within the pool
	guards int // guarded ⇔ guards > 0
	// granule is the storage's mapping granule, 0 when the page is backed
	// whole; mapped[i] says granule i of the page is mapped (granules.go).
	granule uint64
	mapped  []bool
	// spares recycles the descriptors of the page's free slices (the
	// pool's; nil: every free slice gets a new one).
	spares *handle.Recycler

	// changed is raised (through the descriptors' free signal) whenever a
	// slice of the page may have become free since the last scan; while it
	// is down, maxFree bounds the largest free slice from above and empty
	// is exact, so reservations and cleanups skip the page without looking
	// at its slices (PL4).
	changed   handle.Signal
	maxFree   uint64
	empty     bool
	firstFree int // no slice below this index is free (while changed is down)
	// runIndex, when the pool keeps one (runs.go, PL33), lists the page's
	// free runs: listedRuns as it lists them, in offset order, up to date
	// unless runsStale (the page is queued for its next refresh); serial
	// orders the page among its pool's.
	runIndex   *runIndex
	listedRuns []uint64
	serial     uint64
	runsStale  bool
	// keptFor is the staple size whose reservation opened the page and
	// tiles it, at least two to the page (0: none): PL37 keeps the page's
	// open room for it (staple.go). Set when the page is added; cleared when
	// the page yields its room to a reservation nothing else could place
	// (Arena.YieldKeptRoom).
	keptFor uint64
}

// newPage wraps a fresh storage region as one free slice spanning it. With
// granule > 0 the region is a reservation with nothing mapped yet.
func newPage(r storage.Region, align uint64, pool uint8, index int, granule uint64, parent *handle.Signal, spares *handle.Recycler) *page {
	p := &page{region: r, align: align, pool: pool, index: index, granule: granule, spares: spares}
	p.changed.Forward(parent)
	if granule > 0 {
		_, n := storage.Granules(0, r.Size, granule)
		p.mapped = make([]bool, n)
	}
	p.slices = []Slice{{Region: r, h: p.spares.New(handle.MustLocation(pool, index, 0), &p.changed)}}
	p.maxFree, p.empty, p.firstFree = r.Size, true, 0
	return p
}

func (p *page) size() uint64 { return p.region.Size }

func (p *page) guarded() bool { return p.guards > 0 }

func (p *page) loc(i int) handle.Location { return handle.MustLocation(p.pool, p.index, i) }

// relocate rewrites the locations of slices from index i on (PL3).
func (p *page) relocate(from int) {
	for i := from; i < len(p.slices); i++ {
		p.slices[i].h.Descriptor().SetLocation(p.loc(i))
	}
}

// tryReserve carves size bytes from the first free slice at or after index
// from whose effective size holds size plus its padding, and hands it to to
// (Bind.take); nil when nothing fits. On a granular page the granules the
// slice covers are mapped first; when the storage refuses, nothing changed
// and the error is returned. The caller has checked the page is not
// guarded.
func (p *page) tryReserve(st storage.Storage, from int, size uint64, to Bind, g *handle.ErrorGraph) (*handle.Handle, error) {
	at, err := p.reserveAt(st, from, size)
	if at < 0 {
		return nil, err
	}
	return to.take(&p.slices[at], g), nil
}

// reserveAt carves size bytes from the first fitting free slice at or
// after index from and returns that slice's index, or -1 (with the
// storage's error when it refused to map).
func (p *page) reserveAt(st storage.Storage, from int, size uint64) (int, error) {
	pad, need := padded(size, p.align)
	if !p.changed.Raised() {
		if p.maxFree < need {
			return -1, nil // PL4: no free slice that large
		}
		from = max(from, p.firstFree) // PL4: nothing free before it
	}
	at, _, largest := p.fitFrom(from, need)
	if at < 0 {
		if from <= p.firstFree && !p.changed.Raised() {
			p.maxFree = largest // the scan saw every free slice
		}
		return -1, nil
	}
	at, err := p.backFit(st, at, need)
	if at < 0 {
		return -1, err
	}
	if err != nil {
		// A slice before at was passed over: the run coalesceFor kept
		// apart for this reservation may be it, so the next visit merges.
		p.changed.Raise()
	}
	p.carve(at, size, pad)
	return at, nil
}

// backFit maps the granules the need bytes from free slice at touch (PL6)
// and returns at; when the storage refuses for want of memory it passes
// over that slice, not the page, to the next free slice that holds need,
// whose granules may be mapped already (a slice freed since the page was
// last cleaned up keeps its granules): -1 when none could be backed, with
// the first refusal. A refusal that is not for want of memory (a poisoned
// device) ends the search at once. The first refusal is returned with a
// found slice too, so the caller knows one was passed over.
func (p *page) backFit(st storage.Storage, at int, need uint64) (int, error) {
	var refused error
	for at >= 0 {
		err := p.back(st, p.slices[at].Region.Offset, need)
		if err == nil {
			return at, refused
		}
		if refused == nil {
			refused = err
		}
		if !errors.Is(err, storage.ErrOutOfMemory) || storage.IsDevicePoisoned(err) {
			return -1, refused
		}
		at, _, _ = p.fitFrom(at+1, need)
	}
	return -1, refused
}

// fitFrom finds the first free slice at or after index from whose effective
// size is at least need: its index, or -1. It also returns the index of the
// first free slice it saw (len(p.slices) when none) and the largest
// effective size among the free slices it passed over.
func (p *page) fitFrom(from int, need uint64) (at, first int, largest uint64) {
	first = len(p.slices)
	for i := from; i < len(p.slices); i++ {
		s := &p.slices[i]
		if !s.h.IsFree() {
			continue
		}
		first = min(first, i)
		eff := s.EffectiveSize()
		if eff >= need {
			return i, first, largest
		}
		largest = max(largest, eff)
	}
	return -1, first, largest
}

// carve gives slice i (free, effective size ≥ size+pad) the window size with
// padding pad, splitting the rest off as a new free slice right after it.
// The caller takes the slice: a clone of its handle, or a Rebind.
func (p *page) carve(i int, size, pad uint64) {
	p.invalidate() // slice i is taken: the free runs change
	s := &p.slices[i]
	eff := s.EffectiveSize()
	need := size + pad
	s.Region.Size = size
	s.Padding = pad
	if eff > need {
		rest := Slice{
			Region: storage.Region{ID: p.region.ID, Offset: s.Region.Offset + need, Size: eff - need},
			h:      p.spares.New(p.loc(i+1), &p.changed),
		}
		p.slices = append(p.slices, Slice{})
		copy(p.slices[i+2:], p.slices[i+1:])
		p.slices[i+1] = rest
		p.relocate(i + 2)
	}
	p.empty = false
	if i == p.firstFree {
		p.firstFree = i + 1 // the slice taken was the first free one
	}
}

// coalesce merges each maximal run of ≥ 2 adjacent free slices into one free
// slice with a fresh handle. A lone free slice is left alone. It also
// refreshes maxFree and empty (PL4); a page on which nothing became free
// since its last scan has nothing to merge and is skipped.
func (p *page) coalesce(g *handle.ErrorGraph) { p.coalesceFor(g, 0, false) }

// coalesceFor is coalesce ahead of a reservation of need bytes (effective
// size; 0: none). The first run whose bytes hold need is where first fit
// will carve, and when its first slice alone has exactly need bytes that
// slice is kept apart and only the rest of the run is merged: the layout is
// the one merging and carving would give ([need][the rest, free]), without
// the merge, the split and the renumbering they cost. A free-then-alloc of
// one size, the steady state, thus moves no slice. With renew the kept slice
// gets a descriptor of the page's own, so that a reservation's clone costs
// no heap object; a reservation that binds the buffer at once (Bind.To)
// needs no clone and leaves it as it is.
func (p *page) coalesceFor(g *handle.ErrorGraph, need uint64, renew bool) {
	p.coalesceKeeping(g, need, renew)
}

// coalesceKeeping is coalesceFor, returning the index of the slice it kept
// apart from free slices after it (-1: none). A caller that then carves
// elsewhere merges the run whole (tightestPage), so no free neighbours
// stay split.
func (p *page) coalesceKeeping(g *handle.ErrorGraph, need uint64, renew bool) (kept int) {
	kept = -1
	if !p.changed.Raised() { // a plain load: most pages are clean
		return kept
	}
	p.invalidate() // a slice became free: the free runs change
	n := len(p.slices)
	// Only slices from the lowest index a release named (Signal.Lowest)
	// can have become free since the last scan, and none of them merges
	// with anything before the run it starts: the scan starts at that run,
	// and what it knew of the slices before (PL4) still holds, since a carve
	// only shrinks free room. A page with many live slices before the
	// freed one is thus not rescanned at every reservation.
	start := min(int(p.changed.Lowest()), n)
	for start > 0 && p.slices[start-1].h.IsFree() {
		start--
	}
	p.changed.Lower()
	out := start
	merged := false
	var largest uint64
	empty := true
	firstFree := -1
	claim := need > 0 // the reservation's run is not found yet
	if start > 0 {
		empty = false // slice start-1 is live
		if p.firstFree < start {
			// A free slice before start, no larger than maxFree, may hold
			// the reservation: first fit finds it, and no run is claimed.
			firstFree, largest = p.firstFree, p.maxFree
			claim = claim && p.maxFree < need
		}
	}
	for i := start; i < n; {
		if !p.slices[i].h.IsFree() {
			if out != i {
				p.slices[out] = p.slices[i]
			}
			empty = false
			out++
			i++
			continue
		}
		if firstFree < 0 {
			firstFree = out
		}
		j := i + 1
		for j < n && p.slices[j].h.IsFree() {
			j++
		}
		if claim {
			total := uint64(0)
			for k := i; k < j && total < need; k++ {
				total += p.slices[k].EffectiveSize()
			}
			if total >= need {
				claim = false
				if p.slices[i].EffectiveSize() == need {
					if out != i {
						p.slices[out] = p.slices[i]
						p.slices[i] = Slice{}
					}
					if renew {
						p.renew(out, g)
					}
					largest = max(largest, need)
					out++
					i++
					if i == j {
						continue
					}
					kept = out - 1
				}
			}
		}
		if j-i == 1 {
			largest = max(largest, p.slices[i].EffectiveSize())
			if out != i {
				p.slices[out] = p.slices[i]
			}
			out++
			i++
			continue
		}
		total := uint64(0)
		for k := i; k < j; k++ {
			total += p.slices[k].EffectiveSize()
			p.slices[k].clearTaint(g)
			p.slices[k].h.Descriptor().SignalFree(nil)
			p.slices[k].h.Release()
		}
		p.slices[out] = Slice{
			Region: storage.Region{ID: p.region.ID, Offset: p.slices[i].Region.Offset, Size: total},
			h:      p.spares.New(p.loc(out), &p.changed),
		}
		largest = max(largest, total)
		out++
		i = j
		merged = true
	}
	if firstFree < 0 {
		firstFree = out
	}
	p.maxFree, p.empty, p.firstFree = largest, empty, firstFree
	if !merged {
		return kept
	}
	clear(p.slices[out:])
	p.slices = p.slices[:out]
	p.relocate(start)
	return kept
}

// renew gives free slice i a descriptor made by the page's recycler, unless
// it already has one: a freed buffer's descriptor leaves the slice as
// merging would drop it (marks cleared, handle released; its cell goes back
// to the device's recycler once nothing keys on it). Reserving the slice
// then clones the fresh descriptor's spare handle instead of allocating
// one.
//
// The slice keeps its place: a slice moved down by an earlier merge is
// renumbered with the others once the scan ends (relocate).
func (p *page) renew(i int, g *handle.ErrorGraph) {
	s := &p.slices[i]
	if p.spares == nil || s.h.Descriptor().RecycledBy(p.spares) {
		return
	}
	s.clearTaint(g)
	s.h.Descriptor().SignalFree(nil)
	s.h.Release()
	s.h = p.spares.New(p.loc(i), &p.changed)
}

// isEmpty reports whether every slice is free.
func (p *page) isEmpty() bool {
	if !p.changed.Raised() {
		return p.empty
	}
	for i := range p.slices {
		if !p.slices[i].h.IsFree() {
			return false
		}
	}
	return true
}

// setIndex renumbers the page, rewriting every descriptor (PL3).
func (p *page) setIndex(n int) {
	if p.index == n {
		return
	}
	p.index = n
	p.relocate(0)
}

// shed clears every slice's taint and drops the slices' handles before the
// page goes back to the storage.
func (p *page) shed(g *handle.ErrorGraph) {
	if p.runIndex != nil {
		p.runIndex.drop(p)
	}
	for i := range p.slices {
		p.slices[i].clearTaint(g)
		p.slices[i].h.Descriptor().SignalFree(nil) // the page is going: nothing to tell it
		p.slices[i].h.Release()
	}
	p.slices = nil
}

// slice returns slice i or nil.
func (p *page) slice(i uint32) *Slice {
	if int64(i) >= int64(len(p.slices)) {
		return nil
	}
	return &p.slices[i]
}

// usage sums the page's slices (Usage.addSlice).
func (p *page) usage() Usage {
	u := Usage{BytesReserved: p.size(), BytesUnmapped: p.unmappedBytes()}
	for i := range p.slices {
		u.addSlice(&p.slices[i])
	}
	return u
}

// check verifies PL1–PL4 and PL6; it panics with the page's layout when
// broken. Tests and invariant builds call it.
func (p *page) check() {
	off := p.region.Offset
	for i := range p.slices {
		s := &p.slices[i]
		if s.Region.Offset != off || s.Region.ID != p.region.ID {
			panic(fmt.Sprintf("pool: page %d slice %d at offset %d, want %d (PL1)", p.index, i, s.Region.Offset, off))
		}
		if got := s.h.Location(); got != p.loc(i) {
			panic(fmt.Sprintf("pool: page %d slice %d carries location %v, want %v (PL3)", p.index, i, got, p.loc(i)))
		}
		off += s.EffectiveSize()
	}
	if off-p.region.Offset != p.size() {
		panic(fmt.Sprintf("pool: page %d slices sum to %d bytes, page holds %d (PL2)", p.index, off-p.region.Offset, p.size()))
	}
	if msg := p.checkMapped(); msg != "" {
		panic(msg)
	}
	if k := p.keptFor; k != 0 && (p.granule > 0 || p.size()%k != 0 || p.size()/k < 2) {
		panic(fmt.Sprintf("pool: page %d of %d bytes (granule %d) keeps its room for %d-byte reservations, which do not tile it at least twice on whole pages (PL37)", p.index, p.size(), p.granule, k))
	}
	if !p.changed.Raised() {
		var largest uint64
		empty := true
		firstFree := len(p.slices)
		for i := range p.slices {
			if p.slices[i].h.IsFree() {
				largest = max(largest, p.slices[i].EffectiveSize())
				firstFree = min(firstFree, i)
			} else {
				empty = false
			}
		}
		if firstFree < p.firstFree {
			panic(fmt.Sprintf("pool: page %d unchanged but slice %d is free, below the first-free bound %d (PL4)", p.index, firstFree, p.firstFree))
		}
		if largest > p.maxFree || empty != p.empty {
			panic(fmt.Sprintf("pool: page %d unchanged but holds a %d-byte free slice (bound %d) and empty=%v (cached %v) (PL4)", p.index, largest, p.maxFree, empty, p.empty))
		}
	}
}
