package handle

// Recycler keeps the cells of dead descriptors so the next New reuses one
// instead of allocating: a steady reserve-and-free then feeds the garbage
// collector nothing. Each sliced pool owns one for its free slices'
// descriptors (a freed slice gets a descriptor of the page's own before it
// is reserved; coalescing and splitting make others), and each device one
// for its buffers'. There is no global free list.
//
// What makes reuse safe is that a cell comes back only when nothing can
// find its descriptor any more (H6): no Handle or Binding refers to it
// (refs 0), and no structure keys on it (Key, Keep). A free slice's
// descriptor is never keyed on: binding a buffer gives the slice the
// buffer's own descriptor (Rebind), so its only outside holders are the
// short-lived clones of a reservation or a relocation move. A buffer's
// descriptor is keyed on by what the device keeps per allocation beyond
// references (its pending writers, its cross-stream notes, a capture's
// records), and each such structure keys it for as long as it keeps it.
// The cell comes back with a fresh ID (H3): whoever still holds a released
// handle of it (a freed buffer) tells the new allocation from its own by
// the ID, and a handle must not otherwise be used once released (H1).
//
// The zero value is ready; a nil *Recycler recycles nothing (New allocates).
// Not safe for concurrent use: the device lock serialises New and every
// release of a recycled descriptor's handles.
type Recycler struct {
	free []*cell // every cell here has refs == 0 and handles == 0
	// fresh holds cells allocated together and not yet handed out. A chunk
	// is allocated when free runs dry; its size doubles (up to maxChunk)
	// while New outruns the releases, as a relocation plan carving 10⁵
	// targets does, and drops to one after a release, so steady use
	// allocates single cells.
	fresh []cell
	chunk int
	// ids are IDs drawn from the process-wide counter and not handed out
	// yet, [next, end): a block of idBlock at a time.
	idNext, idEnd ID
}

// idBlock is how many IDs a Recycler draws at once: one locked add per
// block instead of one per New (uncontended, it costs about what the
// device lock does, on a path that takes that lock twice a pair). IDs stay
// unique process-wide (H3), increasing in each Recycler's order.
const idBlock = 1024

// id is the next ID of r's block, drawing a block when it is used up.
func (r *Recycler) id() ID {
	if r.idNext == r.idEnd {
		end := ID(nextID.Add(idBlock))
		r.idNext, r.idEnd = end-idBlock+1, end+1
	}
	id := r.idNext
	r.idNext++
	return id
}

// maxSpare bounds the cells a Recycler keeps. A steady pair needs one or
// two in flight; a burst of frees coalescing at once may return thousands,
// which a later burst of splits reuses. 256 cells of 80 B keep at most
// 20 KiB per recycler off the collector's list; beyond that a dead cell is
// simply garbage.
const maxSpare = 256

// maxChunk bounds a chunk of fresh cells: 64 × 80 B = 5 KiB, allocated
// once per 64 targets of a large plan (or 64 buffers of a burst) instead
// of 64 times. A chunk lives while any of its cells does, so a long-lived
// descriptor can hold at most 5 KiB, and only cells made in a burst share
// one.
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
			r.fresh = make([]cell, r.chunk)
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
func (r *Recycler) init(c *cell, loc Location, free *Signal) *Handle {
	c.d.id = r.id()
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

// put takes back a cell nothing refers to or keys on any more.
func (r *Recycler) put(c *cell) {
	r.chunk = 0 // releases keep up: the next chunk is one cell
	if len(r.free) < maxSpare {
		// A kept cell points at nothing outside itself: its signal's page
		// may be gone (a relocation's source page, shed once emptied).
		c.d.signal = nil
		r.free = append(r.free, c)
	}
}
