package hoststorage

import (
	"sync"

	"github.com/gpumem/gpumem/storage"
)

// Faulty wraps a Storage and refuses on cue, so tests reach every failure
// path of the layers above without mocks. It forwards everything else.
//
// Allocations are refused by RefuseAllocAbove, RefuseNextAllocs or
// RefuseAllocIf; resolves (which every copy performs) by RefuseResolve;
// copies and waits of a copy queue by RefuseCopies and RefuseWaits (copy
// queues consult a storage that implements [FaultInjector]). Every refusal is
// counted.
type Faulty struct {
	inner storage.Storage

	mu         sync.Mutex
	allocAbove uint64 // 0 = off
	nextAllocs int
	nextMaps   int // granular_faulty.go
	allocIf    func(size uint64) bool
	resolve    bool
	copies     func(n int) bool
	waits      func(n int) bool
	copyCalls  int
	waitCalls  int
	failWith   error
	refusals   int
}

// FaultInjector is implemented by storages that refuse copies and waits on
// cue. A copy queue calls CheckCopy before each copy and CheckWait before each
// wait, and fails with their error.
type FaultInjector interface {
	CheckCopy() error
	CheckWait() error
}

// NewFaulty wraps inner.
func NewFaulty(inner storage.Storage) *Faulty { return &Faulty{inner: inner} }

// Inner returns the wrapped storage.
func (f *Faulty) Inner() storage.Storage { return f.inner }

// RefuseAllocAbove refuses an allocation that would take BytesAllocated above
// total (0 turns it off).
func (f *Faulty) RefuseAllocAbove(total uint64) {
	f.mu.Lock()
	f.allocAbove = total
	f.mu.Unlock()
}

// RefuseNextAllocs refuses the next n allocations.
func (f *Faulty) RefuseNextAllocs(n int) {
	f.mu.Lock()
	f.nextAllocs = n
	f.mu.Unlock()
}

// RefuseAllocIf refuses every allocation for which pred returns true (nil
// turns it off).
func (f *Faulty) RefuseAllocIf(pred func(size uint64) bool) {
	f.mu.Lock()
	f.allocIf = pred
	f.mu.Unlock()
}

// RefuseResolve refuses every Resolve while on.
func (f *Faulty) RefuseResolve(on bool) {
	f.mu.Lock()
	f.resolve = on
	f.mu.Unlock()
}

// RefuseCopies refuses the n-th copy (counted from 1 since this call) when
// pred(n) is true; nil turns it off.
func (f *Faulty) RefuseCopies(pred func(n int) bool) {
	f.mu.Lock()
	f.copies, f.copyCalls = pred, 0
	f.mu.Unlock()
}

// RefuseWaits refuses the n-th copy-queue wait (counted from 1 since this
// call) when pred(n) is true; nil turns it off.
func (f *Faulty) RefuseWaits(pred func(n int) bool) {
	f.mu.Lock()
	f.waits, f.waitCalls = pred, 0
	f.mu.Unlock()
}

// FailWith sets the error refusals return (nil restores ErrOutOfMemory for
// allocations and ErrUnknownRegion for resolves).
func (f *Faulty) FailWith(err error) {
	f.mu.Lock()
	f.failWith = err
	f.mu.Unlock()
}

// Refusals returns how many calls were refused so far.
func (f *Faulty) Refusals() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refusals
}

func (f *Faulty) refuseLocked(def error) error {
	f.refusals++
	if f.failWith != nil {
		return f.failWith
	}
	return def
}

// Alignment implements Storage.
func (f *Faulty) Alignment() uint64 { return f.inner.Alignment() }

// Alloc implements Storage, refusing on cue.
func (f *Faulty) Alloc(size uint64) (storage.Region, error) {
	f.mu.Lock()
	refuse := false
	switch {
	case f.nextAllocs > 0:
		f.nextAllocs--
		refuse = true
	case f.allocAbove != 0 && storage.SatAdd(f.inner.BytesAllocated(), size) > f.allocAbove:
		refuse = true
	case f.allocIf != nil && f.allocIf(size):
		refuse = true
	}
	defer f.mu.Unlock()
	if refuse {
		return storage.Region{}, f.refuseLocked(&storage.OutOfMemoryError{Requested: size, Allocated: f.inner.BytesAllocated(), Capacity: f.allocAbove})
	}
	// Held across the inner call so concurrent allocations cannot pass
	// RefuseAllocAbove's total together.
	return f.inner.Alloc(size)
}

// Dealloc implements Storage.
func (f *Faulty) Dealloc(id storage.ID) { f.inner.Dealloc(id) }

// Flush implements Storage.
func (f *Faulty) Flush() { f.inner.Flush() }

// Resolve implements Storage, refusing while RefuseResolve is on.
func (f *Faulty) Resolve(r storage.Region) (storage.Resource, error) {
	f.mu.Lock()
	if f.resolve {
		err := f.refuseLocked(storage.ErrUnknownRegion)
		f.mu.Unlock()
		return storage.Resource{}, err
	}
	f.mu.Unlock()
	return f.inner.Resolve(r)
}

// BytesAllocated implements Storage.
func (f *Faulty) BytesAllocated() uint64 { return f.inner.BytesAllocated() }

// CheckCopy implements FaultInjector.
func (f *Faulty) CheckCopy() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.copyCalls++
	if f.copies != nil && f.copies(f.copyCalls) {
		return f.refuseLocked(storage.ErrOutOfMemory)
	}
	return nil
}

// CheckWait implements FaultInjector.
func (f *Faulty) CheckWait() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waitCalls++
	if f.waits != nil && f.waits(f.waitCalls) {
		return f.refuseLocked(storage.ErrOutOfMemory)
	}
	return nil
}

// SetObserver forwards to the inner storage when it takes an observer.
func (f *Faulty) SetObserver(fn Observer) {
	if o, ok := f.inner.(Observable); ok {
		o.SetObserver(fn)
	}
}
