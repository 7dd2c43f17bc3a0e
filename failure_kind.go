package gpumem

import (
	"context"
	"errors"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/storage"
)

// FailureKind names why a reservation or allocation failed, for counters
// keyed by kind: the device's failed-reservation counters
// (Stats.FailedReserves) and the replay's failed allocations
// (replay.Report.FailedAllocsByKind). The kinds, tested in this order:
//
//   - "device_poisoned": the storage is poisoned (ErrDevicePoisoned);
//   - "out_of_memory": the storage refused (ErrOutOfMemory);
//   - "page_sizes_exhausted": no page size fits (ErrPageSizesExhausted);
//   - "buffer_too_big": above the largest allocation (ErrBufferTooBig);
//   - "page_update_forbidden": the reservation needed a page update the
//     stream's state forbids, such as during capture
//     (ErrPageUpdateForbidden);
//   - "index_overflow": a page or slice index would not fit a location
//     (the pools' numbering ran out; the error says which index);
//   - "cancelled": the context ended (context.Canceled or
//     context.DeadlineExceeded);
//   - "other": anything else.
//
// The names are stable: they are map keys in reports and JSON output.
func FailureKind(err error) string {
	switch {
	case storage.IsDevicePoisoned(err):
		return "device_poisoned"
	case errors.Is(err, storage.ErrOutOfMemory):
		return "out_of_memory"
	case errors.Is(err, pool.ErrPageSizesExhausted):
		return "page_sizes_exhausted"
	case errors.Is(err, pool.ErrBufferTooBig):
		return "buffer_too_big"
	case errors.Is(err, memory.ErrPageUpdateForbidden):
		return "page_update_forbidden"
	case errors.Is(err, handle.ErrIndexOverflow):
		return "index_overflow"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "other"
}
