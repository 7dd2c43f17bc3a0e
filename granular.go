// Page granularity at the root: the option that chooses it, and the
// device's counting storage forwarding granule calls.
//
// Pages map what they hold when the memory config allows it (the default)
// and the stream's storage is granular (storage.Granular, design in
// storage/granular.go; pool/granules.go for pages). The host and sim
// backends build plain storages unless WithPageGranular(true) asks for
// granular ones; WithPageGranular(false) hides any backend's granules, so
// pages are backed whole.
//
// Both the option and WithStorageWrapper act through the device's storage
// wrapper: the granular choice is applied first (innermost), the user's
// wrapper around it, whatever the order of the options, so a storage.Faulty
// wrapper refuses mappings of the granular storage it wraps.
//
// The device wraps every stream's storage in a countedStorage (device.go);
// the methods below make it granular exactly when what it wraps is, so the
// pools see through it. A reservation counts as a storage allocation.

package gpumem

import (
	"fmt"

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
			st, _ = storage.Granulate(st, storage.DefaultGranule)
		} else {
			st = storage.Plain(st)
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
	}
	return r, err
}

// Map implements storage.Granular.
func (c *countedStorage) Map(id storage.ID, first, n uint64) error {
	g, ok := c.Storage.(storage.Granular)
	if !ok {
		return fmt.Errorf("%w: mapping granules of allocation %d", storage.ErrNotGranular, id)
	}
	return g.Map(id, first, n)
}

// Unmap implements storage.Granular.
func (c *countedStorage) Unmap(id storage.ID, first, n uint64) {
	if g, ok := c.Storage.(storage.Granular); ok {
		g.Unmap(id, first, n)
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
