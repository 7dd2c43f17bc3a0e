package cuda

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpumem/gpumem/storage"
)

func TestDriverErrorMatchesItsClassOnly(t *testing.T) {
	sentinels := []error{
		storage.ErrOutOfMemory, storage.ErrDevicePoisoned, ErrCaptureInvalidated,
		ErrCaptureUnsupported, ErrCaptureUnjoined, ErrCapturedEvent, ErrWrongOwner,
		ErrNoDriver, ErrUnsupported, ErrClosed,
	}
	cases := []struct {
		code int
		want []error
	}{
		{1, nil},
		{2, []error{storage.ErrOutOfMemory}},
		{201, nil},
		{213, nil},
		{214, []error{storage.ErrDevicePoisoned}},
		{600, nil},
		{700, []error{storage.ErrDevicePoisoned}},
		{709, nil},
		{710, []error{storage.ErrDevicePoisoned}},
		{711, nil},
		{713, nil},
		{714, []error{storage.ErrDevicePoisoned}},
		{715, []error{storage.ErrDevicePoisoned}},
		{716, []error{storage.ErrDevicePoisoned}},
		{717, []error{storage.ErrDevicePoisoned}},
		{718, []error{storage.ErrDevicePoisoned}},
		{719, []error{storage.ErrDevicePoisoned}},
		{720, nil},
		{900, []error{ErrCaptureInvalidated, ErrCaptureUnsupported}},
		{901, []error{ErrCaptureInvalidated}},
		{902, nil},
		{903, nil},
		{904, []error{ErrCaptureUnjoined}},
		{905, nil},
		{906, nil},
		{907, []error{ErrCapturedEvent}},
		{908, []error{ErrWrongOwner}},
		{999, nil},
	}
	for _, tc := range cases {
		err := fmt.Errorf("context: %w", &DriverError{Op: "cuX", Code: tc.code, Name: "N"})
		for _, s := range sentinels {
			want := false
			for _, w := range tc.want {
				want = want || w == s
			}
			if got := errors.Is(err, s); got != want {
				t.Errorf("code %d: errors.Is(err, %v) = %v, want %v", tc.code, s, got, want)
			}
		}
	}
}

func TestDriverErrorMessageNamesOpCodeAndName(t *testing.T) {
	e := &DriverError{Op: "cuMemAlloc_v2", Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	if got, want := e.Error(), "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	e = &DriverError{Op: "cuInit", Code: 12345}
	if got := e.Error(); !strings.Contains(got, "unknown CUresult") || !strings.Contains(got, "12345") {
		t.Errorf("Error() = %q, want the unknown code spelled out", got)
	}
}

func TestLinearCoversEveryThread(t *testing.T) {
	cases := []struct {
		n            uint64
		block        uint32
		grid, blockX uint32
	}{
		{0, 0, 1, 256},
		{1, 0, 1, 256},
		{256, 0, 1, 256},
		{257, 0, 2, 256},
		{1000, 100, 10, 100},
		{1001, 100, 11, 100},
	}
	for _, tc := range cases {
		cfg, err := Linear(tc.n, tc.block)
		if err != nil {
			t.Fatalf("Linear(%d, %d): %v", tc.n, tc.block, err)
		}
		if cfg.Grid.X != tc.grid || cfg.Block.X != tc.blockX {
			t.Errorf("Linear(%d, %d) = grid %d block %d, want %d, %d", tc.n, tc.block, cfg.Grid.X, cfg.Block.X, tc.grid, tc.blockX)
		}
	}
	if _, err := Linear(1<<62, 1); err == nil {
		t.Error("Linear(2^62, 1) succeeded; want an error (grid too large)")
	}
}

func TestLinearRefusesShapesBeyondTheDriverLimits(t *testing.T) {
	// The largest grid: 2^31−1 blocks, well past 2^32 threads (the kernels
	// index in 64 bits).
	n := uint64(math.MaxInt32) * 1024
	cfg, err := Linear(n, 1024)
	if err != nil || cfg.Grid.X != math.MaxInt32 {
		t.Fatalf("Linear(%d, 1024) = %+v, %v; want the full grid", n, cfg, err)
	}
	if _, err := Linear(n+1, 1024); err == nil {
		t.Errorf("Linear(%d, 1024) succeeded; want an error (2^31 blocks)", n+1)
	}
	if _, err := Linear(4096, 2048); err == nil {
		t.Error("Linear(4096, 2048) succeeded; want an error (more than 1024 threads per block)")
	}
}

func TestPackParamsLaysValuesWithTheirCSize(t *testing.T) {
	vals, ptrs, sizes, err := packParams("k", []any{uintptr(0x1000), uint64(7), int64(-1), uint32(0xAB), int32(-2), float32(1.5), float64(2.5),
		uint16(0xBEEF), int16(-3), uint8(0xC5), int8(-4)})
	if err != nil {
		t.Fatal(err)
	}
	want := []uint64{0x1000, 7, ^uint64(0), 0xAB, 0xFFFFFFFE, 0x3FC00000, 0x4004000000000000, 0xBEEF, 0xFFFD, 0xC5, 0xFC}
	wantSize := []uintptr{8, 8, 8, 4, 4, 4, 8, 2, 2, 1, 1}
	for i, w := range want {
		if vals[i] != w {
			t.Errorf("slot %d = %#x, want %#x", i, vals[i], w)
		}
		if sizes[i] != wantSize[i] {
			t.Errorf("size %d = %d, want %d", i, sizes[i], wantSize[i])
		}
		if ptrs[i] != unsafe.Pointer(&vals[i]) {
			t.Errorf("pointer %d does not point at its slot", i)
		}
	}
	for _, bad := range []any{int(1), uint(1), "x", []byte{1}} {
		var ae *ArgError
		if _, _, _, err := packParams("k", []any{bad}); !errors.As(err, &ae) || ae.Index != 0 || !errors.Is(err, ErrArgs) {
			t.Errorf("packParams(%T) = %v; want an *ArgError for argument 0 matching ErrArgs", bad, err)
		}
	}
}
