package gpumem

import (
	"fmt"
	"testing"
)

// Every sentinel a caller can hold names the failure kind the metrics
// count it under: the re-exported values are the ones the layers below
// wrap, so an error from deep in a pool is recognised by the root's name.
func TestEachRootSentinelHasItsFailureKind(t *testing.T) {
	cases := map[error]string{
		ErrOutOfMemory:         "out_of_memory",
		ErrDevicePoisoned:      "device_poisoned",
		ErrPageSizesExhausted:  "page_sizes_exhausted",
		ErrBufferTooBig:        "buffer_too_big",
		ErrPageUpdateForbidden: "page_update_forbidden",
		ErrIndexOverflow:       "index_overflow",
	}
	for sentinel, want := range cases {
		err := fmt.Errorf("gpumem: s0: allocating 4096 bytes: %w", sentinel)
		if got := FailureKind(err); got != want {
			t.Errorf("FailureKind(%v) = %q, want %q", err, got, want)
		}
	}
}
