// Page granularity at the root: the option that chooses it, and the
// device's counting storage forwarding granule calls.
//
// Pages map what they hold when the memory config allows it (the default)
// and the stream's storage is granular (storage.Granular, design in
// storage/granular.go; internal/pool/granules.go for pages). The host and sim
// backends build plain storages unless WithPageGranular(true) asks for
// granular ones; WithPageGranular(false) hides any backend's granules, so
// pages are backed whole.
//
// Both the option and WithStorageWrapper act through the device's storage
// wrapper: the granular choice is applied first (innermost), the user's
// wrapper around it, whatever the order of the options, so a hoststorage.Faulty
// wrapper refuses mappings of the granular storage it wraps.
//
// The device wraps every stream's storage in a countedStorage (device.go);
// the methods below make it granular exactly when what it wraps is, so the
// pools see through it. A reservation counts as a storage allocation.

package gpumem

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// WithPageGranular chooses whether sliced pages map what they hold. true:
// the host and sim backends build granular storages (2 MiB granules; on a
// system without anonymous mappings the host storage stays plain), so a page
// maps only the granules its live slices cover and cleanups give the others
// back; other backends keep their own storage. false: pages are backed
// whole on every backend. Default: the backend's storage decides (host and
// sim: whole pages). A later WithPageGranular replaces an earlier one.
func WithPageGranular(on bool) Option {
	return optionFunc(func(o *options) { o.granular = &on; o.rewrap() })
}

// rewrap composes the storage wrapper from the granular choice (innermost)
// and the user's wrapper.
func (o *options) rewrap() {
	user, granular := o.userWrap, o.granular
	if granular == nil {
		o.wrapStorage = user
		return
	}
	on := *granular
	o.wrapStorage = func(st storage.Storage) storage.Storage {
		if on {
			st, _ = hoststorage.Granulate(st, hoststorage.DefaultGranule)
		} else {
			st = hoststorage.Plain(st)
		}
		if user != nil {
			st = user(st)
		}
		return st
	}
}

// Granule implements storage.Granular: the wrapped storage's granule, 0
// when it maps none.
func (c *countedStorage) Granule() uint64 { return storage.GranuleOf(c.Storage) }

// Reserve implements storage.Granular, counted as a storage allocation.
func (c *countedStorage) Reserve(size uint64) (storage.Region, error) {
	g, ok := c.Storage.(storage.Granular)
	if !ok {
		return storage.Region{}, fmt.Errorf("%w: reserving %d bytes", storage.ErrNotGranular, size)
	}
	r, err := g.Reserve(size)
	if err == nil {
		c.allocs.Add(1)
		c.sizes[r.ID] = r.Size
		c.mapped[r.ID] = 0
		if h := c.d.hist; h != nil {
			h.pageAllocLocked(c.stream, r, c.Granule(), true)
		}
	}
	return r, err
}

// Map implements storage.Granular. Granules whose unmap is still held
// (device.go) are mapped already: their unmap is withdrawn and only the
// others are mapped. All or nothing, as the storage's Map: on a refusal the
// runs this call mapped are unmapped again and the held unmaps stay.
func (c *countedStorage) Map(id storage.ID, first, n uint64) error {
	g, ok := c.Storage.(storage.Granular)
	if !ok {
		return fmt.Errorf("%w: mapping granules of allocation %d", storage.ErrNotGranular, id)
	}
	if !c.holdsUnmapIn(id, first, n) {
		if err := g.Map(id, first, n); err != nil {
			return err
		}
		c.mappedNow(id, first, n)
		return nil
	}
	var done [][2]uint64
	for i := first; i < first+n; {
		if c.unmapHeld(id, i) {
			i++
			continue
		}
		j := i + 1
		for j < first+n && !c.unmapHeld(id, j) {
			j++
		}
		if err := g.Map(id, i, j-i); err != nil {
			for _, r := range done {
				g.Unmap(id, r[0], r[1]-r[0])
			}
			return err
		}
		done = append(done, [2]uint64{i, j})
		i = j
	}
	c.withdrawUnmaps(id, first, n)
	for _, r := range done {
		c.mappedNow(id, r[0], r[1]-r[0])
	}
	return nil
}

// mappedNow counts and records granules [first, first+n) of id mapped.
func (c *countedStorage) mappedNow(id storage.ID, first, n uint64) {
	c.mapped[id] += n
	if h := c.d.hist; h != nil {
		h.mapLocked(HistoryMap, c.stream, id, c.sizes[id], first, n, c.Granule(), false)
	}
}

// Unmap implements storage.Granular, held while the stream has work queued
// (an op enqueued before the free that emptied the granule may still read
// it).
func (c *countedStorage) Unmap(id storage.ID, first, n uint64) {
	g, ok := c.Storage.(storage.Granular)
	if !ok || n == 0 {
		return
	}
	c.released.bytes += n * c.Granule()
	if seq := c.busyUntil(); seq != 0 || c.holdsFor(id) || c.vBusy() {
		c.hold(seq, id, first, n)
		return
	}
	c.unmap(g, id, first, n, false)
}

// holdsUnmapIn reports whether a held unmap of id overlaps [first, first+n).
func (c *countedStorage) holdsUnmapIn(id storage.ID, first, n uint64) bool {
	for _, h := range c.held {
		if h.id == id && h.n != 0 && h.first < first+n && first < h.first+h.n {
			return true
		}
	}
	return false
}

// unmapHeld reports whether granule k of id has a held unmap.
func (c *countedStorage) unmapHeld(id storage.ID, k uint64) bool { return c.holdsUnmapIn(id, k, 1) }

// withdrawUnmaps removes granules [first, first+n) of id from the held
// unmaps, splitting the ones that straddle the range.
func (c *countedStorage) withdrawUnmaps(id storage.ID, first, n uint64) {
	end := first + n
	kept := make([]heldRelease, 0, len(c.held)+1)
	for _, h := range c.held {
		if h.id != id || h.n == 0 || h.first >= end || first >= h.first+h.n {
			kept = append(kept, h)
			continue
		}
		if h.first < first {
			kept = append(kept, heldRelease{seq: h.seq, vseq: h.vseq, id: id, first: h.first, n: first - h.first})
		}
		if hend := h.first + h.n; hend > end {
			kept = append(kept, heldRelease{seq: h.seq, vseq: h.vseq, id: id, first: end, n: hend - end})
		}
	}
	changed := len(kept) != len(c.held) || (len(kept) > 0 && kept[0] != c.held[0])
	c.held = kept
	if changed {
		c.notePassed()
	}
}

// BytesReserved implements storage.Granular: the wrapped storage's address
// space, or its allocated bytes when it maps no granules.
func (c *countedStorage) BytesReserved() uint64 {
	if g, ok := c.Storage.(storage.Granular); ok {
		return g.BytesReserved()
	}
	return c.Storage.BytesAllocated()
}
