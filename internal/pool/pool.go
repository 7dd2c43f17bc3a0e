package pool

import (
	"errors"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

var (
	// ErrBufferTooBig is returned when no pool accepts the size: above the
	// device's largest page, or above a pool's largest allocation. Nothing
	// changed. Split the buffer, or raise the max page size.
	ErrBufferTooBig = errors.New("pool: buffer too big")

	// ErrPageSizesExhausted is returned when the arena must grow but all of
	// its slots already hold a pool. A relocation that may allocate empties
	// the outdated pools; the device runs one and retries.
	ErrPageSizesExhausted = errors.New("pool: arena page sizes exhausted")
)

// Limits bounds a pool's page count below what a Location can hold, so tests
// reach the bound cheaply. Zero means handle.MaxPage+1 pages.
type Limits struct {
	MaxPages int
}

func (l Limits) maxPages() int {
	if l.MaxPages <= 0 || l.MaxPages > handle.MaxPage+1 {
		return handle.MaxPage + 1
	}
	return l.MaxPages
}

// CleanupKind says how hard a cleanup looks for memory to give back.
type CleanupKind uint8

const (
	// Periodic runs on every Allow reservation: cheap, gives back only what a
	// pool's policy says has aged out.
	Periodic CleanupKind = iota
	// Explicit exists to give memory back now: every free page that may go,
	// goes.
	Explicit
)

func (k CleanupKind) String() string {
	if k == Explicit {
		return "explicit"
	}
	return "periodic"
}

// Pool places allocations on pages of one storage. Every method runs under
// the device lock.
//
// A reservation hands the chosen slice to its Bind: to the buffer named
// there at once, or, with the zero Bind, as a clone of the slice's handle
// (the "reserved" handle) that the caller binds to the buffer's own
// descriptor later (Slice.Rebind) and releases. A pool has no free call: a
// slice is free when only the pool refers to it (handle.IsFree).
type Pool interface {
	// Index is the pool index stored in every location this pool hands out.
	Index() uint8
	// Accept reports whether the pool serves allocations of size bytes.
	Accept(size uint64) bool
	// TryReserve serves size from room the pool already holds, handing the
	// slice to to (Bind), or returns nil. Slices it merges or drops lose
	// their failure marks in g. st is the pool's storage: on granular
	// storage the slice's granules are mapped before it returns, and a
	// refused mapping changes nothing.
	TryReserve(st storage.Storage, size uint64, g *handle.ErrorGraph, to Bind) *handle.Handle
	// Alloc adds storage (a page) and reserves size on it. On error the pool
	// is unchanged.
	Alloc(st storage.Storage, size uint64) (*handle.Handle, error)
	// Slice returns the slice at loc, or nil when there is none. The pointer
	// is valid until the next call that may add, split or release slices.
	Slice(loc handle.Location) *Slice
	// Cleanup gives back what the pool's policy says may go.
	Cleanup(st storage.Storage, allocNr uint64, kind CleanupKind, g *handle.ErrorGraph)
	// Guard freezes the page (or allocation) at loc; false when there is none.
	Guard(loc handle.Location) (*PageGuard, bool)
	// Report describes the pool's usage.
	Report() Report
}
