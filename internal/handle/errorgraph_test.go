package handle_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
)

// TestErrorGraphKeepsAFailureWhileCarriedAndReportsItsSkipChain: a failure
// lives exactly as long as a Taint or an unplaced buffer carries it, and its
// report walks the skip chain to the root (design §12.2 scenario 7, one subtest
// per clause).
func TestErrorGraphKeepsAFailureWhileCarriedAndReportsItsSkipChain(t *testing.T) {
	t.Run("a node lives while something carries it and no longer", func(t *testing.T) {
		g := handle.NewErrorGraph()
		root := errors.New("launch failed")
		f := g.Fail(root, "kernel")
		var t1, t2 handle.Taint
		t1.Mark(g, f, 0, 64)
		t2.Mark(g, f, 0, 8)
		g.MarkUnplaced(7, f)
		if g.Carriers(f) != 3 {
			t.Fatalf("carriers = %d, want 3 (two Taints, one unplaced buffer)", g.Carriers(f))
		}
		t1.Clear(g)
		g.ReleaseUnplaced(7)
		g.Prune()
		if err, ok := g.Err(f); !ok || err != root || g.Carriers(f) != 1 {
			t.Fatalf("with one carrier left: Err = %v, %v; carriers %d", err, ok, g.Carriers(f))
		}
		t2.Release(g, 0, 8) // a successful write of the last marked bytes
		if _, ok := g.Err(f); ok || g.Live() != 0 || g.Carriers(f) != 0 {
			t.Fatalf("failure outlived its last carrier: live %d", g.Live())
		}
	})
	t.Run("a failure that tainted nothing is pruned", func(t *testing.T) {
		g := handle.NewErrorGraph()
		f := g.Fail(errors.New("nothing written"))
		if _, ok := g.Err(f); !ok || g.Live() != 1 {
			t.Fatal("a fresh failure is not live before Prune")
		}
		g.Prune()
		if _, ok := g.Err(f); ok || g.Live() != 0 {
			t.Fatal("a failure that tainted nothing survived Prune")
		}
	})
	t.Run("replacing an error leaves carriers on the new one", func(t *testing.T) {
		g := handle.NewErrorGraph()
		first := errors.New("enqueue failed")
		second := errors.New("device lost")
		f := g.Fail(first)
		var tt handle.Taint
		tt.Mark(g, f, 0, 16)
		g.MarkUnplaced(3, f)
		g.Replace(f, second)
		if err, ok := g.Err(f); !ok || err != second {
			t.Fatalf("Err after Replace = %v, %v; want %v", err, ok, second)
		}
		if g.Carriers(f) != 2 {
			t.Fatalf("carriers after Replace = %d, want 2", g.Carriers(f))
		}
		if got, ok := tt.Find(0, 16); !ok || got != f {
			t.Fatalf("Taint lost the failure: %d, %v", got, ok)
		}
		err := g.Report(f, 3)
		if !errors.Is(err, second) || errors.Is(err, first) {
			t.Fatalf("report %q does not wrap the new error alone", err)
		}
	})
	t.Run("pruning leaves a carried failure alone", func(t *testing.T) {
		g := handle.NewErrorGraph()
		carried := g.Fail(errors.New("carried"))
		unplaced := g.Fail(errors.New("unplaced"))
		idle := g.Fail(errors.New("idle"))
		var tt handle.Taint
		tt.Mark(g, carried, 4, 4)
		g.MarkUnplaced(9, unplaced)
		g.Prune()
		for _, f := range []handle.FailureID{carried, unplaced} {
			if _, ok := g.Err(f); !ok || g.Carriers(f) != 1 {
				t.Fatalf("Prune dropped carried failure %d", f)
			}
		}
		if _, ok := g.Err(idle); ok {
			t.Fatal("Prune kept a failure nothing carries")
		}
		if g.Live() != 2 {
			t.Fatalf("live = %d, want 2", g.Live())
		}
	})
	t.Run("an unplaced buffer's failure is reported and released with the buffer", func(t *testing.T) {
		g := handle.NewErrorGraph()
		root := errors.New("reserve refused")
		f := g.Fail(root, "reserve")
		const buf handle.ID = 42
		g.MarkUnplaced(buf, f)
		got, ok := g.UnplacedFailure(buf)
		if !ok || got != f {
			t.Fatalf("UnplacedFailure = %d, %v; want %d, true", got, ok, f)
		}
		g.Prune()
		err := g.Report(got, buf)
		if !errors.Is(err, handle.ErrUnwritten) || !errors.Is(err, root) {
			t.Fatalf("report %q does not wrap ErrUnwritten and the root", err)
		}
		if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("failure %d", f)) || !strings.Contains(msg, "buffer 42") {
			t.Fatalf("report %q names neither the failure nor the buffer", msg)
		}
		g.ReleaseUnplaced(buf)
		if _, ok := g.UnplacedFailure(buf); ok {
			t.Fatal("buffer still carries the failure after release")
		}
		if _, ok := g.Err(f); ok || g.Live() != 0 {
			t.Fatal("failure outlived its only carrier, the freed buffer")
		}
		g.ReleaseUnplaced(buf) // a buffer with no failure is ignored
	})
	t.Run("a report walks the skip chain to the root", func(t *testing.T) {
		g := handle.NewErrorGraph()
		root := errors.New("matmul out of memory")
		f := g.Fail(root, "enqueue", "stream 0")
		var tt handle.Taint
		tt.Mark(g, f, 0, 128) // buffer 1, written by the failed matmul
		g.Skip(f, handle.SkipRecord{Op: "relu", Input: 1, Outputs: []handle.ID{2}})
		g.Skip(f, handle.SkipRecord{Op: "unrelated", Input: 1, Outputs: []handle.ID{9}})
		g.Skip(f, handle.SkipRecord{Op: "softmax", Input: 2, Outputs: []handle.ID{5, 3}})
		err := g.Report(f, 3)
		msg := err.Error()
		want := fmt.Sprintf(`read of buffer 3 <- op "softmax" skipped (input buffer 2) <- op "relu" skipped (input buffer 1) <- failure %d [enqueue, stream 0]: matmul out of memory`, f)
		if !strings.HasPrefix(msg, handle.ErrUnwritten.Error()) || !strings.Contains(msg, want) {
			t.Fatalf("report:\n%s\nwant it to contain:\n%s", msg, want)
		}
		if strings.Contains(msg, "unrelated") || strings.Contains(msg, "dropped") {
			t.Fatalf("report names a record off the chain or a drop: %s", msg)
		}
		var ue *handle.UnwrittenError
		if !errors.As(err, &ue) || ue.Failure != f || ue.Buffer != 3 || len(ue.Hops) != 2 || ue.Dropped != 0 {
			t.Fatalf("UnwrittenError = %+v", ue)
		}
		if !errors.Is(err, handle.ErrUnwritten) || !errors.Is(err, root) {
			t.Fatal("report does not wrap ErrUnwritten and the root failure")
		}
		// A read of the root's own buffer has no hops but names the root.
		direct := g.Report(f, 1).Error()
		if !strings.Contains(direct, fmt.Sprintf("read of buffer 1 <- failure %d", f)) {
			t.Fatalf("direct report %q", direct)
		}
	})
	t.Run("with 20 skip records it keeps the newest 16 and says 4 were dropped", func(t *testing.T) {
		g := handle.NewErrorGraph()
		f := g.Fail(errors.New("root"))
		var tt handle.Taint
		tt.Mark(g, f, 0, 1)
		// A chain of 20 skipped ops: op k reads buffer 100+k, writes 101+k.
		for k := range 20 {
			g.Skip(f, handle.SkipRecord{Op: fmt.Sprintf("op%d", k), Input: handle.ID(100 + k), Outputs: []handle.ID{handle.ID(101 + k)}})
		}
		err := g.Report(f, 120)
		var ue *handle.UnwrittenError
		if !errors.As(err, &ue) {
			t.Fatalf("report %T is not an *UnwrittenError", err)
		}
		if len(ue.Hops) != 16 || ue.Hops[0].Op != "op19" || ue.Hops[15].Op != "op4" || ue.Dropped != 4 {
			t.Fatalf("hops %d (first %q, last %q), dropped %d; want 16 from op19 to op4, 4 dropped",
				len(ue.Hops), ue.Hops[0].Op, ue.Hops[len(ue.Hops)-1].Op, ue.Dropped)
		}
		msg := err.Error()
		if !strings.Contains(msg, "4 older skip records dropped") || strings.Contains(msg, `"op3"`) {
			t.Fatalf("report %q", msg)
		}
		if strings.Index(msg, `"op19"`) > strings.Index(msg, `"op4"`) {
			t.Fatalf("hops not newest first: %q", msg)
		}
		if !strings.Contains(msg, fmt.Sprintf("failure %d: root", f)) {
			t.Fatalf("root missing from %q", msg)
		}
	})
}

func TestErrorGraphFailureIDsStartAtOneAndAreNeverReused(t *testing.T) {
	g := handle.NewErrorGraph()
	var prev handle.FailureID
	for range 5 {
		f := g.Fail(errors.New("x"))
		if f <= prev {
			t.Fatalf("FailureID %d after %d", f, prev)
		}
		prev = f
		g.Prune() // the old ID is gone; the next one must still be new
	}
	if prev != 5 {
		t.Fatalf("fifth FailureID = %d, want 5 (from 1, monotonic)", prev)
	}
	var zero handle.ErrorGraph
	if f := zero.Fail(errors.New("x")); f != 1 {
		t.Fatalf("zero-value graph's first FailureID = %d, want 1", f)
	}
}

func TestErrorGraphMarkUnplacedAgainMovesTheBufferToTheNewFailure(t *testing.T) {
	g := handle.NewErrorGraph()
	a := g.Fail(errors.New("a"))
	b := g.Fail(errors.New("b"))
	g.MarkUnplaced(1, a)
	g.MarkUnplaced(1, a) // the same failure again counts once
	if g.Carriers(a) != 1 {
		t.Fatalf("carriers(a) = %d, want 1", g.Carriers(a))
	}
	g.MarkUnplaced(1, b)
	if _, ok := g.Err(a); ok {
		t.Fatal("a outlived its only carrier")
	}
	if f, _ := g.UnplacedFailure(1); f != b || g.Carriers(b) != 1 {
		t.Fatalf("buffer carries %d, carriers(b) %d", f, g.Carriers(b))
	}
}

func TestErrorGraphSkipCopiesOutputsAndCountsEveryRecord(t *testing.T) {
	g := handle.NewErrorGraph()
	f := g.Fail(errors.New("root"))
	g.MarkUnplaced(1, f)
	outs := []handle.ID{2}
	g.Skip(f, handle.SkipRecord{Op: "copy", Input: 1, Outputs: outs})
	outs[0] = 99 // the caller reuses its slice
	var ue *handle.UnwrittenError
	if !errors.As(g.Report(f, 2), &ue) || len(ue.Hops) != 1 || ue.Hops[0].Op != "copy" {
		t.Fatalf("the record followed the caller's slice: %+v", ue)
	}
}

func TestErrorGraphReportOfDroppedFailureStillWrapsErrUnwritten(t *testing.T) {
	g := handle.NewErrorGraph()
	f := g.Fail(errors.New("gone"))
	g.Prune()
	err := g.Report(f, 5)
	if !errors.Is(err, handle.ErrUnwritten) {
		t.Fatalf("report %q does not wrap ErrUnwritten", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("failure %d", f)) {
		t.Fatalf("report %q does not print the failure ID", err)
	}
}

func TestErrorGraphCallsOnUnknownFailuresChangeNothing(t *testing.T) {
	g := handle.NewErrorGraph()
	g.Replace(7, errors.New("x"))
	g.Skip(7, handle.SkipRecord{Op: "op"})
	if g.Live() != 0 || g.Carriers(7) != 0 {
		t.Fatal("calls on an unknown failure created a node")
	}
	if _, ok := g.Err(7); ok {
		t.Fatal("unknown failure answers Err")
	}
}

func TestErrorGraphMarkUnplacedWithUnknownFailurePanics(t *testing.T) {
	g := handle.NewErrorGraph()
	defer func() {
		if recover() == nil {
			t.Fatal("MarkUnplaced with an unknown failure did not panic")
		}
		if _, ok := g.UnplacedFailure(1); ok {
			t.Fatal("the refused MarkUnplaced recorded the buffer")
		}
	}()
	g.MarkUnplaced(1, 3)
}

func TestErrorGraphFailWithNilErrorPanics(t *testing.T) {
	g := handle.NewErrorGraph()
	defer func() {
		if recover() == nil {
			t.Fatal("Fail(nil) did not panic")
		}
	}()
	g.Fail(nil)
}
