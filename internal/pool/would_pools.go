// Dry runs of the arena and the single-allocation pools (would.go).

package pool

import "github.com/gpumem/gpumem/internal/handle"

// WouldReserve is Reserve (and ReserveFor) in the view: Fit's answer, the
// current pool's held room, then allocPage's page requests (pageTries), or
// a growth (growth).
func (a *Arena) WouldReserve(v *View, size uint64) Would {
	kind, grown := a.sizing.Fit(size, a.PageSize())
	switch kind {
	case TooLarge:
		return failed(a.errTooLarge(size))
	case Grow:
		return a.wouldGrow(v, size, grown)
	}
	cur := a.Current()
	if m, ok := cur.wouldTryReserve(v, size); ok {
		return Would{Way: WouldHeld, Bytes: m}
	}
	return a.wouldAllocPage(v, cur, size)
}

// WouldTryReserve is TryReserve in the view (WouldFail with a nil Err when
// held room does not serve size).
func (a *Arena) WouldTryReserve(v *View, size uint64) Would {
	if kind, _ := a.sizing.Fit(size, a.PageSize()); kind != Fits {
		return Would{Way: WouldFail}
	}
	return a.Current().WouldTryReserve(v, size)
}

// wouldAllocPage is allocPage in the view: the same page requests, each
// asked of the dry storage.
func (a *Arena) wouldAllocPage(v *View, p *Sliced, size uint64) Would {
	var w Would
	_, refused, err := a.pageTries(v.st.Granule(), p, size, func(bytes uint64) error {
		w = p.wouldAllocSized(v, size, bytes)
		return w.Err
	})
	if err != nil {
		return Would{Way: WouldFail, Err: err, RefusedOwn: refused}
	}
	return w
}

// wouldGrow is grow in the view: the growth's sequence, a slot counted
// empty when the view's drain dropped its pool, the bytes occupied read in
// the view.
func (a *Arena) wouldGrow(v *View, size, smallest uint64) Would {
	var w Would
	p, _, err := a.growth(v.st.Granule(), size, smallest,
		func() uint64 { return a.wouldOccupied(v) },
		func(i int) bool { return a.slots[i] == nil || v.dropped[a.slots[i]] },
		func(p *Sliced) error {
			w = a.wouldAllocPage(v, p, size)
			return w.Err
		})
	if err != nil {
		return Would{Way: WouldFail, Err: err, RefusedOwn: w.RefusedOwn}
	}
	w.Way, w.PageSize = WouldGrow, p.pageSize
	return w
}

// wouldOccupied is Usage().BytesOccupied() in the view.
func (a *Arena) wouldOccupied(v *View) uint64 {
	var n uint64
	for _, p := range a.slots {
		if p == nil {
			continue
		}
		for _, pg := range p.pages {
			if v.present(pg) {
				n += v.occupied(pg)
			}
		}
	}
	return n
}

// wouldDrain is Drain in the view: the outdated pools' empty unguarded
// pages go, and a pool left with none is dropped (its slot empty).
func (a *Arena) wouldDrain(v *View) {
	for _, slot := range a.outdated {
		p := a.slots[slot]
		p.wouldReleaseEmpty(v)
		if v.pageCount(p) == 0 {
			if v.dropped == nil {
				v.dropped = map[*Sliced]bool{}
			}
			v.dropped[p] = true
		}
	}
}

// WouldCleanup is Cleanup in the view: the current pool's, the drain,
// and on an explicit one the outdated survivors' free granules.
func (a *Arena) WouldCleanup(v *View, kind CleanupKind) {
	a.Current().WouldCleanup(v, kind)
	a.wouldDrain(v)
	if kind == Explicit {
		for _, slot := range a.outdated {
			if p := a.slots[slot]; !v.dropped[p] {
				p.WouldUnmapFree(v)
			}
		}
	}
}

// WouldUnmapFree is UnmapFree in the view.
func (a *Arena) WouldUnmapFree(v *View) {
	for _, p := range a.slots {
		if p != nil && !v.dropped[p] {
			p.WouldUnmapFree(v)
		}
	}
}

// HasOutdatedIn is HasOutdated in the view: an outdated pool its drain
// did not drop.
func (a *Arena) HasOutdatedIn(v *View) bool {
	for _, slot := range a.outdated {
		if v == nil || !v.dropped[a.slots[slot]] {
			return true
		}
	}
	return false
}

// wouldPick is pick in the view: a free page of allocSize ≥ size (the
// average moves whether or not one is found; wouldAvg reads it).
func (p *Exclusive) wouldPick(v *View, size uint64) bool {
	if !p.Accept(size) {
		return false
	}
	for _, pg := range p.pages {
		if pg.allocSize >= size && v.slotPresent(&pg.slot) && v.free(&pg.s) {
			return true
		}
	}
	return false
}

// wouldAvg is the average after this reservation's TryReserve: one move
// toward size for it and one for each earlier attempt (View.Attempts).
func (p *Exclusive) wouldAvg(v *View, size uint64) float64 {
	avg := p.avg
	for range v.Attempts + 1 {
		avg = movedAvg(avg, size)
	}
	return avg
}

// WouldTryReserve is TryReserve in the view.
func (p *Exclusive) WouldTryReserve(v *View, size uint64) Would {
	if p.wouldPick(v, size) {
		return Would{Way: WouldHeld}
	}
	return Would{Way: WouldFail}
}

// WouldAlloc is Alloc in the view, after this attempt's TryReserve (the
// caller's order: held room first, then a page).
func (p *Exclusive) WouldAlloc(v *View, size uint64) Would {
	n := 0
	for _, pg := range p.pages {
		if v.slotPresent(&pg.slot) {
			n++
		}
	}
	if err := p.refuseAlloc(size, n); err != nil {
		return failed(err)
	}
	allocSize := p.pageFor(p.wouldAvg(v, size), size)
	if err := v.st.Alloc(allocSize); err != nil {
		return failed(err)
	}
	return Would{Way: WouldPage, Alloc: allocSize, Bytes: allocSize}
}

// WouldCleanup is Cleanup in the view: when an aging pass runs, the free
// pages it ages to allocAfterFree (every free page, explicit) go.
func (p *Exclusive) WouldCleanup(v *View, allocNr uint64, kind CleanupKind) {
	if !p.agesAt(allocNr, kind) {
		return
	}
	for _, pg := range p.pages {
		if v.slotPresent(&pg.slot) && v.free(&pg.s) && goesBack(aged(pg.freeCount), kind) {
			v.release(pg.s.Region.ID)
		}
	}
}

// WouldTryReserve is TryReserve in the view: a present free slot of
// exactly the effective size (PL17).
func (p *Direct) WouldTryReserve(v *View, size uint64) Would {
	_, need := padded(size, p.align)
	for _, sl := range p.slots {
		if sl != nil && sl.allocSize == need && v.slotPresent(sl) && v.free(&sl.s) {
			return Would{Way: WouldHeld}
		}
	}
	return Would{Way: WouldFail}
}

// viewed is the pool in the view: the bytes its present slots hold, how
// many there are, and the length of the list once trailing vacancies are
// trimmed.
func (p *Direct) viewed(v *View) (reserved uint64, live, n int) {
	for i, sl := range p.slots {
		if v.slotPresent(sl) {
			reserved += sl.allocSize
			live++
			n = i + 1
		}
	}
	return reserved, live, n
}

// wouldReleasable is releasable in the view.
func (v *View) wouldReleasable(sl *slot, g *handle.ErrorGraph) bool {
	return v.slotPresent(sl) && v.free(&sl.s) && (g != nil || sl.s.taint.Empty())
}

// wouldReleaseFree is releaseFree in the view: free slots go in index
// order while the bytes held and extra exceed the watermark.
func (p *Direct) wouldReleaseFree(v *View, extra uint64, g *handle.ErrorGraph) {
	reserved, _, _ := p.viewed(v)
	for _, sl := range p.slots {
		if !p.overWatermarkAt(reserved, extra) {
			break
		}
		if v.wouldReleasable(sl, g) {
			v.release(sl.s.Region.ID)
			reserved -= sl.allocSize
		}
	}
}

// WouldAllocMayRelease is AllocMayRelease in the view: the same checks
// and releases, then the slot asked of the dry storage.
func (p *Direct) WouldAllocMayRelease(v *View, size uint64, mayRelease bool, g *handle.ErrorGraph) Would {
	_, need := padded(size, p.align)
	reserved, live, n := p.viewed(v)
	anyReleasable := false
	for _, sl := range p.slots {
		if v.wouldReleasable(sl, g) {
			anyReleasable = true
			break
		}
	}
	willRelease := mayRelease && p.overWatermarkAt(reserved, need) && anyReleasable
	if !willRelease {
		if err := p.refuseIndex(live, n); err != nil {
			return failed(err)
		}
	}
	if willRelease {
		p.wouldReleaseFree(v, need, g)
	}
	if err := v.st.Alloc(need); err != nil {
		return failed(err)
	}
	return Would{Way: WouldSlot, Alloc: need, Bytes: need}
}

// WouldReclaim is Reclaim in the view.
func (p *Direct) WouldReclaim(v *View, g *handle.ErrorGraph) {
	if reserved, _, _ := p.viewed(v); p.overWatermarkAt(reserved, 0) {
		p.wouldReleaseFree(v, 0, g)
	}
}

// WouldTryReserve is TryReserve in the view: a present free slot in the
// bucket of the effective size.
func (p *Persistent) WouldTryReserve(v *View, size uint64) Would {
	for _, i := range p.sizes[p.effective(size)] {
		if sl := p.slots[i]; v.slotPresent(sl) && v.free(&sl.s) {
			return Would{Way: WouldHeld}
		}
	}
	return Would{Way: WouldFail}
}

// HasSizeIn is HasSize in the view: an explicit cleanup rebuilds the
// buckets from the slots it keeps.
func (p *Persistent) HasSizeIn(v *View, size uint64) bool {
	for _, i := range p.sizes[p.effective(size)] {
		if v.slotPresent(p.slots[i]) {
			return true
		}
	}
	return false
}

// WouldAlloc is Alloc in the view.
func (p *Persistent) WouldAlloc(v *View, size uint64) Would {
	n := 0
	for _, sl := range p.slots {
		if v.slotPresent(sl) {
			n++
		}
	}
	if err := p.refuseAlloc(size, n); err != nil {
		return failed(err)
	}
	need := p.effective(size)
	if err := v.st.Alloc(need); err != nil {
		return failed(err)
	}
	return Would{Way: WouldSlot, Alloc: need, Bytes: need}
}

// WouldCleanup is Cleanup in the view: an explicit one gives back every
// free slot (PL23).
func (p *Persistent) WouldCleanup(v *View, kind CleanupKind) {
	if kind != Explicit {
		return
	}
	for _, sl := range p.slots {
		if v.slotPresent(sl) && v.free(&sl.s) {
			v.release(sl.s.Region.ID)
		}
	}
}
