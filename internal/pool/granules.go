package pool

import (
	"fmt"

	"github.com/gpumem/gpumem/storage"
)

// back maps every unmapped granule the window [off, off+size) of the page
// touches, in runs of adjacent granules (PL6). On a refusal the runs this
// call mapped are unmapped again and the error is returned: the page and
// the storage are as they were, never half-mapped.
//
// Cost: O(size/granule), the granules the new slice covers.
func (p *page) back(st storage.Storage, off, size uint64) error {
	if p.granule == 0 || size == 0 {
		return nil
	}
	first, n := storage.Granules(off, size, p.granule)
	var gst storage.Granular
	var done [][2]uint64 // runs mapped by this call
	for i := first; i < first+n; {
		if p.mapped[i] {
			i++
			continue
		}
		j := i + 1
		for j < first+n && !p.mapped[j] {
			j++
		}
		if gst == nil {
			gst = st.(storage.Granular)
		}
		if err := gst.Map(p.region.ID, i, j-i); err != nil {
			for _, r := range done {
				gst.Unmap(p.region.ID, r[0], r[1]-r[0])
				for k := r[0]; k < r[1]; k++ {
					p.mapped[k] = false
				}
			}
			return err
		}
		for k := i; k < j; k++ {
			p.mapped[k] = true
		}
		done = append(done, [2]uint64{i, j})
		i = j
	}
	return nil
}

// unmapFree unmaps every mapped granule of the page that no live slice
// touches (PL7) and returns the bytes of the page they covered. A guarded
// page keeps every granule. busy is scratch space of at least len(p.mapped)
// entries (the pool reuses one).
//
// A granule shared by a live slice and a free one stays mapped: the page
// keeps its address layout, so only whole granules no live byte needs go
// back. A slice's padding counts as its own (a backend may round a copy up
// to it).
//
// Cost: one scan of the page's slices and granules (O(slices + granules)).
func (p *page) unmapFree(st storage.Storage, busy []bool) uint64 {
	if p.granule == 0 || p.guarded() {
		return 0
	}
	busy = busy[:len(p.mapped)]
	clear(busy)
	for i := range p.slices {
		s := &p.slices[i]
		if s.h.IsFree() {
			continue
		}
		first, n := storage.Granules(s.Region.Offset, s.EffectiveSize(), p.granule)
		for k := first; k < first+n; k++ {
			busy[k] = true
		}
	}
	var gst storage.Granular
	var bytes uint64
	for i := 0; i < len(p.mapped); {
		if !p.mapped[i] || busy[i] {
			i++
			continue
		}
		j := i + 1
		for j < len(p.mapped) && p.mapped[j] && !busy[j] {
			j++
		}
		if gst == nil {
			gst = st.(storage.Granular)
		}
		gst.Unmap(p.region.ID, uint64(i), uint64(j-i))
		for k := i; k < j; k++ {
			p.mapped[k] = false
			bytes += p.granuleBytes(k)
		}
		i = j
	}
	return bytes
}

// granuleBytes is the bytes of the page granule k covers: a whole granule,
// or less for the last one of a page that is not a multiple of it.
func (p *page) granuleBytes(k int) uint64 {
	start := uint64(k) * p.granule
	return min(p.granule, p.size()-start)
}

// unmappedBytes is the bytes of the page no mapped granule covers (0 on a
// page backed whole).
//
// The page's mapped bitmap mirrors the storage's. The storage charges whole
// granules (the last one of a page may stick out past the page); the page's
// usage counts the bytes of the page they cover.
func (p *page) unmappedBytes() uint64 {
	var n uint64
	for k, m := range p.mapped {
		if !m {
			n += p.granuleBytes(k)
		}
	}
	return n
}

// checkMapped verifies PL6: every granule a live slice touches is mapped. It
// returns a description of the first breach, or "".
func (p *page) checkMapped() string {
	if p.granule == 0 {
		return ""
	}
	for i := range p.slices {
		s := &p.slices[i]
		if s.h.IsFree() {
			continue
		}
		first, n := storage.Granules(s.Region.Offset, s.EffectiveSize(), p.granule)
		for k := first; k < first+n; k++ {
			if !p.mapped[k] {
				return fmt.Sprintf("pool: page %d slice %d is live on unmapped granule %d (PL6)", p.index, i, k)
			}
		}
	}
	return ""
}
