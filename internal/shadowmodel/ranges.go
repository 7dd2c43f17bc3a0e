package shadowmodel

import "slices"

// ranges are sorted, disjoint, non-adjacent [lo, hi) intervals: the bytes
// of a buffer whose last writer failed or was skipped.
type ranges []span

type span struct{ lo, hi uint64 }

func (s ranges) intersects(lo, hi uint64) bool {
	for _, r := range s {
		if r.lo < hi && lo < r.hi {
			return true
		}
	}
	return false
}

func (s ranges) add(lo, hi uint64) ranges {
	if lo >= hi {
		return s
	}
	var out ranges
	for _, r := range s {
		if r.hi < lo || hi < r.lo { // disjoint and not adjacent
			out = append(out, r)
			continue
		}
		lo, hi = min(lo, r.lo), max(hi, r.hi)
	}
	out = append(out, span{lo, hi})
	slices.SortFunc(out, func(a, b span) int { return int(int64(a.lo) - int64(b.lo)) })
	return out
}

func (s ranges) sub(lo, hi uint64) ranges {
	if lo >= hi || len(s) == 0 {
		return s
	}
	var out ranges
	for _, r := range s {
		if r.hi <= lo || hi <= r.lo {
			out = append(out, r)
			continue
		}
		if r.lo < lo {
			out = append(out, span{r.lo, lo})
		}
		if hi < r.hi {
			out = append(out, span{hi, r.hi})
		}
	}
	return out
}
