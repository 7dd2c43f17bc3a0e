package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseSize reads a byte count with an optional unit B, KiB, MiB, GiB or
// TiB (also K, M, G, T, KB, MB, GB, TB as binary units): a finite,
// non-negative number below 2^63 bytes (NaN and infinities are refused).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mul    uint64
	}{
		{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10},
		{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
	}
	mul := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t = strings.TrimSpace(strings.TrimSuffix(t, u.suffix))
			mul = u.mul
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (B, KiB, MiB, GiB, TiB)", s)
	}
	v := f * float64(mul)
	if v >= 1<<63 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return uint64(v), nil
}

// sizeFlag is a flag.Value holding a size; set tells an explicit value
// from the default.
type sizeFlag struct {
	v   uint64
	set bool
}

func (s *sizeFlag) String() string { return strconv.FormatUint(s.v, 10) }
func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	s.v, s.set = n, true
	return nil
}
