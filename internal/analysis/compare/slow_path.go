package compare

import "github.com/gpumem/gpumem/internal/analysis/replay"

// SlowPath is what a policy paid, in one replay at a capacity, to fit it:
// the allocations that had to give cached memory back and retry, and the
// device calls and copies that cost time. A tight fit is not free: a
// setting whose reserve looks low because it keeps flushing its cache
// pays for it here, so a smallest capacity or a headroom is read beside
// these counts.
//
// A field the policy does not have is nil (absent in the JSON), never 0:
// PyTorch's model has no relocations, gpumem's memory no cudaMalloc.
// Under a capacity that does not fit, the counts run up to the first
// failed allocation (the replay stops there).
type SlowPath struct {
	// AllocRetries is PyTorch's num_alloc_retries: allocations for which
	// a new segment was refused, the whole cache released
	// (release_cached_blocks: a device synchronize and a cudaFree of every
	// unused segment) and the allocation retried. The retry that still
	// fails (an out of memory) counts too, as in PyTorch.
	AllocRetries *uint64 `json:"num_alloc_retries,omitempty"`
	// DeviceAllocs and DeviceFrees are PyTorch's num_device_alloc and
	// num_device_free: cudaMalloc and cudaFree calls (with expandable
	// segments, page mappings and unmappings), whichever path made them:
	// a new segment, max_split_size's release of oversize segments,
	// garbage collection, the retry's release.
	DeviceAllocs *uint64 `json:"num_device_alloc,omitempty"`
	DeviceFrees  *uint64 `json:"num_device_free,omitempty"`
	// Cleanups (gpumem) are allocations retried after a cleanup gave
	// cached pages back to make room (gpumem.Stats.ReserveRetries): the
	// counterpart of PyTorch's retries.
	Cleanups *uint64 `json:"cleanups,omitempty"`
	// Relocations and BytesMoved (gpumem) are the relocation runs that
	// moved something and the bytes they copied.
	Relocations *uint64 `json:"relocations,omitempty"`
	BytesMoved  *uint64 `json:"bytes_moved,omitempty"`
}

// slowPathOf reads a policy's slow path from its replay report: PyTorch's
// model reports its counters in the storage fields (replayTorch), a gpumem
// device its cleanups and relocations. nil for no report.
func slowPathOf(policy string, rep *replay.Report) *SlowPath {
	if rep == nil {
		return nil
	}
	v := func(n uint64) *uint64 { return &n }
	if isTorch(policy) {
		return &SlowPath{AllocRetries: v(rep.ReserveRetries), DeviceAllocs: v(rep.StorageAllocs), DeviceFrees: v(rep.StorageDeallocs)}
	}
	return &SlowPath{Cleanups: v(rep.ReserveRetries), Relocations: v(rep.Relocations), BytesMoved: v(rep.BytesMoved)}
}

// Retries is the allocations retried after cached memory went back:
// PyTorch's num_alloc_retries or gpumem's cleanups (0 when neither was
// measured).
func (s *SlowPath) Retries() uint64 {
	switch {
	case s == nil:
		return 0
	case s.AllocRetries != nil:
		return *s.AllocRetries
	case s.Cleanups != nil:
		return *s.Cleanups
	}
	return 0
}
