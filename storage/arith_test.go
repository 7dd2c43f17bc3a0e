package storage_test

import (
	"math"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

func TestRoundUpAndPaddingUseDivisionSoAlignment50Works(t *testing.T) {
	for _, c := range []struct{ x, a, up, pad uint64 }{
		{0, 50, 0, 0},
		{1, 50, 50, 49},
		{49, 50, 50, 1},
		{50, 50, 50, 0},
		{51, 50, 100, 49},
		{120, 50, 150, 30},
		{33, 32, 64, 31},
		{256, 256, 256, 0},
		{257, 256, 512, 255},
		{7, 1, 7, 0},
	} {
		if got := storage.RoundUp(c.x, c.a); got != c.up {
			t.Errorf("RoundUp(%d, %d) = %d, want %d", c.x, c.a, got, c.up)
		}
		if got := storage.Padding(c.x, c.a); got != c.pad {
			t.Errorf("Padding(%d, %d) = %d, want %d", c.x, c.a, got, c.pad)
		}
	}
}

func TestRoundUpSaturatesAtLargestMultipleBelowMaxUint64(t *testing.T) {
	top50 := uint64(math.MaxUint64 / 50 * 50)
	for _, c := range []struct{ x, a, want uint64 }{
		{math.MaxUint64, 50, top50},
		{top50 + 1, 50, top50},
		{top50, 50, top50},
		{math.MaxUint64, 1, math.MaxUint64},
		{math.MaxUint64, 2, math.MaxUint64 - 1},
		{math.MaxUint64 - 1, math.MaxUint64, math.MaxUint64},
	} {
		if got := storage.RoundUp(c.x, c.a); got != c.want {
			t.Errorf("RoundUp(%d, %d) = %d, want %d", c.x, c.a, got, c.want)
		}
	}
}

func TestRoundUpAndPaddingWithZeroAlignmentLeaveXAlone(t *testing.T) {
	if storage.RoundUp(123, 0) != 123 || storage.Padding(123, 0) != 0 {
		t.Fatal("alignment 0 changed the value")
	}
}

func TestSatAddAndSatSubSaturate(t *testing.T) {
	for _, c := range []struct{ a, b, add, sub uint64 }{
		{1, 2, 3, 0},
		{5, 3, 8, 2},
		{math.MaxUint64, 1, math.MaxUint64, math.MaxUint64 - 1},
		{math.MaxUint64 - 1, 1, math.MaxUint64, math.MaxUint64 - 2},
		{math.MaxUint64, math.MaxUint64, math.MaxUint64, 0},
		{0, math.MaxUint64, math.MaxUint64, 0},
	} {
		if got := storage.SatAdd(c.a, c.b); got != c.add {
			t.Errorf("SatAdd(%d, %d) = %d, want %d", c.a, c.b, got, c.add)
		}
		if got := storage.SatSub(c.a, c.b); got != c.sub {
			t.Errorf("SatSub(%d, %d) = %d, want %d", c.a, c.b, got, c.sub)
		}
	}
}

func FuzzRoundUpPadding(f *testing.F) {
	f.Add(uint64(0), uint64(50))
	f.Add(uint64(51), uint64(50))
	f.Add(uint64(math.MaxUint64), uint64(50))
	f.Add(uint64(math.MaxUint64), uint64(math.MaxUint64))
	f.Add(uint64(math.MaxUint64-1), uint64(2))
	f.Add(uint64(1)<<63, uint64(3))
	f.Add(uint64(12345), uint64(0))
	f.Fuzz(func(t *testing.T, x, a uint64) {
		up, pad := storage.RoundUp(x, a), storage.Padding(x, a)
		if a == 0 {
			if up != x || pad != 0 {
				t.Fatalf("RoundUp(%d, 0) = %d, Padding = %d", x, up, pad)
			}
			return
		}
		if up%a != 0 {
			t.Fatalf("RoundUp(%d, %d) = %d is not a multiple", x, a, up)
		}
		if pad >= a || (x%a+pad)%a != 0 {
			t.Fatalf("Padding(%d, %d) = %d", x, a, pad)
		}
		top := math.MaxUint64 / a * a // the largest multiple of a
		if x > top {
			if up != top {
				t.Fatalf("RoundUp(%d, %d) = %d, want saturation at %d", x, a, up, top)
			}
			return
		}
		if up < x || up-x != pad {
			t.Fatalf("RoundUp(%d, %d) = %d, Padding %d", x, a, up, pad)
		}
		if storage.SatAdd(x, pad) != up || storage.SatSub(up, pad) != x {
			t.Fatalf("SatAdd/SatSub disagree with RoundUp(%d, %d)", x, a)
		}
	})
}
