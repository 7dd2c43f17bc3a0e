// Granular storage on the driver's virtual memory management (design in
// storage/granular.go; pages in internal/pool/granules.go).
//
// A reservation is one cuMemAddressReserve of whole granules, aligned to the
// granule. Each granule mapped is its own physical allocation: cuMemCreate
// of one granule, cuMemMap at its address, cuMemSetAccess read-write for
// this device. So any single granule can go back alone (cuMemUnmap accepts
// only whole mappings), and a run of adjacent granules is contiguous device
// memory all the same.
//
// Invariants:
//   - (V1) Map is all or nothing (storage G2): the granules one call created
//     are unmapped and released again, on the device executor, before it
//     returns an error; the budget is charged only for a call that succeeds.
//   - (V2) An unmap never takes effect before device work enqueued before it
//     finishes: Unmap only queues the granule (it reads as unmapped at once:
//     Resolve refuses it); Flush, when no queue of the backend records,
//     synchronises the context and then unmaps and releases it (B2 holds for
//     unmaps as for frees). A queued unmap of a granule mapped again is
//     cancelled: the granule keeps its physical memory, and the bytes it
//     held (storage G3 does not hold here: device memory is never zeroed by
//     this backend, plain or granular).
//   - (V3) Dealloc of a reservation queues it whole; Flush unmaps and
//     releases whatever it still maps, then frees the address range.
//   - (V4) BytesAllocated counts every granule holding physical memory,
//     queued unmaps included, as the budget does; BytesReserved counts the
//     reservations' address space (queued ones included) plus the plain
//     allocations.
//
// The granule is the driver's recommended granularity for pinned device
// memory (cuMemGetAllocationGranularity), rounded up to a multiple of the
// minimum one. Without the eight VMM symbols, on a device that does not
// manage virtual memory, or with GPUMEM_CUDA_GRANULAR=0, NewStorage returns
// a plain *Storage.

package cuda

import (
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/gpumem/gpumem/cuda/internal/driver"
	"github.com/gpumem/gpumem/storage"
)

// EnvGranular names the environment variable that turns granular storage
// off: "0", "false", "off" or "no" make NewStorage return plain storages
// even where the driver manages virtual memory.
const EnvGranular = "GPUMEM_CUDA_GRANULAR"

// granularOff reports whether $GPUMEM_CUDA_GRANULAR turns granules off.
func granularOff() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(EnvGranular))) {
	case "0", "false", "off", "no":
		return true
	}
	return false
}

// granuleFor returns the mapping granule storages on c use, or 0 when they
// stay plain: no virtual memory management, granules turned off, or a
// granularity the driver does not report or the alignment does not divide.
func granuleFor(c *primaryContext) uint64 {
	if !c.Features().VirtualMemory || granularOff() {
		return 0
	}
	lo, hi, err := c.AllocationGranularity()
	if err != nil {
		return 0
	}
	g := hi
	if g == 0 {
		g = lo
	}
	if g == 0 {
		return 0
	}
	if lo > 0 && g%lo != 0 {
		g = storage.RoundUp(g, lo)
	}
	if g%Alignment != 0 {
		return 0
	}
	return g
}

// granularStorage is the Storage NewStorage makes where the driver manages
// virtual memory: it implements storage.Granular (pages reserve address
// space and map granules on demand) on top of the plain Storage's
// allocations. Safe for concurrent use.
type granularStorage struct {
	*plainStorage
}

var _ storage.Granular = (*granularStorage)(nil)

// vmmRange is one reservation: its address range and, per granule, the
// physical allocation mapped there (0: none) and whether its unmap is
// queued.
type vmmRange struct {
	id          storage.ID
	base        uintptr // 0 for an empty reservation
	size        uint64  // as asked
	span        uint64  // reserved: whole granules
	handles     []physicalMemory
	unmapQueued []bool
	pending     int // granules with unmapQueued set
}

// granuleRef is one mapped granule: its address and physical allocation.
type granuleRef struct {
	addr uintptr
	h    physicalMemory
}

func (r *vmmRange) granuleAddr(i, g uint64) uintptr { return r.base + uintptr(i*g) }

// count is the number of granules.
func (r *vmmRange) count() uint64 { return uint64(len(r.handles)) }

// check verifies that window w lies inside the reservation and touches only
// mapped granules whose unmap is not queued.
func (r *vmmRange) check(w storage.Region, g uint64) error {
	if w.Offset > r.size || w.Size > r.size-w.Offset {
		return fmt.Errorf("%w: window [%d, %d) lies outside reservation %d of %d bytes",
			storage.ErrUnknownRegion, w.Offset, storage.SatAdd(w.Offset, w.Size), w.ID, r.size)
	}
	first, n := storage.Granules(w.Offset, w.Size, g)
	for i := first; i < first+n; i++ {
		if r.handles[i] == 0 || r.unmapQueued[i] {
			return fmt.Errorf("%w: window [%d, %d) of reservation %d touches unmapped granule %d",
				storage.ErrUnknownRegion, w.Offset, w.End(), w.ID, i)
		}
	}
	return nil
}

// Granule implements storage.Granular: the driver's recommended
// granularity (2 MiB on current GPUs).
func (g granularStorage) Granule() uint64 { return g.granule }

// Reserve implements storage.Granular: cuMemAddressReserve of size rounded
// up to whole granules, aligned to the granule. It takes no budget. On a
// poisoned backend it returns the poison; on a driver refusal nothing
// changed.
func (g granularStorage) Reserve(size uint64) (storage.Region, error) {
	s := g.plainStorage
	if err := s.b.Poisoned(); err != nil {
		return storage.Region{}, fmt.Errorf("cuda: reserve %d bytes on a poisoned device: %w", size, err)
	}
	_, n := storage.Granules(0, size, s.granule)
	if n > math.MaxUint64/s.granule || n*s.granule > math.MaxInt64 {
		return storage.Region{}, &storage.OutOfMemoryError{Requested: size, Allocated: s.budget.Used(), Capacity: s.budget.Capacity()}
	}
	r := &vmmRange{
		id:          storage.NewID(),
		size:        size,
		span:        n * s.granule,
		handles:     make([]physicalMemory, n),
		unmapQueued: make([]bool, n),
	}
	if r.span > 0 {
		base, err := s.b.ctx.ReserveAddress(r.span, s.granule)
		if err != nil {
			s.b.notePoison(err)
			return storage.Region{}, err
		}
		r.base = base
	}
	s.mu.Lock()
	s.ranges[r.id] = r
	s.mu.Unlock()
	s.reserved.Add(r.span)
	return storage.Region{ID: r.id, Size: size}, nil
}

// Map implements storage.Granular: for each granule of [first, first+n)
// not mapped, the budget is charged a whole granule and the driver backs it
// with its own physical allocation (cuMemCreate, cuMemMap, cuMemSetAccess);
// a granule whose unmap is queued keeps its memory instead (the unmap is
// cancelled). A refusal of the budget or the driver wraps
// storage.ErrOutOfMemory; on any error nothing of the call stays mapped
// (V1).
func (g granularStorage) Map(id storage.ID, first, n uint64) error {
	s := g.plainStorage
	if err := s.b.Poisoned(); err != nil {
		return fmt.Errorf("cuda: map granules of reservation %d on a poisoned device: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.ranges[id]
	if !ok {
		return fmt.Errorf("%w: reservation %d is not live in this cuda storage", storage.ErrUnknownRegion, id)
	}
	if first > r.count() || n > r.count()-first {
		return fmt.Errorf("%w: granules [%d, %d) outside reservation %d of %d granules",
			storage.ErrUnknownRegion, first, storage.SatAdd(first, n), id, r.count())
	}
	var fresh []uint64
	for i := first; i < first+n; i++ {
		switch {
		case r.handles[i] == 0:
			fresh = append(fresh, i)
		case !r.unmapQueued[i]:
			panic(fmt.Sprintf("cuda: granule %d of reservation %d mapped twice", i, id))
		}
	}
	if len(fresh) > 0 {
		bytes := uint64(len(fresh)) * s.granule
		if err := s.budget.Take(bytes); err != nil {
			return fmt.Errorf("cuda: mapping %d granules of reservation %d: %w", len(fresh), id, err)
		}
		hs, err := s.b.ctx.mapGranules(r, s.granule, fresh)
		if err != nil {
			s.budget.Give(bytes)
			s.b.notePoison(err)
			return fmt.Errorf("cuda: mapping granules [%d, %d) of reservation %d: %w", first, first+n, id, err)
		}
		for k, i := range fresh {
			r.handles[i] = hs[k]
		}
		s.mapped.Add(bytes)
	}
	for i := first; i < first+n; i++ {
		if r.unmapQueued[i] {
			r.unmapQueued[i] = false
			r.pending--
		}
	}
	if r.pending == 0 {
		delete(s.unmapping, r)
	}
	return nil
}

// Unmap implements storage.Granular: the granules are queued for Flush
// (V2) and read as unmapped at once; their memory and budget go back when
// Flush unmaps them. An unknown reservation is ignored; a granule not
// mapped is a caller bug and panics.
func (g granularStorage) Unmap(id storage.ID, first, n uint64) {
	if n == 0 {
		return
	}
	s := g.plainStorage
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.ranges[id]
	if !ok {
		return
	}
	if first > r.count() || n > r.count()-first {
		panic(fmt.Sprintf("cuda: unmapping granules [%d, %d) outside reservation %d of %d granules", first, first+n, id, r.count()))
	}
	for i := first; i < first+n; i++ {
		if r.handles[i] == 0 || r.unmapQueued[i] {
			panic(fmt.Sprintf("cuda: granule %d of reservation %d unmapped while not mapped", i, id))
		}
	}
	for i := first; i < first+n; i++ {
		r.unmapQueued[i] = true
	}
	r.pending += int(n)
	s.unmapping[r] = struct{}{}
}

// BytesReserved implements storage.Granular (V4).
func (g granularStorage) BytesReserved() uint64 {
	return g.allocated.Load() + g.reserved.Load()
}

// MappedGranules reports which granules of reservation id are mapped (a
// queued unmap reads as unmapped); nil when id is not a live reservation.
// For tests and reports.
func (g granularStorage) MappedGranules(id storage.ID) []bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.ranges[id]
	if !ok {
		return nil
	}
	out := make([]bool, len(r.handles))
	for i, h := range r.handles {
		out[i] = h != 0 && !r.unmapQueued[i]
	}
	return out
}

// QueuedUnmaps returns the number of granule unmaps waiting for Flush.
func (g granularStorage) QueuedUnmaps() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for r := range g.unmapping {
		n += r.pending
	}
	return n
}

// mapGranules backs granules idx of r (g bytes each) in one device-executor
// call: per granule cuMemCreate, cuMemMap and cuMemSetAccess. On error every
// granule the call created is unmapped and released again (V1).
func (c *primaryContext) mapGranules(r *vmmRange, g uint64, idx []uint64) ([]physicalMemory, error) {
	v, err := c.vmm()
	if err != nil {
		return nil, err
	}
	d := c.drv
	prop := c.allocationProp()
	desc := driver.MemAccessDesc{LocationType: memLocationTypeDevice, LocationID: c.dev, Flags: memAccessProtReadWrite}
	var hs []physicalMemory
	err = c.do(func() error {
		undo := func() {
			for k, h := range hs {
				v.CuMemUnmap(r.granuleAddr(idx[k], g), uintptr(g))
				v.CuMemRelease(uint64(h))
			}
			hs = nil
		}
		for _, i := range idx {
			addr := r.granuleAddr(i, g)
			var h uint64
			if err := d.check("cuMemCreate", v.CuMemCreate(&h, uintptr(g), &prop, 0)); err != nil {
				undo()
				return fmt.Errorf("cuda: create granule %d (%d bytes) on device %d: %w", i, g, c.ordinal, err)
			}
			if err := d.check("cuMemMap", v.CuMemMap(addr, uintptr(g), 0, h, 0)); err != nil {
				v.CuMemRelease(h)
				undo()
				return fmt.Errorf("cuda: map granule %d at %#x: %w", i, addr, err)
			}
			if err := d.check("cuMemSetAccess", v.CuMemSetAccess(addr, uintptr(g), &desc, 1)); err != nil {
				v.CuMemUnmap(addr, uintptr(g))
				v.CuMemRelease(h)
				undo()
				return fmt.Errorf("cuda: grant access to granule %d at %#x: %w", i, addr, err)
			}
			hs = append(hs, physicalMemory(h))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return hs, nil
}

// unmapGranule unmaps and releases one granule; it runs on the device
// executor (inside drop).
func (s *plainStorage) unmapGranule(gr granuleRef) error {
	v := s.b.ctx.drv.VMM
	d := s.b.ctx.drv
	var first error
	if err := d.check("cuMemUnmap", v.CuMemUnmap(gr.addr, uintptr(s.granule))); err != nil {
		first = fmt.Errorf("cuda: unmap granule at %#x: %w", gr.addr, err)
	}
	if err := d.check("cuMemRelease", v.CuMemRelease(uint64(gr.h))); err != nil && first == nil {
		first = fmt.Errorf("cuda: release the granule at %#x: %w", gr.addr, err)
	}
	return first
}

// freeRange unmaps and releases every granule r still maps, then frees its
// address range; it runs on the device executor (inside drop).
func (s *plainStorage) freeRange(r *vmmRange) error {
	var first error
	for i, h := range r.handles {
		if h == 0 {
			continue
		}
		if err := s.unmapGranule(granuleRef{addr: r.granuleAddr(uint64(i), s.granule), h: h}); err != nil && first == nil {
			first = err
		}
	}
	if r.span > 0 {
		d := s.b.ctx.drv
		if err := d.check("cuMemAddressFree", d.VMM.CuMemAddressFree(r.base, uintptr(r.span))); err != nil && first == nil {
			first = fmt.Errorf("cuda: free the reservation at %#x (%d bytes): %w", r.base, r.span, err)
		}
	}
	return first
}
