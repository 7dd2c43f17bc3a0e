package storage

import "math"

// RoundUp returns ceil(x/a)·a, saturating at the largest multiple of a that
// fits a uint64. It uses division, never bit masks: an alignment need not be a
// power of two (tests use 50). An alignment of 0 returns x unchanged.
func RoundUp(x, a uint64) uint64 {
	if a == 0 {
		return x
	}
	q := x / a
	if x%a != 0 {
		if q == math.MaxUint64/a {
			return q * a
		}
		q++
	}
	return q * a
}

// Padding returns the bytes that take x up to the next multiple of a:
// (a − x mod a) mod a. It is 0 for a == 0.
func Padding(x, a uint64) uint64 {
	if a == 0 {
		return 0
	}
	return (a - x%a) % a
}

// SatAdd returns a+b, saturating at math.MaxUint64.
func SatAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// SatSub returns a−b, saturating at 0.
func SatSub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
