package pool

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// PersistentIndex is the pool index of the persistent pool.
const PersistentIndex uint8 = 255

// Persistent is the exact-fit pool for weights and caches (design §4.5;
// PL21–PL24 in the package doc).
//
// Data that is likely never freed (model weights, long-lived caches) gets
// one storage allocation each, of exactly its effective size, so nothing is
// wasted on slack and nothing fragments. Each allocation is a slot
// (PL8–PL10) at (PersistentIndex, i, 0). Because TryReserve and Alloc key by
// effective size, a freed slot is reused by any size with the same
// effective size (40 B at alignment 32 reuses a 64-byte slot) and by no
// other. Periodic cleanup gives nothing back: a training loop frees and
// re-reserves the same sizes every step, and giving them back each time
// would cost a device allocation per step.
//
// Costs: TryReserve scans one bucket (O(slots of that size)); Alloc is O(1)
// amortised; an Explicit cleanup is O(slots) plus one map rebuild.
type Persistent struct {
	maxAlloc  uint64
	align     uint64
	lim       Limits
	slots     []*slot
	sizes     map[uint64][]int // PL22
	pagesPeak uint64
	largest   uint64
}

var _ Pool = (*Persistent)(nil)

// NewPersistent returns an empty persistent pool serving sizes up to
// maxAlloc (the device's max page size). An align of 0 means
// storage.DefaultAlignment.
func NewPersistent(maxAlloc, align uint64, lim Limits) *Persistent {
	if align == 0 {
		align = storage.DefaultAlignment
	}
	return &Persistent{maxAlloc: maxAlloc, align: align, lim: lim, sizes: make(map[uint64][]int)}
}

// Index implements Pool: always PersistentIndex.
func (p *Persistent) Index() uint8 { return PersistentIndex }

// Pages is the number of allocations held, free ones included (PL23).
func (p *Persistent) Pages() int { return len(p.slots) }

// Accept implements Pool: size ≤ maxAlloc.
func (p *Persistent) Accept(size uint64) bool { return size <= p.maxAlloc }

// effective is size plus its padding: the key of PL22.
func (p *Persistent) effective(size uint64) uint64 {
	_, need := padded(size, p.align)
	return need
}

// HasSize reports whether a bucket exists for the effective size of size:
// whether the pool has ever (since the last Explicit cleanup) held an
// allocation a reservation of size could reuse.
func (p *Persistent) HasSize(size uint64) bool {
	_, ok := p.sizes[p.effective(size)]
	return ok
}

// TryReserve implements Pool: the first free slot in the bucket of
// size + padding(size) (PL22), or nil.
func (p *Persistent) TryReserve(_ storage.Storage, size uint64, g *handle.ErrorGraph, to Bind) *handle.Handle {
	for _, i := range p.sizes[p.effective(size)] {
		sl := p.slots[i]
		if !sl.free() {
			continue
		}
		p.largest = max(p.largest, size)
		return sl.reserve(size, p.align, to, g)
	}
	return nil
}

// Alloc implements Pool: one storage allocation of exactly size +
// padding(size) bytes, appended and indexed. It returns ErrBufferTooBig
// above maxAlloc and handle.ErrIndexOverflow when the pool holds as many
// allocations as a location (or Limits) can index; on any error the pool is
// unchanged.
func (p *Persistent) Alloc(st storage.Storage, size uint64) (*handle.Handle, error) {
	n := len(p.slots)
	if err := p.refuseAlloc(size, n); err != nil {
		return nil, err
	}
	need := p.effective(size)
	sl, err := newSlot(st, need, size, p.align, PersistentIndex, n)
	if err != nil {
		return nil, err
	}
	p.slots = append(p.slots, sl)
	p.sizes[need] = append(p.sizes[need], n)
	p.pagesPeak = max(p.pagesPeak, uint64(len(p.slots)))
	p.largest = max(p.largest, size)
	return sl.s.h.Clone(), nil
}

// refuseAlloc is Alloc's refusal of size when the pool holds n slots: above
// maxAlloc, or as many as a location (or Limits) can index.
func (p *Persistent) refuseAlloc(size uint64, n int) error {
	if size > p.maxAlloc {
		return fmt.Errorf("%w: %d bytes exceed the persistent pool's %d-byte largest allocation", ErrBufferTooBig, size, p.maxAlloc)
	}
	if n >= p.lim.maxPages() {
		return fmt.Errorf("%w: persistent pool already holds %d allocations, the most a location can index here", handle.ErrIndexOverflow, n)
	}
	return nil
}

// Cleanup implements Pool (PL23): Periodic does nothing; Explicit gives back
// every free slot (marks cleared in g), renumbers the live ones, rebuilds
// the size index and flushes the storage.
func (p *Persistent) Cleanup(st storage.Storage, _ uint64, kind CleanupKind, g *handle.ErrorGraph) {
	if kind != Explicit {
		return
	}
	p.slots, _, _ = sweep(p.slots, PersistentIndex, st, g, (*slot).free)
	clear(p.sizes)
	for i, sl := range p.slots {
		p.sizes[sl.allocSize] = append(p.sizes[sl.allocSize], i)
	}
	st.Flush()
}

// Slice implements Pool.
func (p *Persistent) Slice(loc handle.Location) *Slice {
	if sl := slotAt(p.slots, PersistentIndex, loc); sl != nil {
		return &sl.s
	}
	return nil
}

// Guard implements Pool: an allocation guard on the slot at loc (PL24).
func (p *Persistent) Guard(loc handle.Location) (*PageGuard, bool) {
	sl := slotAt(p.slots, PersistentIndex, loc)
	if sl == nil {
		return nil, false
	}
	return sl.guard(), true
}

// Usage sums every slot: reserved is Σ allocSize, free slots included (PL23).
func (p *Persistent) Usage() Usage {
	var u Usage
	for _, sl := range p.slots {
		sl.addUsage(&u)
	}
	return u
}

// Report implements Pool.
func (p *Persistent) Report() Report {
	return Report{
		Kind:         PersistentKind{},
		Usage:        p.Usage(),
		Pages:        uint64(len(p.slots)),
		PagesPeak:    p.pagesPeak,
		LargestAlloc: p.largest,
	}
}

// Check verifies PL8, PL9 and PL22 and panics when one is broken. Tests and
// invariant builds call it.
func (p *Persistent) Check() {
	indexed := 0
	for size, idx := range p.sizes {
		for k, i := range idx {
			if i < 0 || i >= len(p.slots) || p.slots[i].allocSize != size || (k > 0 && idx[k-1] >= i) {
				panic(fmt.Sprintf("pool: persistent bucket %d lists slot %d out of place (PL22)", size, i))
			}
		}
		indexed += len(idx)
	}
	if indexed != len(p.slots) {
		panic(fmt.Sprintf("pool: persistent index lists %d slots, the pool holds %d (PL22)", indexed, len(p.slots)))
	}
	for i, sl := range p.slots {
		if msg := checkSlot(sl, PersistentIndex, i); msg != "" {
			panic(fmt.Sprintf("pool: persistent slot %d %s", i, msg))
		}
		if sl.s.EffectiveSize() != sl.allocSize {
			panic(fmt.Sprintf("pool: persistent slot %d serves %d bytes of a %d-byte allocation (PL22)", i, sl.s.EffectiveSize(), sl.allocSize))
		}
	}
}
