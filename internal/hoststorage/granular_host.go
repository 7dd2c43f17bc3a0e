// GranularHost: host bytes in reserved ranges backed granule by granule
// (design in granular.go).
//
// A reservation is one anonymous private mapping of the whole range,
// readable and writable but never touched, so the kernel backs none of it
// (MAP_NORESERVE: no commit charge either). Map only accounts: the first
// write to a granule faults its pages in. Unmap madvises the granule away
// (MADV_DONTNEED): its pages go back to the kernel at once, the process's
// resident memory drops, and the next read sees zeros (G3). Dealloc unmaps
// the whole range. Plain Alloc is the Host's (G4).
//
// Where the OS offers no such mapping (granular_mmap_other.go), or the
// alignment does not divide the OS page, or the granule is not a multiple of
// it, the storage reports Granule() == 0 and is a plain Host.

package hoststorage

import "github.com/gpumem/gpumem/storage"

// GranularHost is a Host whose Reserve makes page ranges backed granule by
// granule. Safe for concurrent use.
type GranularHost struct {
	*Host
	g granuleTable
}

// NewGranularHost returns a granular host storage with the given alignment
// (0 = 32), granule (0 = DefaultGranule) and budget (nil = unlimited). When
// the host cannot map granules at that alignment and granule it reports
// Granule() == 0 and behaves as NewHost.
func NewGranularHost(alignment, granule uint64, b *storage.Budget) *GranularHost {
	h := &GranularHost{Host: NewHost(alignment, b)}
	if granule == 0 {
		granule = DefaultGranule
	}
	os := osPageSize()
	if hostMapping == nil || os == 0 || os%h.t.align != 0 || granule%os != 0 {
		granule = 0
	}
	h.g.init(granule, b, hostMapping, h.t.notify)
	return h
}

// Granule implements Granular.
func (h *GranularHost) Granule() uint64 { return h.g.granule }

// Reserve implements Granular: one untouched anonymous mapping.
func (h *GranularHost) Reserve(size uint64) (storage.Region, error) { return h.g.reserve(size) }

// Map implements Granular.
func (h *GranularHost) Map(id storage.ID, first, n uint64) error {
	return h.g.mapGranules(id, first, n)
}

// Unmap implements Granular: the granules are madvised away.
func (h *GranularHost) Unmap(id storage.ID, first, n uint64) { h.g.unmapGranules(id, first, n) }

// Dealloc implements Storage: a reservation is unmapped whole, a plain
// allocation goes back as on Host.
func (h *GranularHost) Dealloc(id storage.ID) {
	if !h.g.release(id) {
		h.Host.Dealloc(id)
	}
}

// Resolve implements Storage; a window of a reservation must touch only
// mapped granules (G3).
func (h *GranularHost) Resolve(r storage.Region) (storage.Resource, error) {
	rg, ok, err := h.g.lookup(r)
	if !ok {
		return h.Host.Resolve(r)
	}
	if err != nil {
		return storage.Resource{}, err
	}
	if r.Size == 0 {
		return storage.Resource{Region: r, Bytes: make([]byte, 0)}, nil
	}
	return storage.Resource{Region: r, Bytes: rg.bytes[r.Offset : r.Offset+r.Size : r.Offset+r.Size]}, nil
}

// BytesAllocated implements Storage: plain allocations plus mapped granules
// (G1).
func (h *GranularHost) BytesAllocated() uint64 { return h.Host.BytesAllocated() + h.g.mapped.Load() }

// BytesReserved implements Granular.
func (h *GranularHost) BytesReserved() uint64 { return h.Host.BytesAllocated() + h.g.reserved.Load() }

// MappedGranules reports which granules of reservation id are mapped; nil
// when id is not a live reservation.
func (h *GranularHost) MappedGranules(id storage.ID) []bool { return h.g.mappedGranules(id) }

// GranularSim is a Sim whose Reserve makes page ranges accounted granule by
// granule: the same bookkeeping as GranularHost, no bytes. Safe for
// concurrent use.
type GranularSim struct {
	*Sim
	g granuleTable
}

// NewGranularSim returns a granular simulated storage with the given
// alignment (0 = 32), granule (0 = DefaultGranule) and budget (nil =
// unlimited).
func NewGranularSim(alignment, granule uint64, b *storage.Budget) *GranularSim {
	s := &GranularSim{Sim: NewSim(alignment, b)}
	if granule == 0 {
		granule = DefaultGranule
	}
	s.g.init(granule, b, nil, s.t.notify)
	return s
}

// Granule implements Granular.
func (s *GranularSim) Granule() uint64 { return s.g.granule }

// Reserve implements Granular.
func (s *GranularSim) Reserve(size uint64) (storage.Region, error) { return s.g.reserve(size) }

// Map implements Granular.
func (s *GranularSim) Map(id storage.ID, first, n uint64) error { return s.g.mapGranules(id, first, n) }

// Unmap implements Granular.
func (s *GranularSim) Unmap(id storage.ID, first, n uint64) { s.g.unmapGranules(id, first, n) }

// Dealloc implements Storage.
func (s *GranularSim) Dealloc(id storage.ID) {
	if !s.g.release(id) {
		s.Sim.Dealloc(id)
	}
}

// Resolve implements Storage: the window is checked (G3), no bytes come
// back.
func (s *GranularSim) Resolve(r storage.Region) (storage.Resource, error) {
	_, ok, err := s.g.lookup(r)
	if !ok {
		return s.Sim.Resolve(r)
	}
	if err != nil {
		return storage.Resource{}, err
	}
	return storage.Resource{Region: r}, nil
}

// BytesAllocated implements Storage (G1).
func (s *GranularSim) BytesAllocated() uint64 { return s.Sim.BytesAllocated() + s.g.mapped.Load() }

// BytesReserved implements Granular.
func (s *GranularSim) BytesReserved() uint64 { return s.Sim.BytesAllocated() + s.g.reserved.Load() }

// MappedGranules reports which granules of reservation id are mapped; nil
// when id is not a live reservation.
func (s *GranularSim) MappedGranules(id storage.ID) []bool { return s.g.mappedGranules(id) }
