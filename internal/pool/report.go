package pool

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/units"
)

// Usage sums a set of slices or pools.
//
// A slice is live while a handle besides the slice's own holds its
// allocation (a user's buffer, a clone). A slice whose allocation every
// such handle released but that a binding still holds (another stream's
// queued use, a mapping, a graph's guard) is pending free: its user freed
// it, so it is not in use, yet the pool cannot reuse it until the binding
// goes. Counting it apart keeps BytesInUse what the user holds, dropping at
// the last release whichever binding holds the slice back.
type Usage struct {
	Allocations  uint64 // live slices
	BytesInUse   uint64 // Σ requested sizes of live slices
	BytesPadding uint64 // Σ padding of live slices
	// BytesPendingFree is Σ effective sizes (requested size plus padding)
	// of pending-free slices: room the pools hold back for a binding.
	BytesPendingFree uint64
	BytesReserved    uint64 // bytes held from the storage: pages' address space
	// BytesUnmapped is the part of BytesReserved no mapped granule backs:
	// 0 on storage that backs pages whole.
	BytesUnmapped uint64
}

// BytesOccupied is the bytes slices take from their pages: live slices'
// requested sizes and padding, and pending-free slices. The rest of
// BytesMapped is free room.
func (u Usage) BytesOccupied() uint64 {
	return u.BytesInUse + u.BytesPadding + u.BytesPendingFree
}

// addSlice counts s: nothing when it is free, its effective size when it
// is pending free, its requested size and padding when it is live.
func (u *Usage) addSlice(s *Slice) {
	switch desc := s.h.Descriptor(); {
	case desc.IsFree():
	case desc.Handles() >= 2: // the slice's handle and a user's
		u.Allocations++
		u.BytesInUse += s.Region.Size
		u.BytesPadding += s.Padding
	default:
		u.BytesPendingFree += s.EffectiveSize()
	}
}

// BytesMapped is the reserved bytes that are backed: BytesReserved less
// BytesUnmapped. It is what the pages cost the device.
func (u Usage) BytesMapped() uint64 { return u.BytesReserved - min(u.BytesUnmapped, u.BytesReserved) }

// Combine returns u + o.
func (u Usage) Combine(o Usage) Usage {
	return Usage{
		Allocations:      u.Allocations + o.Allocations,
		BytesInUse:       u.BytesInUse + o.BytesInUse,
		BytesPadding:     u.BytesPadding + o.BytesPadding,
		BytesPendingFree: u.BytesPendingFree + o.BytesPendingFree,
		BytesReserved:    u.BytesReserved + o.BytesReserved,
		BytesUnmapped:    u.BytesUnmapped + o.BytesUnmapped,
	}
}

func (u Usage) String() string {
	eff, pad := 0.0, 0.0
	if u.BytesReserved > 0 {
		eff = float64(u.BytesInUse) / float64(u.BytesReserved)
	}
	if u.BytesInUse > 0 {
		pad = float64(u.BytesPadding) / float64(u.BytesInUse)
	}
	pending := ""
	if u.BytesPendingFree > 0 {
		pending = fmt.Sprintf(", %s pending free", units.Bytes(u.BytesPendingFree))
	}
	mapped := ""
	if u.BytesUnmapped > 0 {
		mapped = fmt.Sprintf(" (%s mapped)", units.Bytes(u.BytesMapped()))
	}
	return fmt.Sprintf("%d allocations, %s in use, %s padding%s, %s reserved%s (usage %.1f%%, padding overhead %.1f%%)",
		u.Allocations, units.Bytes(u.BytesInUse), units.Bytes(u.BytesPadding), pending, units.Bytes(u.BytesReserved), mapped, eff*100, pad*100)
}

// Kind describes a pool's placement policy in a report.
type Kind interface{ kind() string }

// SlicedKind is a pool of fixed-size pages carved into slices.
type SlicedKind struct{ PageSize, MaxSlice uint64 }

// AdaptiveKind is the arena's current pool, with the pages its outdated pools hold.
type AdaptiveKind struct{ PageSize, OutdatedPages uint64 }

// ExclusiveKind is a pool of one allocation per page.
type ExclusiveKind struct{ MaxAlloc uint64 }

// DirectKind is the dedicated pool: one device allocation per buffer.
type DirectKind struct{}

// PersistentKind is the exact-fit pool for weights and caches.
type PersistentKind struct{}

func (SlicedKind) kind() string     { return "sliced" }
func (AdaptiveKind) kind() string   { return "adaptive" }
func (ExclusiveKind) kind() string  { return "exclusive" }
func (DirectKind) kind() string     { return "direct" }
func (PersistentKind) kind() string { return "persistent" }

// KindName returns a short name for k.
func KindName(k Kind) string {
	if k == nil {
		return "none"
	}
	return k.kind()
}

// Report describes one pool.
type Report struct {
	Kind         Kind
	Usage        Usage
	Pages        uint64 // pages held now
	PagesPeak    uint64 // the most pages ever held at once
	LargestAlloc uint64 // the largest size ever served
}
