// Granular storage: pages whose address range is reserved up front and backed
// in granules on demand.
//
// A plain Storage backs every byte of an allocation from Alloc to Dealloc. A
// page sized to the largest allocation then pays for the holes between its
// live slices. A Granular storage splits the two: Reserve takes address space
// for a page and backs none of it; Map backs whole granules of it (2 MiB by
// default: the driver's usual physical granularity) and Unmap gives them back.
// The page keeps its address throughout, so its slices' addresses never
// change; only the bytes no live slice holds stop costing memory.
//
//	(G1) BytesAllocated counts mapped granules (a whole granule each, even the
//	     partial last granule of a range: the device backs whole granules)
//	     plus plain allocations; the Budget charges exactly that. Reserved
//	     address space is BytesReserved and takes no budget.
//	(G2) Map is all or nothing: on error no granule of the call is mapped and
//	     nothing else changed (S3).
//	(G3) a granule mapped again after Unmap reads as zero; Resolve refuses a
//	     window that touches an unmapped granule, so a stale address fails
//	     loudly instead of reading memory that is not there.
//	(G4) Alloc on a Granular storage is a plain, fully backed allocation; only
//	     Reserve makes a range that maps granules.
//
// A storage that implements the interface may still decline at run time
// (Granule() == 0: an unsupported OS, an alignment the mapping cannot honour,
// or a wrapper hiding it); callers then use it as a plain Storage. GranuleOf
// folds both checks.
//
// The cuda backend implements it with cuMemAddressReserve (Reserve),
// cuMemCreate + cuMemMap + cuMemSetAccess per granule (Map: one physical
// allocation per granule, so any granule can be unmapped alone), cuMemUnmap +
// cuMemRelease (Unmap) and cuMemAddressFree after unmapping the rest
// (Dealloc). The host backend (granular_host*.go) reserves an anonymous mmap
// and madvises released granules away; Sim keeps the accounting only.

package storage

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// DefaultGranule is the mapping granule of the host and sim granular
// storages when the caller passes 0: 2 MiB, the physical granularity CUDA
// reports for virtual memory management on current GPUs.
const DefaultGranule = 2 << 20

// ErrNotGranular is returned by Reserve, Map and Unmap of a storage that
// cannot map granules (Granule() == 0). Use the storage as a plain Storage.
var ErrNotGranular = errors.New("storage: storage does not map granules")

// Granular is a Storage that can reserve a page's address range without
// backing it and back it granule by granule. Every method is safe for
// concurrent use; the pools above call them under the device lock.
type Granular interface {
	Storage
	// Granule is the mapping unit in bytes; 0 means this storage maps no
	// granules (treat it as a plain Storage). It never changes.
	Granule() uint64
	// Reserve takes address space for size bytes and backs none of it. The
	// region (Offset 0) spans granules [0, ceil(size/Granule)). It takes no
	// budget. Dealloc releases it with whatever is still mapped. On error
	// nothing changed.
	Reserve(size uint64) (Region, error)
	// Map backs granules [first, first+n) of reservation id, each unmapped
	// before the call. On error (wrapping ErrOutOfMemory when the budget or
	// the device refuses, ErrUnknownRegion for a bad range) nothing is
	// mapped (G2).
	Map(id ID, first, n uint64) error
	// Unmap gives back the backing of granules [first, first+n) of
	// reservation id, each mapped before the call; they read as zero when
	// mapped again (G3). An unknown reservation is ignored.
	Unmap(id ID, first, n uint64)
	// BytesReserved is the address space held: reservations (rounded up to
	// the granule) plus plain allocations.
	BytesReserved() uint64
}

// GranuleOf returns st's mapping granule, or 0 when st maps no granules.
func GranuleOf(st Storage) uint64 {
	if g, ok := st.(Granular); ok {
		return g.Granule()
	}
	return 0
}

// Granules returns the granule range [first, first+n) that the window
// [off, off+size) touches, for a granule of g bytes; n is 0 for an empty
// window.
func Granules(off, size, g uint64) (first, n uint64) {
	if size == 0 || g == 0 {
		return off / max(g, 1), 0
	}
	first = off / g
	last := (SatAdd(off, size) - 1) / g
	return first, last - first + 1
}

// Plain hides st's granules: the result forwards every Storage method and
// reports Granule() == 0, so pools above back whole pages as with any plain
// storage. Fault injection and observers still reach st.
func Plain(st Storage) Storage { return plainStorage{st} }

type plainStorage struct{ Storage }

func (plainStorage) Granule() uint64 { return 0 }

func (p plainStorage) CheckCopy() error {
	if f, ok := p.Storage.(FaultInjector); ok {
		return f.CheckCopy()
	}
	return nil
}

func (p plainStorage) CheckWait() error {
	if f, ok := p.Storage.(FaultInjector); ok {
		return f.CheckWait()
	}
	return nil
}

func (p plainStorage) SetObserver(fn Observer) {
	if o, ok := p.Storage.(Observable); ok {
		o.SetObserver(fn)
	}
}

// Granulate returns a granular storage in place of a fresh plain Host or Sim
// (same alignment, same budget) with the given granule (0 = DefaultGranule),
// and true; any other storage comes back unchanged with false. st must hold
// no allocation: the result does not take over what st holds.
func Granulate(st Storage, granule uint64) (Storage, bool) {
	switch s := st.(type) {
	case *Host:
		return NewGranularHost(s.t.align, granule, s.t.budget), true
	case *Sim:
		return NewGranularSim(s.t.align, granule, s.t.budget), true
	}
	return st, false
}

// granuleRange is one reservation: its size, which granules are mapped, and
// (host) the reserved bytes.
type granuleRange struct {
	size   uint64
	mapped []bool
	bytes  []byte // host only: the whole reserved range
}

// rangeBacking is what differs between host and sim ranges: how address
// space is taken and given back, and how a granule's bytes are discarded.
type rangeBacking interface {
	reserve(size uint64) ([]byte, error)
	discard(b []byte) error
	release(b []byte) error
}

// granuleTable is the bookkeeping GranularHost and GranularSim share:
// reservations by ID, mapped and reserved byte counts, the budget.
type granuleTable struct {
	granule  uint64
	budget   *Budget
	backing  rangeBacking // nil: sim
	notify   func(op string)
	mu       sync.RWMutex
	ranges   map[ID]*granuleRange
	mapped   atomic.Uint64 // bytes of mapped granules (G1)
	reserved atomic.Uint64 // address space of reservations
}

func (t *granuleTable) init(granule uint64, b *Budget, backing rangeBacking, notify func(string)) {
	t.granule, t.budget, t.backing, t.notify = granule, b, backing, notify
	t.ranges = make(map[ID]*granuleRange)
}

func (t *granuleTable) granuleCount(size uint64) uint64 {
	_, n := Granules(0, size, t.granule)
	return n
}

func (t *granuleTable) reserve(size uint64) (Region, error) {
	if t.granule == 0 {
		return Region{}, fmt.Errorf("%w: reserving %d bytes", ErrNotGranular, size)
	}
	n := t.granuleCount(size)
	if n > uint64(maxHostAlloc)/t.granule {
		return Region{}, &OutOfMemoryError{Requested: size, Allocated: t.budget.Used(), Capacity: t.budget.Capacity()}
	}
	r := &granuleRange{size: size, mapped: make([]bool, n)}
	if t.backing != nil && n > 0 {
		b, err := t.backing.reserve(n * t.granule)
		if err != nil {
			return Region{}, fmt.Errorf("%w: reserving %d bytes of address space: %v", ErrOutOfMemory, n*t.granule, err)
		}
		r.bytes = b
	}
	id := newID()
	t.mu.Lock()
	t.ranges[id] = r
	t.mu.Unlock()
	t.reserved.Add(n * t.granule)
	t.notify("alloc")
	return Region{ID: id, Size: size}, nil
}

func (t *granuleTable) mapGranules(id ID, first, n uint64) error {
	if t.granule == 0 {
		return fmt.Errorf("%w: mapping granules of allocation %d", ErrNotGranular, id)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.ranges[id]
	if !ok {
		return fmt.Errorf("%w: reservation %d is not live", ErrUnknownRegion, id)
	}
	if first > uint64(len(r.mapped)) || n > uint64(len(r.mapped))-first {
		return fmt.Errorf("%w: granules [%d, %d) outside reservation %d of %d granules", ErrUnknownRegion, first, SatAdd(first, n), id, len(r.mapped))
	}
	for i := first; i < first+n; i++ {
		if r.mapped[i] {
			panic(fmt.Sprintf("storage: granule %d of reservation %d mapped twice", i, id))
		}
	}
	if err := t.budget.Take(n * t.granule); err != nil {
		return fmt.Errorf("mapping %d granules of reservation %d: %w", n, id, err)
	}
	for i := first; i < first+n; i++ {
		r.mapped[i] = true
	}
	t.mapped.Add(n * t.granule)
	return nil
}

func (t *granuleTable) unmapGranules(id ID, first, n uint64) {
	if t.granule == 0 || n == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.ranges[id]
	if !ok {
		return
	}
	if first > uint64(len(r.mapped)) || n > uint64(len(r.mapped))-first {
		panic(fmt.Sprintf("storage: unmapping granules [%d, %d) outside reservation %d of %d granules", first, first+n, id, len(r.mapped)))
	}
	for i := first; i < first+n; i++ {
		if !r.mapped[i] {
			panic(fmt.Sprintf("storage: granule %d of reservation %d unmapped while not mapped", i, id))
		}
		r.mapped[i] = false
	}
	if t.backing != nil {
		if err := t.backing.discard(r.bytes[first*t.granule : (first+n)*t.granule]); err != nil {
			panic(fmt.Sprintf("storage: discarding granules [%d, %d) of reservation %d: %v", first, first+n, id, err))
		}
	}
	t.mapped.Add(^(n*t.granule - 1))
	t.budget.Give(n * t.granule)
}

// release drops a reservation with what it maps; false when id is not one.
func (t *granuleTable) release(id ID) bool {
	t.mu.Lock()
	r, ok := t.ranges[id]
	if ok {
		delete(t.ranges, id)
	}
	t.mu.Unlock()
	if !ok {
		return false
	}
	var mapped uint64
	for _, m := range r.mapped {
		if m {
			mapped += t.granule
		}
	}
	if mapped > 0 {
		t.mapped.Add(^(mapped - 1))
		t.budget.Give(mapped)
	}
	t.reserved.Add(^(uint64(len(r.mapped))*t.granule - 1))
	if t.backing != nil && r.bytes != nil {
		if err := t.backing.release(r.bytes); err != nil {
			panic(fmt.Sprintf("storage: releasing reservation %d: %v", id, err))
		}
	}
	t.notify("dealloc")
	return true
}

// lookup returns the reservation holding r, checking the window lies inside
// it and touches only mapped granules (G3); ok is false when r.ID is not a
// reservation of this table.
func (t *granuleTable) lookup(r Region) (rg *granuleRange, ok bool, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	rg, ok = t.ranges[r.ID]
	if !ok {
		return nil, false, nil
	}
	if r.Offset > rg.size || r.Size > rg.size-r.Offset {
		return nil, true, fmt.Errorf("%w: window [%d, %d) lies outside reservation %d of %d bytes",
			ErrUnknownRegion, r.Offset, SatAdd(r.Offset, r.Size), r.ID, rg.size)
	}
	first, n := Granules(r.Offset, r.Size, t.granule)
	for i := first; i < first+n; i++ {
		if !rg.mapped[i] {
			return nil, true, fmt.Errorf("%w: window [%d, %d) of reservation %d touches unmapped granule %d",
				ErrUnknownRegion, r.Offset, r.End(), r.ID, i)
		}
	}
	return rg, true, nil
}

// MappedGranules reports which granules of reservation id are mapped (nil
// when id is not a reservation of this table). For tests and reports.
func (t *granuleTable) mappedGranules(id ID) []bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.ranges[id]
	if !ok {
		return nil
	}
	return append([]bool(nil), r.mapped...)
}
