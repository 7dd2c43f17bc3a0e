package trace

import (
	"errors"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/relocation"
)

// failureKind names a failed allocation's error for the report.
func failureKind(err error) string {
	switch {
	case errors.Is(err, gpumem.ErrDevicePoisoned):
		return "device_poisoned"
	case errors.Is(err, gpumem.ErrOutOfMemory):
		return "out_of_memory"
	case errors.Is(err, gpumem.ErrPageSizesExhausted):
		return "page_sizes_exhausted"
	case errors.Is(err, gpumem.ErrBufferTooBig):
		return "buffer_too_big"
	case errors.Is(err, gpumem.ErrPageUpdateForbidden):
		return "page_update_forbidden"
	}
	return "other"
}

func relocationReason(i int) string { return relocation.Reason(i).String() }
