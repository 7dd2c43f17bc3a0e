package handle

// Recycler keeps the cells of dead free-slice descriptors so the next New
// reuses one instead of allocating: a steady reserve-and-free on a page
// (a freed slice gets a descriptor of the page's own before it is reserved,
// coalescing and splitting make others) then feeds the garbage collector
// nothing. Each sliced pool owns one; there is no global
// free list.
//
// What makes reuse safe is who can see such a descriptor (H6): it only ever
// names a free slice, never a buffer's allocation, because binding a buffer
// gives the slice the buffer's own descriptor (Rebind). So no Buffer, writer
// record or cross-stream note keys on it, and its outside holders are the
// short-lived clones of a reservation or a relocation move, all released
// under the lock that serialises the pool. Once refs reaches 0 every Handle
// and Binding of the cell is released, and the cell comes back with a fresh
// ID (H3), so a released handle kept by mistake names a new allocation, not
// the old one; it must not be used (H1 already forbids it).
//
// The zero value is ready; a nil *Recycler recycles nothing (New allocates).
// Not safe for concurrent use: the device lock serialises New and every
// release of a recycled descriptor's handles.
type Recycler struct {
	free []*cell[struct{}] // every cell here has refs == 0 and handles == 0
	// fresh holds cells allocated together and not yet handed out. A chunk
	// is allocated when free runs dry; its size doubles (up to maxChunk)
	// while New outruns the releases, as a relocation plan carving 10⁵
	// targets does, and drops to one after a release, so steady use
	// allocates single cells.
	fresh []cell[struct{}]
	chunk int
}

// maxSpare bounds the cells a Recycler keeps. A steady pair needs one or
// two in flight; a burst of frees
// coalescing at once may return thousands, which a later burst of splits
// reuses. 256 cells of 72 B keep at most 18 KiB per pool off the collector's
// list; beyond that a dead cell is simply garbage.
const maxSpare = 256

// maxChunk bounds a chunk of fresh cells: 64 × 72 B = 4.5 KiB, allocated
// once per 64 targets of a large plan instead of 64 times. A chunk lives
// while any of its cells does, so a long-lived free slice can hold at most
// 4.5 KiB, and only cells made in a burst share one.
const maxChunk = 64

// New returns a fresh descriptor at loc with one Handle, like the package
// function New, whose releases raise free (SignalFree), reusing a dead cell
// when one is kept. The caller must release the descriptor's handles only
// under the lock that serialises r.
func (r *Recycler) New(loc Location, free *Signal) *Handle {
	if r == nil {
		h := New(loc)
		h.d.signal = free
		return h
	}
	n := len(r.free)
	if n == 0 {
		if len(r.fresh) == 0 {
			r.chunk = min(max(1, 2*r.chunk), maxChunk)
			r.fresh = make([]cell[struct{}], r.chunk)
		}
		c := &r.fresh[0]
		r.fresh = r.fresh[1:]
		c.d.home = r
		c.h.d = &c.d
		return r.init(c, loc, free)
	}
	c := r.free[n-1]
	r.free[n-1] = nil
	r.free = r.free[:n-1]
	return r.init(c, loc, free)
}

// init makes c a fresh descriptor with one Handle. A recycled cell keeps
// its home and its internal pointers, so only what a life changed is
// written: pointer stores cost a write barrier while the collector marks.
func (r *Recycler) init(c *cell[struct{}], loc Location, free *Signal) *Handle {
	c.d.id = ID(nextID.Add(1))
	c.d.loc = loc
	c.d.refs = 1
	c.d.handles = 1
	if c.d.signal != free {
		c.d.signal = free
	}
	if c.spare.d != nil {
		c.spare.d = nil // unused again
	}
	c.h.released = false
	c.spare.released = false
	return &c.h
}

// Spare reports how many dead cells r keeps (tests).
func (r *Recycler) Spare() int {
	if r == nil {
		return 0
	}
	return len(r.free)
}

// put takes back a cell whose last reference was just released.
func (r *Recycler) put(c *cell[struct{}]) {
	r.chunk = 0 // releases keep up: the next chunk is one cell
	if len(r.free) < maxSpare {
		// A kept cell points at nothing outside itself: its signal's page
		// may be gone (a relocation's source page, shed once emptied).
		c.d.signal = nil
		r.free = append(r.free, c)
	}
}
