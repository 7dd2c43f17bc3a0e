package storage_test

import (
	"testing"

	"github.com/gpumem/gpumem/storage"
)

const granule = 2 << 20

func TestGranulesCoversEveryGranuleAWindowTouches(t *testing.T) {
	for _, c := range []struct{ off, size, first, n uint64 }{
		{0, 1, 0, 1},
		{0, granule, 0, 1},
		{0, granule + 1, 0, 2},
		{granule - 1, 2, 0, 2},
		{3 << 20, 8 << 20, 1, 5},
		{5 << 20, 0, 2, 0},
	} {
		first, n := storage.Granules(c.off, c.size, granule)
		if (n != c.n) || (n > 0 && first != c.first) {
			t.Errorf("Granules(%d, %d) = [%d, +%d), want [%d, +%d)", c.off, c.size, first, n, c.first, c.n)
		}
	}
}
