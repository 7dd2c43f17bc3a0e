// Granular storages of the host and the simulation, and the wrappers that
// hide or add granules. storage/granular.go says what a granular storage is
// (G1–G4); the host reserves an anonymous mmap and madvises released
// granules away (granular_host.go), Sim keeps the accounting only.

package hoststorage

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gpumem/gpumem/storage"
)

// DefaultGranule is the mapping granule of the host and sim granular
// storages when the caller passes 0: 2 MiB, the physical granularity CUDA
// reports for virtual memory management on current GPUs.
const DefaultGranule = 2 << 20

// Plain hides st's granules: the result forwards every Storage method and
// reports Granule() == 0, so pools above back whole pages as with any plain
// storage. Fault injection and observers still reach st.
func Plain(st storage.Storage) storage.Storage { return plainStorage{st} }

type plainStorage struct{ storage.Storage }

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
func Granulate(st storage.Storage, granule uint64) (storage.Storage, bool) {
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
	budget   *storage.Budget
	backing  rangeBacking // nil: sim
	notify   func(op string)
	mu       sync.RWMutex
	ranges   map[storage.ID]*granuleRange
	mapped   atomic.Uint64 // bytes of mapped granules (G1)
	reserved atomic.Uint64 // address space of reservations
}

func (t *granuleTable) init(granule uint64, b *storage.Budget, backing rangeBacking, notify func(string)) {
	t.granule, t.budget, t.backing, t.notify = granule, b, backing, notify
	t.ranges = make(map[storage.ID]*granuleRange)
}

func (t *granuleTable) granuleCount(size uint64) uint64 {
	_, n := storage.Granules(0, size, t.granule)
	return n
}

func (t *granuleTable) reserve(size uint64) (storage.Region, error) {
	if t.granule == 0 {
		return storage.Region{}, fmt.Errorf("%w: reserving %d bytes", storage.ErrNotGranular, size)
	}
	n := t.granuleCount(size)
	if n > uint64(maxHostAlloc)/t.granule {
		return storage.Region{}, &storage.OutOfMemoryError{Requested: size, Allocated: t.budget.Used(), Capacity: t.budget.Capacity()}
	}
	r := &granuleRange{size: size, mapped: make([]bool, n)}
	if t.backing != nil && n > 0 {
		b, err := t.backing.reserve(n * t.granule)
		if err != nil {
			return storage.Region{}, fmt.Errorf("%w: reserving %d bytes of address space: %v", storage.ErrOutOfMemory, n*t.granule, err)
		}
		r.bytes = b
	}
	id := storage.NewID()
	t.mu.Lock()
	t.ranges[id] = r
	t.mu.Unlock()
	t.reserved.Add(n * t.granule)
	t.notify("alloc")
	return storage.Region{ID: id, Size: size}, nil
}

func (t *granuleTable) mapGranules(id storage.ID, first, n uint64) error {
	if t.granule == 0 {
		return fmt.Errorf("%w: mapping granules of allocation %d", storage.ErrNotGranular, id)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.ranges[id]
	if !ok {
		return fmt.Errorf("%w: reservation %d is not live", storage.ErrUnknownRegion, id)
	}
	if first > uint64(len(r.mapped)) || n > uint64(len(r.mapped))-first {
		return fmt.Errorf("%w: granules [%d, %d) outside reservation %d of %d granules", storage.ErrUnknownRegion, first, storage.SatAdd(first, n), id, len(r.mapped))
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

func (t *granuleTable) unmapGranules(id storage.ID, first, n uint64) {
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
func (t *granuleTable) release(id storage.ID) bool {
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
func (t *granuleTable) lookup(r storage.Region) (rg *granuleRange, ok bool, err error) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	rg, ok = t.ranges[r.ID]
	if !ok {
		return nil, false, nil
	}
	if r.Offset > rg.size || r.Size > rg.size-r.Offset {
		return nil, true, fmt.Errorf("%w: window [%d, %d) lies outside reservation %d of %d bytes",
			storage.ErrUnknownRegion, r.Offset, storage.SatAdd(r.Offset, r.Size), r.ID, rg.size)
	}
	first, n := storage.Granules(r.Offset, r.Size, t.granule)
	for i := first; i < first+n; i++ {
		if !rg.mapped[i] {
			return nil, true, fmt.Errorf("%w: window [%d, %d) of reservation %d touches unmapped granule %d",
				storage.ErrUnknownRegion, r.Offset, r.End(), r.ID, i)
		}
	}
	return rg, true, nil
}

// MappedGranules reports which granules of reservation id are mapped (nil
// when id is not a reservation of this table). For tests and reports.
func (t *granuleTable) mappedGranules(id storage.ID) []bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.ranges[id]
	if !ok {
		return nil
	}
	return append([]bool(nil), r.mapped...)
}
