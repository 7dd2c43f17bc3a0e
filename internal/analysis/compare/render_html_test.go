package compare

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// unpackSeries reads a packed series back (chartData's format).
func unpackSeries(t *testing.T, a []int64, unit uint64) []replay.Point {
	t.Helper()
	if len(a)%3 != 0 {
		t.Fatalf("a packed series of %d integers", len(a))
	}
	var out []replay.Point
	var e, tm, v int64
	for i := 0; i < len(a); i += 3 {
		e, tm, v = e+a[i], tm+a[i+1], v+a[i+2]
		out = append(out, replay.Point{Event: int(e), T: tm, Live: uint64(v) * unit})
	}
	return out
}

// The page's data holds the timelines exactly: the shared live bytes are
// the first panel's timeline point for point, each panel's reserved bytes
// its timeline's changes, the recorded reserve every recorded point, all
// to the byte (the unit divides every value); the peaks are the policies'.
func TestHTMLDataHoldsTheTimelinesExactly(t *testing.T) {
	events := synthEvents(t, "transformer", 2, trace.SynthParams{Allocs: 2000})
	first, last := events[0].T, events[len(events)-1].T
	rec := []replay.Point{{Event: 0, T: first, Device: 1 << 30}, {Event: len(events) / 2, T: (first + last) / 2, Device: 5<<30 + 512}, {Event: len(events) - 1, T: last, Device: 3 << 30}}
	c, err := Run(context.Background(), Source{Name: "transformer", Events: events, RecordedTimeline: rec}, Options{
		Policies: []string{Adaptive, Exclusive, Torch}, SkipCapacity: true, Timeline: 300,
	})
	if err != nil {
		t.Fatal(err)
	}
	sc := c.scales()
	d := c.chartData(sc, c.zoomScales(sc))
	if d.Unit == 0 || d.Unit&(d.Unit-1) != 0 || d.ByEvents || d.X0 != first || d.X1 != last {
		t.Fatalf("unit %d, by events %v, x %d..%d; want a power of two and the trace's times %d..%d", d.Unit, d.ByEvents, d.X0, d.X1, first, last)
	}
	if len(d.Panels) != 3 || d.Panels[0].Name != Adaptive {
		t.Fatalf("panels %+v, want the report's order for a trace that is no snapshot", d.Panels)
	}
	same := func(what string, got, want []replay.Point, val func(replay.Point) uint64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d points, want %d", what, len(got), len(want))
		}
		for i := range got {
			if got[i].Event != want[i].Event || got[i].T != want[i].T || got[i].Live != val(want[i]) {
				t.Fatalf("%s: point %d is %+v, want event %d, t %d, %d B", what, i, got[i], want[i].Event, want[i].T, val(want[i]))
			}
		}
	}
	live := func(p replay.Point) uint64 { return p.Live }
	device := func(p replay.Point) uint64 { return p.Device }
	same("live", unpackSeries(t, d.Live, d.Unit), c.Policies[0].Timeline, live)
	same("recorded", unpackSeries(t, d.Recorded, d.Unit), rec, device)
	for i, pd := range d.Panels {
		p := c.Policies[i]
		if pd.Live != nil {
			t.Errorf("%s has live bytes of its own: every policy's are the trace's", p.Name)
		}
		same(p.Name+" reserved", unpackSeries(t, pd.Reserved, d.Unit), changes(p.Timeline), device)
		if pd.Peak != p.PeakReserved {
			t.Errorf("%s: peak %d, want %d", p.Name, pd.Peak, p.PeakReserved)
		}
	}
	// A panel whose live bytes differ gets its own.
	c.Policies[1].Timeline = append([]replay.Point(nil), c.Policies[1].Timeline...)
	c.Policies[1].Timeline[3].Live++
	if d := c.chartData(sc, sc); d.Panels[1].Live == nil || d.Panels[0].Live != nil || d.Unit != 1 {
		t.Errorf("a policy with other live bytes: own live %v, unit %d", d.Panels[1].Live != nil, d.Unit)
	}
}

// focusRange opens on the peak's stretch of activity only when idle gaps
// take most of the run.
func TestHTMLFocusRange(t *testing.T) {
	at := func(ts []int64, live ...uint64) []replay.Point {
		var out []replay.Point
		for i, tm := range ts {
			out = append(out, replay.Point{Event: i, T: tm, Live: live[min(i, len(live)-1)]})
		}
		return out
	}
	var busy []int64
	for i := range 30 {
		busy = append(busy, int64(i))
	}
	for _, tc := range []struct {
		name   string
		pts    []replay.Point
		x0, x1 int64
		ok     bool
		a, b   int64
	}{
		{"burst after idle", at([]int64{0, 10, 1000, 1010, 1020}, 1, 2, 1, 5, 2), 0, 1020, true, 999, 1020},
		{"busy all along", at([]int64{0, 200, 400, 600, 800, 1000}, 0, 1, 2, 3, 2, 1), 0, 1000, false, 0, 0},
		{"a peak of two points", at(append(busy, 10000, 10001), append(make([]uint64, 30), 9, 1)...), 0, 10001, false, 0, 0},
		{"one point", at([]int64{5}, 1), 0, 10, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, idle, ok := focusRange(tc.pts, tc.x0, tc.x1)
			if ok != tc.ok || ok && (a != tc.a || b != tc.b) {
				t.Fatalf("focus %v %d..%d (idle %d), want %v %d..%d", ok, a, b, idle, tc.ok, tc.a, tc.b)
			}
		})
	}
}

// On the shared snapshots: the U-Net's page opens on its last iterations
// (the peak, after an idle stretch of over a second), the forward pass's
// on its last 100 ms (two thirds of its time pass before its first
// allocation after the prelude); the training step, whose idle start is a
// third of it, on the whole run; every snapshot puts PyTorch's panels
// first.
func TestHTMLOpensOnThePeakOfTheSharedSnapshots(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to float64 // the focus, in seconds from the first event; 0, 0: none
	}{{"unet-snapshot.pickle", 1.5, 1.885}, {"transformer-ctx128-forward.pickle", 0.19, 0.2954}, {"transformer-ctx128-fullstep.pickle", 0, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Run(context.Background(), sharedSource(t, tc.name), Options{SkipCapacity: true, Timeline: 1500, Policies: []string{Adaptive, Torch}})
			if err != nil {
				t.Fatal(err)
			}
			sc := c.scales()
			d := c.chartData(sc, sc)
			if d.Panels[0].Name != Torch {
				t.Errorf("first panel %s, want torch", d.Panels[0].Name)
			}
			if tc.to == 0 {
				if d.Focus != nil {
					t.Errorf("opens on %v of %d..%d", d.Focus, d.X0, d.X1)
				}
				return
			}
			if d.Focus == nil || float64(d.Focus[0]-d.X0) < tc.from*1e6 || float64(d.Focus[1]-d.X0) > tc.to*1e6 || d.Focus[1] != d.X1 || !strings.Contains(d.FocusNote, "idle stretches take") {
				t.Fatalf("opens on %v (%q) of %d..%d, want from %.3f s on", d.Focus, d.FocusNote, d.X0, d.X1, tc.from)
			}
			t.Logf("opens on %.3f s to %.3f s of %.3f s: %s", float64(d.Focus[0]-d.X0)/1e6, float64(d.Focus[1]-d.X0)/1e6, float64(d.X1-d.X0)/1e6, d.FocusNote)
		})
	}
}

// Policies failing at the same request with the same live allocations
// share one failure view: the request, the ten largest live allocations
// in order and the rest, adding up to the live bytes; a trace without
// times draws by event; a page without timelines still renders.
func TestHTMLFailureViewAndPagesWithoutTimes(t *testing.T) {
	src, before := idleSnapshot(t)
	c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive, Torch}, SkipCapacity: true, Timeline: 100, Capacity: before + 32<<20, Frames: 3})
	if err != nil {
		t.Fatal(err)
	}
	views := c.failureViews()
	if len(views) != 1 || strings.Join(views[0].Policies, ",") != "torch,adaptive" {
		t.Fatalf("%d views: %+v; want one for torch and adaptive", len(views), views)
	}
	v, o := views[0], c.Policies[1].Verdict.OutOfMemory
	sum := uint64(0)
	for i, r := range v.Rows {
		if r.Bytes != o.LargestLive[i].Size || r.Rank != i+1 || len(r.Frames) == 0 || !strings.HasPrefix(r.Where, "device_traces entry") {
			t.Errorf("row %d: %+v, want %+v", i, r, o.LargestLive[i])
		}
		sum += r.Bytes
	}
	if v.Rest == nil || sum+v.Rest.Bytes != o.Live || v.Request.Bytes != 64<<20 || !strings.Contains(v.CauseText, "exhaustion") {
		t.Errorf("rest %+v, request %+v, cause %q; the rows add up to %d of %d", v.Rest, v.Request, v.CauseText, sum, o.Live)
	}

	// Events without times: drawn by event.
	var l eventLog
	for i := range 50 {
		l.alloc(uint64(i+1), 1<<20)
	}
	for i := range l {
		l[i].T = 0
	}
	c, err = Run(context.Background(), Source{Name: "untimed", Events: l}, Options{Policies: []string{Adaptive}, SkipCapacity: true, Timeline: 100})
	if err != nil {
		t.Fatal(err)
	}
	sc := c.scales()
	if d := c.chartData(sc, sc); !d.ByEvents || d.X0 != 0 || d.X1 != 49 || d.Panels[0].PeakX != int64(c.Policies[0].PeakEvent) || d.Focus != nil {
		t.Errorf("by events %v, x %d..%d, peak at %d, focus %v", d.ByEvents, d.X0, d.X1, d.Panels[0].PeakX, d.Focus)
	}
	// No timelines (Options.Timeline 0): no panel, the rest of the page.
	c, err = Run(context.Background(), Source{Name: "untimed", Events: l}, Options{Policies: []string{Adaptive}, SkipCapacity: true})
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	standalone(t, page.Bytes())
	if strings.Contains(page.String(), `<section class="panel"`) || !strings.Contains(page.String(), `<table id="figures">`) {
		t.Errorf("a page without timelines:\n%.3000s", page.String())
	}
}
