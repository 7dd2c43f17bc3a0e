package pool

import (
	"math"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// padded gives what storage.Padding and SatAdd give, on the mask path
// (powers of two) and the division path alike, saturating near the top.
func TestPaddedMatchesStoragePaddingAndSatAdd(t *testing.T) {
	for _, align := range []uint64{0, 1, 2, 32, 48, 512, 1000, 4096, 1 << 21} {
		for _, size := range []uint64{0, 1, 31, 32, 33, 511, 512, 513, 4095, 4096, 1<<20 + 7, math.MaxUint64 - 3, math.MaxUint64} {
			pad, need := padded(size, align)
			wantPad := storage.Padding(size, align)
			if pad != wantPad || need != storage.SatAdd(size, wantPad) {
				t.Errorf("padded(%d, %d) = %d, %d; want %d, %d", size, align, pad, need, wantPad, storage.SatAdd(size, wantPad))
			}
		}
	}
}
