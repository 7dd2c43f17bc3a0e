package pool

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// DedicatedIndex is the pool index of the manager's dedicated (direct) pool.
const DedicatedIndex uint8 = 254

// Direct is a pool of dedicated allocations (design §4.4): one storage
// allocation per buffer, exact-size reuse only, released as soon as a
// watermark asks (PL16–PL20 in the package doc).
//
// The manager's dedicated pool (index DedicatedIndex) serves buffers that
// must neither stay reserved nor shape the sizes of the other pools. Each
// allocation is a slot (PL8–PL10) of exactly size + padding(size) bytes,
// held in an indexed list with tombstones. Nothing is ever renumbered, so a
// direct pool never rewrites a descriptor. With watermark 0, every free
// slot goes before a new allocation.
//
// Costs: TryReserve, Reclaim and the release in Alloc scan the list once
// (O(slots)); finding the lowest vacancy is another O(slots) scan. Dedicated
// buffers are few and large, so a linear list beats a free-index heap.
type Direct struct {
	align     uint64
	index     uint8
	reclaimAt *uint64 // watermark (PL18); nil: Alloc never releases
	lim       Limits
	slots     []*slot // nil entries are vacant indices (PL16)
	live      int     // non-nil entries
	reserved  uint64  // PL17
	pagesPeak uint64
	largest   uint64
}

var _ Pool = (*Direct)(nil)

// NewDirect returns an empty direct pool. reclaimAt, when not nil, is the
// watermark (in bytes held) above which Alloc and Reclaim give free slots
// back; it is read on every call, so the caller may change it. An align of
// 0 means storage.DefaultAlignment.
func NewDirect(align uint64, index uint8, reclaimAt *uint64, lim Limits) *Direct {
	if align == 0 {
		align = storage.DefaultAlignment
	}
	return &Direct{align: align, index: index, reclaimAt: reclaimAt, lim: lim}
}

// Index implements Pool.
func (p *Direct) Index() uint8 { return p.index }

// Pages is the number of allocations held (vacant indices excluded).
func (p *Direct) Pages() int { return p.live }

// Accept implements Pool: a direct pool serves every size.
func (p *Direct) Accept(uint64) bool { return true }

// TryReserve implements Pool: the lowest-index free slot whose effective
// size is exactly size + padding(size) (PL17), or nil.
func (p *Direct) TryReserve(_ storage.Storage, size uint64, g *handle.ErrorGraph, to Bind) *handle.Handle {
	_, need := padded(size, p.align)
	for _, sl := range p.slots {
		if sl == nil || sl.allocSize != need || !sl.free() {
			continue
		}
		p.largest = max(p.largest, size)
		return sl.reserve(size, p.align, to, g)
	}
	return nil
}

// Alloc implements Pool: AllocMayRelease with mayRelease = true and no
// error graph. Pool.Alloc carries no graph, so a free slot whose bytes carry
// failure marks cannot have them cleared here: it is kept (PL20) and goes at
// the next Reclaim or Cleanup. The manager calls AllocMayRelease.
func (p *Direct) Alloc(st storage.Storage, size uint64) (*handle.Handle, error) {
	return p.AllocMayRelease(st, size, true, nil)
}

// AllocMayRelease allocates exactly size + padding(size) bytes for size
// into the lowest vacant index, or appends (PL16). When mayRelease is set and
// the pool has a watermark, free slots go back first, in index order, while
// reserved + the new size exceeds it (PL18); the manager passes false under
// AddOnly, when nothing may be released.
//
// It returns handle.ErrIndexOverflow, changing nothing, when no index would
// be vacant and the list already holds as many as Limits allow. On a storage
// refusal the error is returned and no allocation is added; free slots
// released for the watermark stay released (they were free, and the
// watermark asked for them). Released slots lose their marks in g.
func (p *Direct) AllocMayRelease(st storage.Storage, size uint64, mayRelease bool, g *handle.ErrorGraph) (*handle.Handle, error) {
	_, need := padded(size, p.align)
	willRelease := mayRelease && p.overWatermark(need) && p.anyReleasable(g)
	if !willRelease {
		if err := p.refuseIndex(p.live, len(p.slots)); err != nil {
			return nil, err
		}
	}
	if willRelease {
		p.releaseFree(st, need, g)
	}
	i := p.lowestVacancy()
	sl, err := newSlot(st, need, size, p.align, p.index, i)
	if err != nil {
		return nil, err
	}
	if i == len(p.slots) {
		p.slots = append(p.slots, sl)
	} else {
		p.slots[i] = sl
	}
	p.live++
	p.reserved += need
	p.pagesPeak = max(p.pagesPeak, uint64(p.live))
	p.largest = max(p.largest, size)
	return sl.s.h.Clone(), nil
}

// Reclaim gives back free slots in index order while the bytes held exceed
// the watermark (PL18 with no new allocation) and reports whether anything
// went. Without a watermark it does nothing. The caller flushes the storage
// when it returns true.
func (p *Direct) Reclaim(st storage.Storage, g *handle.ErrorGraph) bool {
	if !p.overWatermark(0) {
		return false
	}
	return p.releaseFree(st, 0, g) > 0
}

// Cleanup implements Pool: Periodic does nothing (the manager calls
// Reclaim), Explicit gives back every free slot. Indices do not change (PL16).
func (p *Direct) Cleanup(st storage.Storage, _ uint64, kind CleanupKind, g *handle.ErrorGraph) {
	if kind != Explicit {
		return
	}
	for i, sl := range p.slots {
		if releasable(sl, g) {
			p.vacate(i, st, g)
		}
	}
	p.trim()
}

// refuseIndex is AllocMayRelease's refusal when it releases nothing and
// the pool holds live slots in a list of n indices: no vacancy, and as many
// as Limits allow.
func (p *Direct) refuseIndex(live, n int) error {
	if live == n && n >= p.lim.maxPages() {
		return fmt.Errorf("%w: direct pool %d already holds %d allocations, the most a location can index here", handle.ErrIndexOverflow, p.index, n)
	}
	return nil
}

// overWatermark reports whether holding extra more bytes would exceed the
// watermark; false without one.
func (p *Direct) overWatermark(extra uint64) bool { return p.overWatermarkAt(p.reserved, extra) }

// overWatermarkAt is overWatermark for a pool holding reserved bytes.
func (p *Direct) overWatermarkAt(reserved, extra uint64) bool {
	return p.reclaimAt != nil && storage.SatAdd(reserved, extra) > *p.reclaimAt
}

// releasable reports whether slot sl may go now: free and, without a
// graph to clear them in, carrying no failure marks (PL20).
func releasable(sl *slot, g *handle.ErrorGraph) bool {
	return sl != nil && sl.free() && (g != nil || sl.s.taint.Empty())
}

func (p *Direct) anyReleasable(g *handle.ErrorGraph) bool {
	for _, sl := range p.slots {
		if releasable(sl, g) {
			return true
		}
	}
	return false
}

// releaseFree gives back free slots in index order while reserved + extra
// exceeds the watermark (PL18), and returns how many went.
func (p *Direct) releaseFree(st storage.Storage, extra uint64, g *handle.ErrorGraph) int {
	n := 0
	for i, sl := range p.slots {
		if !p.overWatermark(extra) {
			break
		}
		if releasable(sl, g) {
			p.vacate(i, st, g)
			n++
		}
	}
	p.trim()
	return n
}

// vacate releases slot i and leaves its index vacant (PL16).
func (p *Direct) vacate(i int, st storage.Storage, g *handle.ErrorGraph) {
	sl := p.slots[i]
	p.reserved -= sl.allocSize
	p.live--
	sl.release(st, g)
	p.slots[i] = nil
}

// trim drops trailing vacancies.
func (p *Direct) trim() {
	n := len(p.slots)
	for n > 0 && p.slots[n-1] == nil {
		n--
	}
	clear(p.slots[n:])
	p.slots = p.slots[:n]
}

// lowestVacancy returns the lowest vacant index, or len(slots) to append.
func (p *Direct) lowestVacancy() int {
	if p.live == len(p.slots) {
		return len(p.slots)
	}
	for i, sl := range p.slots {
		if sl == nil {
			return i
		}
	}
	return len(p.slots)
}

// Slice implements Pool; a vacant index has no slice.
func (p *Direct) Slice(loc handle.Location) *Slice {
	if sl := slotAt(p.slots, p.index, loc); sl != nil {
		return &sl.s
	}
	return nil
}

// Guard implements Pool: an allocation guard on the slot at loc (PL19).
func (p *Direct) Guard(loc handle.Location) (*PageGuard, bool) {
	sl := slotAt(p.slots, p.index, loc)
	if sl == nil {
		return nil, false
	}
	return sl.guard(), true
}

// Usage sums every slot: reserved is Σ allocSize (PL17).
func (p *Direct) Usage() Usage {
	var u Usage
	for _, sl := range p.slots {
		if sl != nil {
			sl.addUsage(&u)
		}
	}
	return u
}

// Report implements Pool.
func (p *Direct) Report() Report {
	return Report{
		Kind:         DirectKind{},
		Usage:        p.Usage(),
		Pages:        uint64(p.live),
		PagesPeak:    p.pagesPeak,
		LargestAlloc: p.largest,
	}
}

// Check verifies PL8, PL9, PL16 and PL17 and panics when one is broken.
// Tests and invariant builds call it.
func (p *Direct) Check() {
	live, reserved := 0, uint64(0)
	for i, sl := range p.slots {
		if sl == nil {
			continue
		}
		if msg := checkSlot(sl, p.index, i); msg != "" {
			panic(fmt.Sprintf("pool: direct pool %d slot %d %s", p.index, i, msg))
		}
		if sl.s.EffectiveSize() != sl.allocSize {
			panic(fmt.Sprintf("pool: direct pool %d slot %d serves %d bytes of a %d-byte allocation (PL17)", p.index, i, sl.s.EffectiveSize(), sl.allocSize))
		}
		live++
		reserved += sl.allocSize
	}
	if len(p.slots) > 0 && p.slots[len(p.slots)-1] == nil {
		panic(fmt.Sprintf("pool: direct pool %d keeps a trailing vacancy (PL16)", p.index))
	}
	if live != p.live || reserved != p.reserved {
		panic(fmt.Sprintf("pool: direct pool %d counts %d slots and %d bytes, holds %d and %d (PL17)", p.index, p.live, p.reserved, live, reserved))
	}
}
