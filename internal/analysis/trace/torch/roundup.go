// roundup_power2_divisions: rounding requests up to a fraction of their
// power-of-two interval, so that slightly different sizes (a batch of N+1
// instead of N) land on the same block size and reuse each other's blocks.
//
// Source: AcceleratorAllocatorConfig::roundup_power2_divisions(size) and
// parseRoundUpPower2Divisions (c10/core/AllocatorConfig.cpp), round_size
// and roundup_power2_next_division (c10/cuda/CUDACachingAllocator.cpp).
//
// Table. Sixteen intervals, index i = floor(log2(size)) − 20 clamped to
// [0, 15]: index 0 is every size below 2 MiB, index i (1 ≤ i ≤ 14) is
// [2^i MiB, 2^(i+1) MiB), index 15 is 32 GiB and up. The conf names an
// interval by its lower bound in MiB (a power of two; "256" is index 8) and
// PyTorch's snapshot writes the table with keys "1", "2", … "32768".
//
// Parsing a list (PyTorch's order of effects, kept exactly):
//  1. the first "B:N" also fills every interval below B's with N;
//  2. each "B:N" sets B's interval;
//  3. ">:N" fills every interval above the last B given (newer PyTorch:
//     last_index + 1; releases before 2.5 also overwrote the last B's own
//     interval, which this model does not follow).
//
// A single value "N" sets all sixteen. Divisions are 0 or a power of two;
// the single form refuses 0.
//
// Rounding (round_size): below 512 B → 512 B; else with N = the interval's
// divisions, when N > 1 and size > 512·N, a power of two stays, and any
// other size rounds up to the next multiple of floor_pow2(size)/N; else up
// to a multiple of 512 B. Worked example of the source comment: 1200 B with
// 4 divisions lies between 1024 and 2048, steps 1024, 1280, 1536, 1792, so
// 1280 — but round_size applies it only above 512·4 = 2048 B, so a real
// 1200 B request rounds to 1536 B (the 512 B rule). Since N is a power of
// two and size > 512·N, the step is at least 512 B, so every rounded size
// stays a multiple of 512 B, and a size ≤ 1 MiB never rounds above 1 MiB
// (a power of two), so the small/large pool choice is unchanged.

package torch

import (
	"math/bits"
	"strconv"
	"strings"
)

// DivisionIntervals is the number of power-of-two intervals of
// roundup_power2_divisions (kRoundUpPowerOfTwoIntervals).
const DivisionIntervals = 16

// Divisions is roundup_power2_divisions: Divisions[i] steps in interval i
// (see roundup.go's header for the intervals); 0 or 1 = no rounding beyond
// 512 B there.
type Divisions [DivisionIntervals]uint64

// UniformDivisions is the single-value form "roundup_power2_divisions:n".
func UniformDivisions(n uint64) Divisions {
	var d Divisions
	for i := range d {
		d[i] = n
	}
	return d
}

// divisionIndex is the interval of size (roundup_power2_divisions(size)).
func divisionIndex(size uint64) int {
	if size == 0 {
		return 0
	}
	logSize := bits.Len64(size) - 1
	const start = 20 // log2(kRoundUpPowerOfTwoStart = 1 MiB)
	if logSize <= start {
		return 0
	}
	return min(logSize-start, DivisionIntervals-1)
}

// divisionKeyMB is interval i's name in the conf and the snapshot: 2^i MiB.
func divisionKeyMB(i int) uint64 { return 1 << i }

// RoundSize is round_size under s: the block size a request of size bytes
// takes. With no divisions set it is the package-level RoundSize.
func (s Settings) RoundSize(size uint64) uint64 {
	if size < MinBlockSize {
		return MinBlockSize
	}
	if n := s.RoundupPower2Divisions[divisionIndex(size)]; n > 1 && size > MinBlockSize*n {
		return nextDivision(size, n)
	}
	return RoundSize(size)
}

// nextDivision is roundup_power2_next_division for n ≥ 2 divisions.
func nextDivision(size, n uint64) uint64 {
	if size&(size-1) == 0 {
		return size
	}
	floor := uint64(1) << (bits.Len64(size) - 1)
	step := floor >> (bits.Len64(n) - 1)
	if step == 0 {
		return floor << 1
	}
	if down := size &^ (step - 1); down != size {
		return down + step
	}
	return size
}

// String writes d in the conf's syntax: the single value when all
// intervals agree (and are not all 0), else the shortest list that parses
// back to d: the first run of equal intervals as one "B:N" (rule 1 fills
// below B), every later interval as its own "B:N" (rule 2 sets one), the
// last run as ">:N" (rule 3), left out when it is 0, the value the parser
// starts from. The zero Divisions is "[]".
func (d Divisions) String() string {
	if d[0] != 0 && d == UniformDivisions(d[0]) {
		return strconv.FormatUint(d[0], 10)
	}
	last := DivisionIntervals - 1 // start of the trailing run
	for last > 0 && d[last-1] == d[last] {
		last--
	}
	first := 0 // end of the leading run
	for first < last-1 && d[first+1] == d[0] {
		first++
	}
	var parts []string
	entry := func(i int) {
		parts = append(parts, strconv.FormatUint(divisionKeyMB(i), 10)+":"+strconv.FormatUint(d[i], 10))
	}
	if last > 1 || d[0] != 0 { // "[>:N]" alone already leaves interval 0 at 0
		entry(first)
		for i := first + 1; i < last; i++ {
			entry(i)
		}
	}
	if d[last] != 0 {
		parts = append(parts, ">:"+strconv.FormatUint(d[last], 10))
	}
	return "[" + strings.Join(parts, ",") + "]"
}
