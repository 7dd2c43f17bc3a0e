// Taint: which bytes of one slice carry which failure (design §11).
//
// Data structure. A Taint is one slice of spans sorted by offset. Spans are
// half-open, [off, end) with off inclusive and end exclusive, relative to the
// start of the slice the Taint is attached to:
//
//	(T1) spans are non-empty: off < end.
//	(T2) spans are sorted and disjoint across all failures: a byte carries at
//	     most one failure, so set semantics per failure follow.
//	(T3) two neighbouring spans of one failure never touch (a.end < b.off
//	     when a.f == b.f): adjacent claims fuse.
//	(T4) the graph's carrier count of F includes this Taint exactly when some
//	     span has failure F (E1 in errorgraph.go).
//
// Ends saturate: a claim whose off+size overflows ends at math.MaxUint64, so
// the last representable byte index is never marked. No slice is that long.
//
// Because offsets are relative to the slice, relocation moves marks with the
// bytes by moving the *Taint pointer from the old slice to the new one: no
// span is rewritten and no carrier count changes.
//
// Costs. Most slices carry no marks: a nil *Taint is "no marks", and a Taint
// is one slice header (24 bytes). An edit is linear in the spans of that one
// Taint, which holds a handful (one per failed write) in practice; a balanced
// tree would cost more memory per slice for no measurable gain.

package handle

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gpumem/gpumem/storage"
)

// Taint lists, per failure, the sorted disjoint byte ranges of one slice that
// the failure left unwritten. The zero value and a nil *Taint carry no marks.
// Offsets are relative to the slice the Taint is attached to, so moving the
// *Taint pointer between slices moves the marks with the bytes.
//
// Methods that change marks take the ErrorGraph so that its carrier counts
// stay exact; they drop a failure from the graph at once when this Taint was
// its last carrier. A Taint is not safe for concurrent use: the device lock
// serialises it with its graph.
type Taint struct {
	spans []span // T1–T3
}

// span is one marked range [off, end) and the failure that left it
// unwritten.
type span struct {
	off, end uint64
	f        FailureID
}

// Mark records that failure f left [off, off+size) unwritten. The range takes
// its bytes from any other failure; bytes that already carry f are counted
// once; ranges of f that touch fuse. An empty range claims nothing. f must be
// live in g (an internal bug panics otherwise), and t must not be nil: a
// slice with no marks allocates its Taint before marking.
func (t *Taint) Mark(g *ErrorGraph, f FailureID, off, size uint64) {
	end := storage.SatAdd(off, size)
	if end == off {
		return
	}
	if t == nil {
		panic(fmt.Sprintf("handle: Mark of failure %d on a nil Taint", f))
	}
	if !t.has(f) {
		g.carry(f) // panics before t changes if f is not live
	}
	touched := t.carve(off, end)
	i := t.search(off)
	s := span{off: off, end: end, f: f}
	// Fuse with touching neighbours of the same failure (T3). After carve,
	// spans[i-1].end <= off and spans[i].off >= end.
	lo, hi := i, i
	if i > 0 && t.spans[i-1].f == f && t.spans[i-1].end == off {
		s.off = t.spans[i-1].off
		lo = i - 1
	}
	if i < len(t.spans) && t.spans[i].f == f && t.spans[i].off == end {
		s.end = t.spans[i].end
		hi = i + 1
	}
	t.spans = slices.Replace(t.spans, lo, hi, s)
	t.dropGone(g, touched, f)
}

// Release removes the marks on exactly [off, off+size): a successful write of
// those bytes. Failures this Taint no longer holds lose it as a carrier and
// are dropped from g if it was their last.
func (t *Taint) Release(g *ErrorGraph, off, size uint64) {
	if t == nil {
		return
	}
	end := storage.SatAdd(off, size)
	if end == off {
		return
	}
	touched := t.carve(off, end)
	t.dropGone(g, touched, 0)
}

// Clear removes every mark (the slice was dropped, rebound, coalesced or
// released) and releases each failure it held from g.
func (t *Taint) Clear(g *ErrorGraph) {
	if t == nil || len(t.spans) == 0 {
		return
	}
	fs := t.Failures()
	t.spans = nil
	for _, f := range fs {
		g.drop(f)
	}
}

// Find returns the failure of the lowest-offset mark overlapping
// [off, off+size), and false when none does (always for an empty range).
func (t *Taint) Find(off, size uint64) (FailureID, bool) {
	if t == nil {
		return 0, false
	}
	end := storage.SatAdd(off, size)
	if end == off {
		return 0, false
	}
	i := t.search(off)
	if i < len(t.spans) && t.spans[i].off < end {
		return t.spans[i].f, true
	}
	return 0, false
}

// Empty reports whether t carries no marks; a nil *Taint is empty.
func (t *Taint) Empty() bool { return t == nil || len(t.spans) == 0 }

// Failures returns the failures t holds, in increasing FailureID order.
func (t *Taint) Failures() []FailureID {
	if t == nil {
		return nil
	}
	var fs []FailureID
	for _, s := range t.spans {
		if !slices.Contains(fs, s.f) {
			fs = append(fs, s.f)
		}
	}
	slices.Sort(fs)
	return fs
}

// Ranges returns f's marks as half-open {start, end} pairs in increasing
// order (for tests and reports).
func (t *Taint) Ranges(f FailureID) [][2]uint64 {
	if t == nil {
		return nil
	}
	var rs [][2]uint64
	for _, s := range t.spans {
		if s.f == f {
			rs = append(rs, [2]uint64{s.off, s.end})
		}
	}
	return rs
}

// search returns the index of the first span that ends after off.
func (t *Taint) search(off uint64) int {
	return sort.Search(len(t.spans), func(i int) bool { return t.spans[i].end > off })
}

// carve removes [off, end) from every span, splitting spans that straddle an
// edge, and returns the failures whose spans it cut (with repeats).
func (t *Taint) carve(off, end uint64) []FailureID {
	i := t.search(off)
	j := i
	for j < len(t.spans) && t.spans[j].off < end {
		j++
	}
	if i == j {
		return nil
	}
	touched := make([]FailureID, 0, j-i)
	var keep []span
	for _, s := range t.spans[i:j] {
		touched = append(touched, s.f)
		if s.off < off {
			keep = append(keep, span{off: s.off, end: off, f: s.f})
		}
		if s.end > end {
			keep = append(keep, span{off: end, end: s.end, f: s.f})
		}
	}
	t.spans = slices.Replace(t.spans, i, j, keep...)
	if len(t.spans) == 0 {
		t.spans = nil
	}
	return touched
}

// has reports whether some span carries f.
func (t *Taint) has(f FailureID) bool {
	for _, s := range t.spans {
		if s.f == f {
			return true
		}
	}
	return false
}

// dropGone releases from g each touched failure other than keep that t no
// longer holds (T4), each once.
func (t *Taint) dropGone(g *ErrorGraph, touched []FailureID, keep FailureID) {
	for k, f := range touched {
		if f == keep || slices.Contains(touched[:k], f) || t.has(f) {
			continue
		}
		g.drop(f)
	}
}
