package handle_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpumem/gpumem/internal/handle"
)

// ranges is shorthand for a want list of half-open {start, end} pairs.
func ranges(pairs ...uint64) [][2]uint64 {
	var rs [][2]uint64
	for i := 0; i+1 < len(pairs); i += 2 {
		rs = append(rs, [2]uint64{pairs[i], pairs[i+1]})
	}
	return rs
}

func wantRanges(t *testing.T, tt *handle.Taint, f handle.FailureID, want [][2]uint64) {
	t.Helper()
	if got := tt.Ranges(f); !slices.Equal(got, want) {
		t.Fatalf("ranges of failure %d = %v, want %v", f, got, want)
	}
}

// TestTaintTracksWhichBytesCarryWhichFailure: marking, releasing and
// clearing byte ranges keeps each failure on exactly the bytes it claims and
// counts each Taint once as its carrier (design §12.2 scenario 8, one subtest
// per clause).
func TestTaintTracksWhichBytesCarryWhichFailure(t *testing.T) {
	t.Run("partial write releases only the bytes it covers", func(t *testing.T) {
		g := handle.NewErrorGraph()
		f := g.Fail(errors.New("kernel failed"))
		var tt handle.Taint
		tt.Mark(g, f, 0, 100)
		tt.Release(g, 40, 20)
		wantRanges(t, &tt, f, ranges(0, 40, 60, 100))
		if got, ok := tt.Find(40, 20); ok {
			t.Fatalf("written bytes still carry failure %d", got)
		}
		if got, ok := tt.Find(39, 2); !ok || got != f {
			t.Fatalf("Find(39, 2) = %d, %v; want %d, true", got, ok, f)
		}
		if g.Carriers(f) != 1 || g.Live() != 1 {
			t.Fatalf("carriers %d live %d, want 1 and 1", g.Carriers(f), g.Live())
		}
	})
	t.Run("disjoint claims keep their failures", func(t *testing.T) {
		g := handle.NewErrorGraph()
		a := g.Fail(errors.New("a"))
		b := g.Fail(errors.New("b"))
		var tt handle.Taint
		tt.Mark(g, a, 0, 10)
		tt.Mark(g, b, 20, 10)
		wantRanges(t, &tt, a, ranges(0, 10))
		wantRanges(t, &tt, b, ranges(20, 30))
		if got := tt.Failures(); !slices.Equal(got, []handle.FailureID{a, b}) {
			t.Fatalf("Failures() = %v, want [%d %d]", got, a, b)
		}
		if g.Carriers(a) != 1 || g.Carriers(b) != 1 {
			t.Fatalf("carriers a=%d b=%d, want 1 each", g.Carriers(a), g.Carriers(b))
		}
		if got, _ := tt.Find(5, 20); got != a {
			t.Fatalf("Find over both claims = %d, want the lower one %d", got, a)
		}
		if got, _ := tt.Find(12, 100); got != b {
			t.Fatalf("Find(12, 100) = %d, want %d", got, b)
		}
		if _, ok := tt.Find(10, 10); ok {
			t.Fatal("the gap [10, 20) carries a failure")
		}
	})
	t.Run("a new failure takes the bytes it claims", func(t *testing.T) {
		g := handle.NewErrorGraph()
		a := g.Fail(errors.New("a"))
		b := g.Fail(errors.New("b"))
		var tt handle.Taint
		tt.Mark(g, a, 0, 100)
		tt.Mark(g, b, 30, 40)
		wantRanges(t, &tt, a, ranges(0, 30, 70, 100))
		wantRanges(t, &tt, b, ranges(30, 70))
		// Taking every remaining byte of a drops a from the graph at once.
		tt.Mark(g, b, 0, 100)
		wantRanges(t, &tt, a, nil)
		wantRanges(t, &tt, b, ranges(0, 100))
		if _, ok := g.Err(a); ok {
			t.Fatal("failure a still live after losing all its bytes")
		}
		if g.Carriers(b) != 1 || g.Live() != 1 {
			t.Fatalf("carriers(b) %d live %d, want 1 and 1", g.Carriers(b), g.Live())
		}
	})
	t.Run("re-tainting counts once", func(t *testing.T) {
		g := handle.NewErrorGraph()
		f := g.Fail(errors.New("f"))
		var tt handle.Taint
		tt.Mark(g, f, 0, 10)
		tt.Mark(g, f, 0, 10)
		tt.Mark(g, f, 50, 10)
		wantRanges(t, &tt, f, ranges(0, 10, 50, 60))
		if g.Carriers(f) != 1 {
			t.Fatalf("carriers %d after three marks on one Taint, want 1", g.Carriers(f))
		}
		// One release of the bytes undoes it: nothing is counted twice.
		tt.Release(g, 0, 60)
		if g.Live() != 0 || !tt.Empty() {
			t.Fatalf("live %d empty %v after releasing all bytes, want 0 and true", g.Live(), tt.Empty())
		}
	})
	t.Run("adjacent claims of one failure fuse", func(t *testing.T) {
		g := handle.NewErrorGraph()
		f := g.Fail(errors.New("f"))
		var tt handle.Taint
		tt.Mark(g, f, 10, 10)
		tt.Mark(g, f, 30, 10)
		tt.Mark(g, f, 20, 10) // fills the gap: both neighbours touch
		wantRanges(t, &tt, f, ranges(10, 40))
		tt.Mark(g, f, 0, 10) // touches on the left
		tt.Mark(g, f, 40, 5) // touches on the right
		wantRanges(t, &tt, f, ranges(0, 45))
	})
	t.Run("adjacent claims of different failures stay apart", func(t *testing.T) {
		g := handle.NewErrorGraph()
		a := g.Fail(errors.New("a"))
		b := g.Fail(errors.New("b"))
		var tt handle.Taint
		tt.Mark(g, a, 0, 10)
		tt.Mark(g, b, 10, 10)
		tt.Mark(g, a, 20, 10)
		wantRanges(t, &tt, a, ranges(0, 10, 20, 30))
		wantRanges(t, &tt, b, ranges(10, 20))
	})
	t.Run("clearing releases everything", func(t *testing.T) {
		g := handle.NewErrorGraph()
		a := g.Fail(errors.New("a"))
		b := g.Fail(errors.New("b"))
		var t1, t2 handle.Taint
		t1.Mark(g, a, 0, 10)
		t1.Mark(g, b, 10, 10)
		t2.Mark(g, b, 0, 4)
		t1.Clear(g)
		if !t1.Empty() || t1.Failures() != nil {
			t.Fatalf("cleared Taint still holds %v", t1.Failures())
		}
		if _, ok := g.Err(a); ok {
			t.Fatal("failure a outlived its only carrier")
		}
		if g.Carriers(b) != 1 {
			t.Fatalf("carriers(b) = %d after clearing one of its two Taints, want 1", g.Carriers(b))
		}
		t2.Clear(g)
		if g.Live() != 0 {
			t.Fatalf("live %d after clearing every Taint, want 0", g.Live())
		}
	})
	t.Run("an empty range claims nothing", func(t *testing.T) {
		g := handle.NewErrorGraph()
		a := g.Fail(errors.New("a"))
		b := g.Fail(errors.New("b"))
		var tt handle.Taint
		tt.Mark(g, a, 0, 10)
		tt.Mark(g, b, 5, 0)
		if !slices.Equal(tt.Failures(), []handle.FailureID{a}) || g.Carriers(b) != 0 {
			t.Fatalf("empty claim registered: failures %v, carriers(b) %d", tt.Failures(), g.Carriers(b))
		}
		wantRanges(t, &tt, a, ranges(0, 10))
		var untouched handle.Taint
		untouched.Mark(g, b, 7, 0)
		if !untouched.Empty() {
			t.Fatal("an empty claim marked an empty Taint")
		}
		if _, ok := tt.Find(5, 0); ok {
			t.Fatal("Find of an empty range found a failure")
		}
		tt.Release(g, 5, 0)
		wantRanges(t, &tt, a, ranges(0, 10))
	})
}

func TestTaintMarkOverlappingSameFailureMergesIntoOneRange(t *testing.T) {
	g := handle.NewErrorGraph()
	f := g.Fail(errors.New("f"))
	var tt handle.Taint
	tt.Mark(g, f, 10, 20) // [10, 30)
	tt.Mark(g, f, 25, 20) // [25, 45) overlaps the tail
	tt.Mark(g, f, 5, 10)  // [5, 15) overlaps the head
	wantRanges(t, &tt, f, ranges(5, 45))
	tt.Mark(g, f, 15, 5) // inside: no change
	wantRanges(t, &tt, f, ranges(5, 45))
	if g.Carriers(f) != 1 {
		t.Fatalf("carriers = %d, want 1", g.Carriers(f))
	}
}

func TestTaintMarkSpanningSeveralFailuresTakesAllTheirBytes(t *testing.T) {
	g := handle.NewErrorGraph()
	a := g.Fail(errors.New("a"))
	b := g.Fail(errors.New("b"))
	c := g.Fail(errors.New("c"))
	var tt handle.Taint
	tt.Mark(g, a, 0, 10)
	tt.Mark(g, b, 10, 10)
	tt.Mark(g, a, 20, 10)
	tt.Mark(g, c, 5, 20) // [5, 25): cuts a's both ranges, swallows b
	wantRanges(t, &tt, a, ranges(0, 5, 25, 30))
	wantRanges(t, &tt, b, nil)
	wantRanges(t, &tt, c, ranges(5, 25))
	if _, ok := g.Err(b); ok {
		t.Fatal("failure b still live after c took all its bytes")
	}
	if g.Carriers(a) != 1 || g.Carriers(c) != 1 {
		t.Fatalf("carriers a=%d c=%d, want 1 each", g.Carriers(a), g.Carriers(c))
	}
}

func TestTaintEndsSaturateAtMaxUint64(t *testing.T) {
	g := handle.NewErrorGraph()
	f := g.Fail(errors.New("f"))
	var tt handle.Taint
	tt.Mark(g, f, math.MaxUint64-10, math.MaxUint64)
	wantRanges(t, &tt, f, ranges(math.MaxUint64-10, math.MaxUint64))
	if got, ok := tt.Find(math.MaxUint64-1, math.MaxUint64); !ok || got != f {
		t.Fatalf("Find near the top = %d, %v; want %d, true", got, ok, f)
	}
	// off = MaxUint64 is an empty range whatever the size: it claims nothing.
	h := g.Fail(errors.New("h"))
	tt.Mark(g, h, math.MaxUint64, 5)
	if g.Carriers(h) != 0 {
		t.Fatalf("a claim starting at MaxUint64 registered a carrier")
	}
	tt.Release(g, 0, math.MaxUint64)
	if !tt.Empty() || g.Carriers(f) != 0 {
		t.Fatalf("a release of everything left %v", tt.Ranges(f))
	}
}

func TestTaintNilIsEmptyAndIgnoresReads(t *testing.T) {
	g := handle.NewErrorGraph()
	var tt *handle.Taint
	if !tt.Empty() {
		t.Fatal("nil Taint is not empty")
	}
	if _, ok := tt.Find(0, math.MaxUint64); ok {
		t.Fatal("nil Taint found a failure")
	}
	if tt.Failures() != nil || tt.Ranges(1) != nil {
		t.Fatal("nil Taint lists marks")
	}
	tt.Release(g, 0, 10)
	tt.Clear(g)
	if g.Live() != 0 {
		t.Fatalf("live = %d", g.Live())
	}
}

func TestTaintMarkWithFailureThatIsNotLivePanicsAndChangesNothing(t *testing.T) {
	g := handle.NewErrorGraph()
	f := g.Fail(errors.New("f"))
	g.Prune() // f tainted nothing: gone
	var tt handle.Taint
	defer func() {
		if recover() == nil {
			t.Fatal("Mark with a pruned failure did not panic")
		}
		if !tt.Empty() {
			t.Fatal("the refused Mark changed the Taint")
		}
	}()
	tt.Mark(g, f, 0, 10)
}

func TestTaintMovedBetweenSlicesKeepsItsMarksAndCarriers(t *testing.T) {
	// Relocation moves the *Taint pointer with the bytes: marks are relative
	// to the slice, so nothing is rewritten and nothing is counted again.
	g := handle.NewErrorGraph()
	f := g.Fail(errors.New("f"))
	type slice struct{ taint *handle.Taint }
	from := slice{taint: new(handle.Taint)}
	from.taint.Mark(g, f, 8, 8)
	to := slice{}
	to.taint, from.taint = from.taint, nil
	wantRanges(t, to.taint, f, ranges(8, 16))
	if g.Carriers(f) != 1 || !from.taint.Empty() {
		t.Fatalf("carriers %d after the move, want 1", g.Carriers(f))
	}
	to.taint.Clear(g)
	if g.Live() != 0 {
		t.Fatal("clearing the moved Taint left the failure live")
	}
}

// TestTaintMatchesByteModel drives several Taints sharing one graph with
// random marks, releases and clears, and checks them against a byte-by-byte
// model: which failure each byte carries, T1–T3, and the carrier count of
// every failure (E1, E2).
func TestTaintMatchesByteModel(t *testing.T) {
	const n = 48 // bytes per slice in the model
	rapid.Check(t, func(rt *rapid.T) {
		g := handle.NewErrorGraph()
		taints := make([]*handle.Taint, 3)
		model := make([][n]handle.FailureID, len(taints))
		for i := range taints {
			taints[i] = new(handle.Taint)
		}
		var failures []handle.FailureID
		everCarried := map[handle.FailureID]bool{}
		pickRange := func(rt *rapid.T) (uint64, uint64) {
			off := rapid.Uint64Range(0, n).Draw(rt, "off")
			size := rapid.Uint64Range(0, n-off).Draw(rt, "size")
			return off, size
		}
		rt.Repeat(map[string]func(*rapid.T){
			"fail": func(rt *rapid.T) {
				failures = append(failures, g.Fail(errors.New("x")))
			},
			"mark": func(rt *rapid.T) {
				var live []handle.FailureID
				for _, f := range failures {
					if _, ok := g.Err(f); ok {
						live = append(live, f)
					}
				}
				if len(live) == 0 {
					rt.Skip("no live failure")
				}
				f := rapid.SampledFrom(live).Draw(rt, "f")
				i := rapid.IntRange(0, len(taints)-1).Draw(rt, "taint")
				off, size := pickRange(rt)
				taints[i].Mark(g, f, off, size)
				for b := off; b < off+size; b++ {
					model[i][b] = f
				}
			},
			"release": func(rt *rapid.T) {
				i := rapid.IntRange(0, len(taints)-1).Draw(rt, "taint")
				off, size := pickRange(rt)
				taints[i].Release(g, off, size)
				for b := off; b < off+size; b++ {
					model[i][b] = 0
				}
			},
			"clear": func(rt *rapid.T) {
				i := rapid.IntRange(0, len(taints)-1).Draw(rt, "taint")
				taints[i].Clear(g)
				model[i] = [n]handle.FailureID{}
			},
			"prune": func(rt *rapid.T) { g.Prune() },
			"": func(rt *rapid.T) {
				carriers := map[handle.FailureID]int{}
				for i, tt := range taints {
					seen := map[handle.FailureID]bool{}
					var last [2]uint64
					var lastF handle.FailureID
					for _, f := range tt.Failures() {
						for _, r := range tt.Ranges(f) {
							if r[0] >= r[1] {
								rt.Fatalf("taint %d: empty range %v", i, r)
							}
						}
					}
					for b := range uint64(n) {
						got, ok := tt.Find(b, 1)
						want := model[i][b]
						if ok != (want != 0) || (ok && got != want) {
							rt.Fatalf("taint %d byte %d carries %d (%v), model %d", i, b, got, ok, want)
						}
						if want != 0 {
							seen[want] = true
						}
					}
					for f := range seen {
						carriers[f]++
						// T3: ranges of one failure are sorted and never touch.
						for k, r := range tt.Ranges(f) {
							if k > 0 && lastF == f && r[0] <= last[1] {
								rt.Fatalf("taint %d failure %d: ranges %v and %v touch or overlap", i, f, last, r)
							}
							last, lastF = r, f
						}
					}
					if len(tt.Failures()) != len(seen) {
						rt.Fatalf("taint %d lists failures %v, model has %v", i, tt.Failures(), seen)
					}
				}
				live := 0
				for _, f := range failures {
					if got := g.Carriers(f); got != carriers[f] {
						rt.Fatalf("carriers(%d) = %d, model %d", f, got, carriers[f])
					}
					_, isLive := g.Err(f)
					if carriers[f] > 0 {
						everCarried[f] = true
						if !isLive {
							rt.Fatalf("failure %d carried but not live", f)
						}
					} else if everCarried[f] && isLive {
						rt.Fatalf("failure %d lost its last carrier but is still live", f)
					}
					if isLive {
						live++
					}
				}
				if g.Live() != live {
					rt.Fatalf("Live() = %d, %d failures answer Err", g.Live(), live)
				}
			},
		})
	})
}
