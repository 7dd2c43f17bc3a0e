package hoststorage

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gpumem/gpumem/storage"
)

// Observer is told of every Alloc and Dealloc a storage performs ("alloc",
// "dealloc"). The host software graph uses it to imitate the driver: a storage
// call made for a recording stream invalidates the capture.
type Observer func(op string)

// Observable is a storage that reports its calls to an Observer (Host, Sim
// and the wrappers around them); a device installs its queue's watcher
// through it. SetObserver(nil) removes the observer.
type Observable interface {
	SetObserver(Observer)
}

// table is the bookkeeping Host and Sim share: live allocations by ID, their
// total, the budget and the observer.
type table[E any] struct {
	mu        sync.RWMutex
	live      map[storage.ID]E
	sizes     map[storage.ID]uint64
	allocated atomic.Uint64
	budget    *storage.Budget
	align     uint64
	observer  atomic.Pointer[Observer]
}

func (t *table[E]) init(align uint64, b *storage.Budget) {
	if align == 0 {
		align = storage.DefaultAlignment
	}
	t.align = align
	t.budget = b
	t.live = make(map[storage.ID]E)
	t.sizes = make(map[storage.ID]uint64)
}

func (t *table[E]) notify(op string) {
	if o := t.observer.Load(); o != nil {
		(*o)(op)
	}
}

// SetObserver installs fn (nil removes it).
func (t *table[E]) setObserver(fn Observer) {
	if fn == nil {
		t.observer.Store(nil)
		return
	}
	t.observer.Store(&fn)
}

func (t *table[E]) take(size uint64) error {
	if size == 0 {
		return nil
	}
	return t.budget.Take(size)
}

func (t *table[E]) add(id storage.ID, size uint64, e E) {
	t.mu.Lock()
	t.live[id] = e
	t.sizes[id] = size
	t.mu.Unlock()
	t.allocated.Add(size)
	t.notify("alloc")
}

func (t *table[E]) remove(id storage.ID) {
	t.mu.Lock()
	size, ok := t.sizes[id]
	if ok {
		delete(t.live, id)
		delete(t.sizes, id)
	}
	t.mu.Unlock()
	if !ok {
		return
	}
	t.allocated.Add(^(size - 1))
	if size != 0 {
		t.budget.Give(size)
	}
	t.notify("dealloc")
}

func (t *table[E]) lookup(r storage.Region) (E, error) {
	t.mu.RLock()
	e, ok := t.live[r.ID]
	size := t.sizes[r.ID]
	t.mu.RUnlock()
	if !ok {
		var zero E
		return zero, fmt.Errorf("%w: allocation %d is not live", storage.ErrUnknownRegion, r.ID)
	}
	if r.Offset > size || r.Size > size-r.Offset {
		var zero E
		return zero, fmt.Errorf("%w: window [%d, %d) lies outside allocation %d of %d bytes",
			storage.ErrUnknownRegion, r.Offset, storage.SatAdd(r.Offset, r.Size), r.ID, size)
	}
	return e, nil
}

// Host is the embedded default backend: real, zeroed host bytes whose base is
// a multiple of the alignment. Dealloc is immediate and Flush does nothing.
//
// One allocation may be at most what the machine can give (MachineMemory
// less a runtime headroom) and what make can give; a larger one is refused
// with an *OutOfMemoryError before any byte is asked of the Go runtime,
// whose own refusal would be a panic or a fatal error, not an error value.
type Host struct {
	t       table[[]byte]
	machine uint64 // MachineMemory when the host was made (0 = unknown)
	limit   uint64 // the largest single allocation, alignment padding included
}

// NewHost returns a host storage with the given base alignment (0 = 32) that
// takes its bytes from budget (nil = unlimited).
func NewHost(alignment uint64, budget *storage.Budget) *Host {
	return newHostOn(alignment, budget, MachineMemory())
}

// newHostOn is NewHost on a machine of the given memory (0 = unknown).
func newHostOn(alignment uint64, budget *storage.Budget, machine uint64) *Host {
	h := &Host{machine: machine, limit: hostLimit(machine)}
	h.t.init(alignment, budget)
	return h
}

// maxMake bounds one host allocation by what make can give: the runtime
// panics ("makeslice: len out of range") at 2^48 bytes on 64-bit systems
// (the heap's address bits) and beyond an int on 32-bit ones.
const maxMake = uint64(^uint(0)>>1) & (1<<47 - 1)

// hostHeadroom is what one allocation must leave of the machine's memory:
// the runtime maps a large object in whole 4 MiB chunks of 64 MiB arenas,
// and a mapping the kernel's overcommit check refuses is a fatal error.
const hostHeadroom = 64 << 20

// hostLimit is the largest single host allocation (alignment padding
// included) on a machine of the given memory (0 = unknown).
func hostLimit(machine uint64) uint64 {
	if machine == 0 {
		return maxMake
	}
	return min(maxMake, storage.SatSub(machine, hostHeadroom))
}

// Alignment implements Storage.
func (h *Host) Alignment() uint64 { return h.t.align }

// SetObserver installs fn, told of every Alloc and Dealloc (nil removes it).
func (h *Host) SetObserver(fn Observer) { h.t.setObserver(fn) }

// Alloc implements Storage: size zeroed bytes, base aligned (S4). A zero-size
// allocation takes no budget and resolves to an empty non-nil slice.
func (h *Host) Alloc(size uint64) (storage.Region, error) {
	if size > storage.SatSub(h.limit, h.t.align) {
		return storage.Region{}, &storage.OutOfMemoryError{Requested: size, Allocated: h.t.budget.Used(), Capacity: h.t.budget.Capacity(),
			Limit: storage.SatSub(h.limit, h.t.align), Machine: h.machine}
	}
	if err := h.t.take(size); err != nil {
		return storage.Region{}, err
	}
	var buf []byte
	if size == 0 {
		buf = make([]byte, 0)
	} else {
		// Over-allocate by the alignment and start at the first aligned byte;
		// the slice keeps the whole backing array alive.
		raw := make([]byte, size+h.t.align)
		base := uintptr(unsafe.Pointer(unsafe.SliceData(raw)))
		skip := storage.Padding(uint64(base), h.t.align)
		buf = raw[skip : skip+size : skip+size]
	}
	id := storage.NewID()
	h.t.add(id, size, buf)
	return storage.Region{ID: id, Size: size}, nil
}

// maxHostAlloc bounds a granular host reservation so that its size cannot
// overflow an int (granular.go).
const maxHostAlloc = int(^uint(0) >> 2)

// Dealloc implements Storage; it is immediate.
func (h *Host) Dealloc(id storage.ID) { h.t.remove(id) }

// Flush implements Storage; Host queues nothing.
func (h *Host) Flush() {}

// Resolve implements Storage: Bytes is exactly the window.
func (h *Host) Resolve(r storage.Region) (storage.Resource, error) {
	buf, err := h.t.lookup(r)
	if err != nil {
		return storage.Resource{}, err
	}
	return storage.Resource{Region: r, Bytes: buf[r.Offset : r.Offset+r.Size : r.Offset+r.Size]}, nil
}

// BytesAllocated implements Storage.
func (h *Host) BytesAllocated() uint64 { return h.t.allocated.Load() }

// Sim is accounting without bytes: an allocation is a map entry, so a 100 GiB
// workload replays on a small machine. Resources resolve with neither Bytes
// nor Ptr; copies against Sim are counted by the copy queue, not performed.
type Sim struct {
	t table[struct{}]
}

// NewSim returns a simulated storage with the given alignment (0 = 32) that
// takes its bytes from budget (nil = unlimited).
func NewSim(alignment uint64, budget *storage.Budget) *Sim {
	s := &Sim{}
	s.t.init(alignment, budget)
	return s
}

// Alignment implements Storage.
func (s *Sim) Alignment() uint64 { return s.t.align }

// SetObserver installs fn, told of every Alloc and Dealloc (nil removes it).
func (s *Sim) SetObserver(fn Observer) { s.t.setObserver(fn) }

// Alloc implements Storage.
func (s *Sim) Alloc(size uint64) (storage.Region, error) {
	if err := s.t.take(size); err != nil {
		return storage.Region{}, err
	}
	id := storage.NewID()
	s.t.add(id, size, struct{}{})
	return storage.Region{ID: id, Size: size}, nil
}

// Dealloc implements Storage; it is immediate.
func (s *Sim) Dealloc(id storage.ID) { s.t.remove(id) }

// Flush implements Storage; Sim queues nothing.
func (s *Sim) Flush() {}

// Resolve implements Storage: the region is checked, no bytes come back.
func (s *Sim) Resolve(r storage.Region) (storage.Resource, error) {
	if _, err := s.t.lookup(r); err != nil {
		return storage.Resource{}, err
	}
	return storage.Resource{Region: r}, nil
}

// BytesAllocated implements Storage.
func (s *Sim) BytesAllocated() uint64 { return s.t.allocated.Load() }

var (
	_ Observable = (*Host)(nil)
	_ Observable = (*Sim)(nil)
)
