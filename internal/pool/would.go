// Dry runs: what a reservation would do, found without doing it.
//
// A caller that must know whether a reservation would succeed, and how,
// before it makes one (package gpumem's WouldFit: an autotuner or a
// scheduler asks before it allocates) asks each pool the questions its
// reservation asks, in the same order, of a View: the pools as they are,
// or as they would be once steps the caller has not run have run — the
// release of bindings whose work completed, a periodic or an explicit
// cleanup — and of a Dry storage that answers for the storage. The
// sequences that are more than one question (an arena's page requests and
// its growth) are written once and run by the reservation and the dry run
// alike (pageTries, growth); the rest asks the pools' own predicates.
//
// Nothing here changes a pool, a page, a handle or the storage: a dry
// cleanup records what it would give back in the View, which the dry
// reservation after it reads, and tells the Dry storage, which counts the
// bytes the device would have back. The pools' invariants (doc.go) hold
// before and after as they did, since no state is written.

package pool

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// Dry is the storage as a dry run sees it: what it would grant now, and
// what the steps the dry run stands for would hand back to it. It is never
// the storage itself, and calling it changes nothing anyone else sees.
type Dry interface {
	// Granule is the storage's mapping granule (0: pages backed whole).
	Granule() uint64
	// Alloc reports whether the storage would grant an allocation of size
	// bytes (a page backed whole, a slot): nil, or the error its Alloc
	// would return.
	Alloc(size uint64) error
	// Reserve is Alloc for the address space of a granular page.
	Reserve(size uint64) error
	// Map reports whether the storage would map the given granules of the
	// page whose region is id (0: a page the dry run adds), all or none,
	// and the device bytes that would take.
	Map(id storage.ID, granules []uint64) (uint64, error)
	// Dealloc notes that a step before the reservation hands allocation id
	// back; Unmap, granules [first, first+n) of it.
	Dealloc(id storage.ID)
	Unmap(id storage.ID, first, n uint64)
	// Allocated is the bytes the storage would hold from the device then:
	// what the granule-unmapping pressure rule reads.
	Allocated() uint64
}

// View is the state a dry run answers in: the pools as they are, less what
// the steps it stands for would give back (recorded by the dry cleanups),
// with the bindings those steps release counted as gone.
type View struct {
	st Dry
	// released counts, per allocation, the bindings the steps release (a
	// stream's cross-stream uses whose work completed).
	released map[*handle.Descriptor]int
	gone     map[storage.ID]bool   // allocations given back
	unmapped map[storage.ID]bitset // granules unmapped, by page
	dropped  map[*Sliced]bool      // outdated pools a drain drops
	unkept   map[*page]bool        // pages whose kept room yielded (PL37's last step)
	// Attempts is the reservations the allocation made before this one:
	// each moved the exclusive pools' averages of the sizes asked (PL11),
	// which size their next page.
	Attempts int
}

// bitset is a set of granule indices.
type bitset map[uint64]bool

// NewView returns a view over the pools as they are, with storage st, in
// which released[d] bindings of allocation d are released (nil: none).
func NewView(st Dry, released map[*handle.Descriptor]int) *View {
	return &View{st: st, released: released} // the maps are made at their first write

}

// Storage returns the view's dry storage.
func (v *View) Storage() Dry { return v.st }

// refs is the references to d once the view's releases ran.
func (v *View) refs(d *handle.Descriptor) int {
	if v == nil {
		return d.Refs()
	}
	return d.Refs() - v.released[d]
}

// free is handle.IsFree in the view: only the pool refers to the slice.
func (v *View) free(s *Slice) bool { return v.refs(s.h.Descriptor()) <= 1 }

// bound is handle.IsBound in the view: a binding holds the slice.
func (v *View) bound(s *Slice) bool { return v.refs(s.h.Descriptor()) > s.h.Descriptor().Handles() }

// present reports whether a page is still held in the view.
func (v *View) present(pg *page) bool { return v == nil || !v.gone[pg.region.ID] }

// slotPresent reports whether a slot (exclusive, direct, persistent) is
// still held in the view.
func (v *View) slotPresent(sl *slot) bool { return sl != nil && (v == nil || !v.gone[sl.s.Region.ID]) }

// mapped reports whether granule k of pg is mapped in the view.
func (v *View) mapped(pg *page, k uint64) bool {
	if !pg.mapped[k] {
		return false
	}
	return v == nil || !v.unmapped[pg.region.ID][k]
}

// release records that allocation id goes back, once.
func (v *View) release(id storage.ID) {
	if v.gone[id] {
		return
	}
	if v.gone == nil {
		v.gone = map[storage.ID]bool{}
	}
	v.gone[id] = true
	v.st.Dealloc(id)
}

// unmap records that granules [first, first+n) of pg go back.
func (v *View) unmap(pg *page, first, n uint64) {
	set := v.unmapped[pg.region.ID]
	if set == nil {
		if v.unmapped == nil {
			v.unmapped = map[storage.ID]bitset{}
		}
		set = bitset{}
		v.unmapped[pg.region.ID] = set
	}
	for k := first; k < first+n; k++ {
		set[k] = true
	}
	v.st.Unmap(pg.region.ID, first, n)
}

// pageCount is the pages of p the view holds.
func (v *View) pageCount(p *Sliced) int {
	n := 0
	for _, pg := range p.pages {
		if v.present(pg) {
			n++
		}
	}
	return n
}

// empty is page.isEmpty in the view, read from the slices.
func (v *View) empty(pg *page) bool {
	for i := range pg.slices {
		if !v.free(&pg.slices[i]) {
			return false
		}
	}
	return true
}

// occupied sums the effective sizes of the page's slices that are not
// free in the view (nil: as it is).
func (v *View) occupied(pg *page) uint64 {
	var n uint64
	for i := range pg.slices {
		if s := &pg.slices[i]; !v.free(s) {
			n += s.EffectiveSize()
		}
	}
	return n
}

// unmappedBytes is page.unmappedBytes in the view (nil: as it is).
func (v *View) unmappedBytes(pg *page) uint64 {
	var n uint64
	for k := range pg.mapped {
		if !v.mapped(pg, uint64(k)) {
			n += pg.granuleBytes(k)
		}
	}
	return n
}

// WouldWay is how a reservation would be served.
type WouldWay uint8

const (
	// WouldFail: it would not (Would.Err says why).
	WouldFail WouldWay = iota
	// WouldHeld: from room the pool already holds; no storage allocation.
	WouldHeld
	// WouldPage: on a new page of the pool (of its page size, or of the
	// reservation's own size: PL30, PL32), or a new exclusive page.
	WouldPage
	// WouldGrow: the arena grows to a larger page size (Would.PageSize),
	// its first page holding the reservation.
	WouldGrow
	// WouldSlot: a storage allocation of the reservation's own effective
	// size (a direct or persistent slot).
	WouldSlot
)

func (w WouldWay) String() string {
	switch w {
	case WouldFail:
		return "fail"
	case WouldHeld:
		return "held"
	case WouldPage:
		return "page"
	case WouldGrow:
		return "grow"
	case WouldSlot:
		return "slot"
	}
	return fmt.Sprintf("WouldWay(%d)", uint8(w))
}

// Would is what a reservation would do, as a dry run finds it.
type Would struct {
	Way WouldWay
	// Err is the error the reservation would return (Way WouldFail).
	Err error
	// Alloc is the size of the storage allocation it would add: a page, a
	// growth's first page, a slot (on granular storage a page's address
	// space); 0 from held room.
	Alloc uint64
	// Bytes is the device memory it would newly take: the allocation's
	// bytes where pages are backed whole, the granules it would map on
	// granular storage.
	Bytes uint64
	// PageSize is the pool's page size after a growth (WouldGrow).
	PageSize uint64
	// RefusedOwn is the own-size page the storage would refuse for an arena
	// reservation (Arena.RefusedOwnSize's figure, for the reservation
	// after it).
	RefusedOwn uint64
}

// OK reports whether the reservation would succeed. A held-room question
// that finds none (a TryReserve's nil) is WouldFail with a nil Err.
func (w Would) OK() bool { return w.Way != WouldFail }

// failed is the Would of a reservation that would return err.
func failed(err error) Would { return Would{Way: WouldFail, Err: err} }

// back is page.back in the view: the unmapped granules [off, off+size)
// touches, asked of the storage all or none; the device bytes they take.
func (v *View) back(pg *page, off, size uint64) (uint64, error) {
	if pg.granule == 0 || size == 0 {
		return 0, nil
	}
	first, n := storage.Granules(off, size, pg.granule)
	var want []uint64
	for k := first; k < first+n; k++ {
		if !v.mapped(pg, k) {
			want = append(want, k)
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	return v.st.Map(pg.region.ID, want)
}

// fitOn is a held reservation of need effective bytes on pg in the view:
// the free runs (adjacent free slices: coalescing merges them before the
// reservation looks) in offset order, the first that holds need taken at
// its start; on a granular page a run whose granules the storage would
// refuse for want of memory is passed over, as backFit passes a slice
// over, and any other refusal ends the page. The device bytes it maps.
//
// One case it does not follow: where coalesceFor keeps a run's first slice
// of exactly need bytes apart and the storage refuses that slice's
// granules, backFit tries the rest of the run next, and the dry run the
// next run. They differ only where the kept slice's granules are unmapped
// and the rest's are not.
//
// With keep (an arena pool carving from its tightest page, PL33) a run that
// PL37 keeps firmly from need is passed over, as the run index passes it
// over (a softly kept run serves when nothing else does, so it counts): a
// run counts as the page's open room when its size is that of the page's
// trailing free run (page.openRoom).
func (v *View) fitOn(pg *page, need uint64, keep bool) (uint64, bool) {
	var open uint64 // the page's open room in the view, when PL37 may keep it
	if keep {
		open = v.keptOpenRoom(pg)
	}
	var start, run uint64
	in := false
	for i := 0; i <= len(pg.slices); i++ {
		if i < len(pg.slices) && v.free(&pg.slices[i]) {
			s := &pg.slices[i]
			if !in {
				start, run, in = s.Region.Offset, 0, true
			}
			run += s.EffectiveSize()
			continue
		}
		if in && run >= need && !(open > 0 && pg.roomKept(run, need, run == open) == keptHard) {
			m, err := v.back(pg, start, need)
			if err == nil {
				return m, true
			}
			if !errors.Is(err, storage.ErrOutOfMemory) || storage.IsDevicePoisoned(err) {
				return 0, false
			}
		}
		in = false
	}
	return 0, false
}

// keptOpenRoom is the open room of pg in the view (its trailing free run)
// when the page keeps room for a staple size (PL37) and has not yielded
// it, else 0.
func (v *View) keptOpenRoom(pg *page) uint64 {
	if pg.keptFor == 0 || v.unkept[pg] {
		return 0
	}
	var open uint64
	for i := len(pg.slices) - 1; i >= 0 && v.free(&pg.slices[i]); i-- {
		open += pg.slices[i].EffectiveSize()
	}
	return open
}

// wouldTryReserve is TryReserve in the view (whatever its Bind): whether
// room the pool holds would serve size, and the device bytes of granules
// it would map. Whole pages: any unguarded page with a free run of need
// bytes serves (the tightest one, PL33, or the first: either way one
// does), a run PL37 keeps firmly from need not counted where the pool
// carves from its tightest page. Granular pages: first fit across pages, a page whose
// fit the storage refuses to map passed over.
func (p *Sliced) wouldTryReserve(v *View, size uint64) (uint64, bool) {
	_, need := padded(size, p.align)
	keep := p.tightest && v.pageCount(p) >= 2 // as tryReserveTightest, after the view's releases
	for _, pg := range p.pages {
		if pg.guarded() || !v.present(pg) {
			continue
		}
		if m, ok := v.fitOn(pg, need, keep && pg.granule == 0); ok {
			return m, true
		}
	}
	return 0, false
}

// WouldTryReserve is TryReserve in the view (nil Would.Err and WouldHeld
// when room the pool holds serves size; WouldFail with a nil Err when it
// does not, as TryReserve returns nil).
func (p *Sliced) WouldTryReserve(v *View, size uint64) Would {
	if m, ok := p.wouldTryReserve(v, size); ok {
		return Would{Way: WouldHeld, Bytes: m}
	}
	return Would{Way: WouldFail}
}

// WouldAlloc is Alloc in the view.
func (p *Sliced) WouldAlloc(v *View, size uint64) Would {
	return p.wouldAllocSized(v, size, p.pageSize)
}

// wouldAllocSized is allocSized in the view: the checks it makes, in
// order, then the page asked of the storage (a granular page's address
// space, then the granules its slice covers).
func (p *Sliced) wouldAllocSized(v *View, size, pageBytes uint64) Would {
	pageBytes = min(pageBytes, p.pageSize)
	_, need := padded(size, p.align)
	if need > pageBytes {
		return failed(errPageTooSmall(size, need, pageBytes))
	}
	if n := v.pageCount(p); n >= p.lim.maxPages() {
		return failed(p.errTooManyPages(n))
	}
	g := v.st.Granule()
	if g == 0 {
		if err := v.st.Alloc(pageBytes); err != nil {
			return failed(err)
		}
		return Would{Way: WouldPage, Alloc: pageBytes, Bytes: pageBytes}
	}
	if err := v.st.Reserve(pageBytes); err != nil {
		return failed(err)
	}
	var m uint64
	if need > 0 {
		first, n := storage.Granules(0, need, g)
		want := make([]uint64, 0, n)
		for k := first; k < first+n; k++ {
			want = append(want, k)
		}
		var err error
		if m, err = v.st.Map(0, want); err != nil {
			return failed(err)
		}
	}
	return Would{Way: WouldPage, Alloc: pageBytes, Bytes: m}
}

// wouldReleaseEmpty is ReleaseEmpty in the view: every present, empty,
// unguarded page goes.
func (p *Sliced) wouldReleaseEmpty(v *View) {
	for _, pg := range p.pages {
		if v.present(pg) && !pg.guarded() && v.empty(pg) {
			v.release(pg.region.ID)
		}
	}
}

// WouldUnmapFree is UnmapFree in the view: on every present, unguarded
// granular page, the mapped granules no live slice touches go.
func (p *Sliced) WouldUnmapFree(v *View) {
	for _, pg := range p.pages {
		if pg.granule == 0 || pg.guarded() || !v.present(pg) {
			continue
		}
		busy := make([]bool, len(pg.mapped))
		for i := range pg.slices {
			s := &pg.slices[i]
			if v.free(s) {
				continue
			}
			first, n := storage.Granules(s.Region.Offset, s.EffectiveSize(), pg.granule)
			for k := first; k < first+n; k++ {
				busy[k] = true
			}
		}
		for i := 0; i < len(pg.mapped); {
			if !v.mapped(pg, uint64(i)) || busy[i] {
				i++
				continue
			}
			j := i + 1
			for j < len(pg.mapped) && v.mapped(pg, uint64(j)) && !busy[j] {
				j++
			}
			v.unmap(pg, uint64(i), uint64(j-i))
			i = j
		}
	}
}

// WouldCleanup is Cleanup in the view: an explicit one releases the empty
// pages and unmaps the free granules of the others.
func (p *Sliced) WouldCleanup(v *View, kind CleanupKind) {
	if kind == Explicit {
		p.wouldReleaseEmpty(v)
		p.WouldUnmapFree(v)
	}
}

// PagesIn is Pages in a dry run's view (nil: as it is).
func (p *Sliced) PagesIn(v *View) int { return v.pageCount(p) }
