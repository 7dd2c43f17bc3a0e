package compare

import (
	"fmt"
	"math/bits"

	"github.com/gpumem/gpumem/internal/analysis/replay"
)

// What the page's script draws the panels from: the timelines as compact
// JSON (chartData), the shared scales, the marks of each panel (its peak,
// the smallest capacity, the out-of-memory point), and the stretch of time
// the page opens on.

// chartData is the page's data block (JSON in a script element of type
// application/json, read by panelScript).
//
// A series is packed as a flat list of integers, three a point: the
// event, the trace time (µs) and the bytes in units of Unit, each the
// difference from the point before (the first point's are its own): a
// timeline of a few thousand points takes some tens of KiB where SVG
// coordinates took hundreds. Unit is the largest power of two dividing
// every value, so the bytes are exact.
type chartData struct {
	Unit     uint64 `json:"u"`
	ByEvents bool   `json:"byEvents"`
	// X0 and X1 are the x range of the whole run: trace times (µs), or
	// event indices when the trace has no times.
	X0 int64 `json:"x0"`
	X1 int64 `json:"x1"`
	// Focus, when set, is the x range the page opens on: the peak's
	// neighbourhood, when idle stretches take most of the run's time
	// (focusRange); FocusNote says so in words.
	Focus     []int64 `json:"focus,omitempty"`
	FocusNote string  `json:"focusNote,omitempty"`
	Y         yAxis   `json:"y"`
	YZoom     yAxis   `json:"yZoom"`
	// Capacity is the allocator's share of the capacity asked about (0:
	// none).
	Capacity uint64 `json:"capacity,omitempty"`
	// Live is the live bytes every panel shares (the policies' live bytes
	// are the trace's); a panel whose own differ has its own.
	Live []int64 `json:"live,omitempty"`
	// Recorded is the reserve the snapshot recorded (drawn in steps),
	// RecName who recorded it.
	Recorded []int64     `json:"recorded,omitempty"`
	RecName  string      `json:"recName"`
	Panels   []panelData `json:"panels"`
}

// panelData is one policy's panel.
type panelData struct {
	Name string  `json:"name"`
	Live []int64 `json:"live,omitempty"`
	// Reserved is the device bytes at each change (drawn in steps),
	// and at the last point.
	Reserved []int64 `json:"reserved"`
	// Peak is the highest reserved point: its bytes, event and x.
	Peak      uint64 `json:"peak"`
	PeakEvent int    `json:"peakEvent"`
	PeakX     int64  `json:"peakX"`
	// MinCapacity is the smallest capacity (0: not searched).
	MinCapacity uint64 `json:"minCapacity,omitempty"`
	// OOM is the first failed allocation at the capacity, when any.
	OOM *oomData `json:"oom,omitempty"`
}

type oomData struct {
	Event int   `json:"event"`
	X     int64 `json:"x"`
	// Place names the failing allocation as the report does: its
	// device_traces entry for a snapshot ("device_traces entry 3 (event
	// 1)"), its event for a native trace.
	Place string `json:"place"`
}

// chartData gathers what the panels draw, in panelOrder.
func (c *Comparison) chartData(sc, zoom scales) chartData {
	d := chartData{ByEvents: sc.byEvents, X0: sc.x0, X1: sc.x1, Y: sc.yAxis(), YZoom: zoom.yAxis()}
	if c.Capacity > 0 {
		d.Capacity = c.Capacity - c.Overhead
	}
	order := c.panelOrder()
	// The unit: every value a multiple of it.
	tz := 63
	note := func(b uint64) {
		if b != 0 {
			tz = min(tz, bits.TrailingZeros64(b))
		}
	}
	var shared []replay.Point
	for _, i := range order {
		for _, pt := range c.Policies[i].Timeline {
			note(pt.Live)
			note(pt.Device)
		}
	}
	for _, pt := range c.Recording {
		note(pt.Device)
	}
	d.Unit = 1 << min(tz, 40)
	live := func(pt replay.Point) uint64 { return pt.Live }
	device := func(pt replay.Point) uint64 { return pt.Device }
	if len(order) > 0 {
		shared = c.Policies[order[0]].Timeline
		d.Live = pack(shared, d.Unit, live)
	}
	if len(c.Recording) > 0 {
		d.Recorded = pack(c.Recording, d.Unit, device)
	}
	x := func(event int, t int64) int64 {
		if sc.byEvents {
			return int64(event)
		}
		return t
	}
	for _, i := range order {
		p := c.Policies[i]
		pd := panelData{Name: p.Name, Reserved: pack(changes(p.Timeline), d.Unit, device), MinCapacity: p.MinCapacity}
		if !sameLive(shared, p.Timeline) {
			pd.Live = pack(p.Timeline, d.Unit, live)
		}
		peak := p.Timeline[0]
		for _, pt := range p.Timeline {
			if pt.Device > peak.Device {
				peak = pt
			}
		}
		pd.Peak, pd.PeakEvent, pd.PeakX = peak.Device, peak.Event, x(peak.Event, peak.T)
		if v := p.Verdict; v != nil && !v.Fits && v.OutOfMemory != nil {
			pd.OOM = &oomData{Event: v.OutOfMemory.Event, X: x(v.OutOfMemory.Event, v.OutOfMemory.T), Place: v.oomPlace()}
		}
		d.Panels = append(d.Panels, pd)
	}
	if !sc.byEvents {
		if a, b, idle, ok := focusRange(shared, sc.x0, sc.x1); ok {
			d.Focus = []int64{a, b}
			d.FocusNote = "the peak's neighbourhood: idle stretches take " + percent(idle, sc.x1-sc.x0) + " of the run"
		}
	}
	return d
}

// pack packs a series of points (see chartData).
func pack(pts []replay.Point, unit uint64, val func(replay.Point) uint64) []int64 {
	out := make([]int64, 0, 3*len(pts))
	var e, t, v int64
	for _, pt := range pts {
		pv := int64(val(pt) / unit)
		out = append(out, int64(pt.Event)-e, pt.T-t, pv-v)
		e, t, v = int64(pt.Event), pt.T, pv
	}
	return out
}

// changes are the points where the device bytes change, with the first
// and the last: a step drawing of them is the timeline's.
func changes(pts []replay.Point) []replay.Point {
	var out []replay.Point
	for i, pt := range pts {
		if i == 0 || i == len(pts)-1 || pt.Device != pts[i-1].Device {
			out = append(out, pt)
		}
	}
	return out
}

// sameLive says whether two timelines agree on the live bytes at every
// event both have a point at; every policy's timeline keeps each bucket's
// lowest and highest live points, so agreeing there they draw the same
// live line.
func sameLive(a, b []replay.Point) bool {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i].Event < b[j].Event:
			i++
		case a[i].Event > b[j].Event:
			j++
		default:
			if a[i].Live != b[j].Live {
				return false
			}
			i, j = i+1, j+1
		}
	}
	return true
}

// Idle stretches: a gap between consecutive points longer than
// 1/idleGapDivisor of the run is idle; when idle gaps take more than half
// the run, the page opens on the peak's neighbourhood.
const idleGapDivisor = 50

// focusRange is the stretch of activity around the peak of live bytes —
// the points between the idle gaps either side of it, widened each way by
// a twentieth of its length, and to a thousandth of the run at least —
// when idle gaps take more than half of the run's time [x0, x1], the
// stretch holds a tenth of the points at least (in a sparse trace every
// gap looks idle) and less than four fifths of the run; idle is their
// total.
func focusRange(pts []replay.Point, x0, x1 int64) (a, b, idle int64, ok bool) {
	span := x1 - x0
	if len(pts) < 2 || span <= 0 {
		return 0, 0, 0, false
	}
	gap := max(span/idleGapDivisor, 1)
	peak := 0
	for i, pt := range pts {
		if i > 0 && pt.T-pts[i-1].T > gap {
			idle += pt.T - pts[i-1].T
		}
		if pt.Live > pts[peak].Live {
			peak = i
		}
	}
	// Time before the first point and after the last is idle too.
	idle += pts[0].T - x0 + x1 - pts[len(pts)-1].T
	if idle*2 <= span {
		return 0, 0, idle, false
	}
	l, r := peak, peak
	for l > 0 && pts[l].T-pts[l-1].T <= gap {
		l--
	}
	for r < len(pts)-1 && pts[r+1].T-pts[r].T <= gap {
		r++
	}
	if n := r - l + 1; n < 2 || n < len(pts)/10 {
		return 0, 0, idle, false // a few points, not a stretch of activity: the trace is sparse
	}
	a, b = pts[l].T, pts[r].T
	pad := max((b-a)/20, 1)
	if least := span / 1000; b-a+2*pad < least {
		pad = (least-(b-a))/2 + 1
	}
	a, b = max(x0, a-pad), min(x1, b+pad)
	if (b-a)*5 >= span*4 {
		return 0, 0, idle, false
	}
	return a, b, idle, true
}

// percent is n of total as a whole percentage.
func percent(n, total int64) string {
	if total <= 0 {
		return "0 %"
	}
	return fmt.Sprintf("%d %%", n*100/total)
}

// zoomScales is sc on a y range that shows where the policies differ: from
// a quarter of the spread below the lowest of peak live and the smallest
// capacities up to sc's top, in ticks of its own.
func (c *Comparison) zoomScales(sc scales) scales {
	lo := c.PeakLive
	var hi uint64
	for _, p := range c.Policies {
		if p.MinCapacity > 0 {
			lo = min(lo, p.MinCapacity)
		}
		for _, pt := range p.Timeline {
			hi = max(hi, pt.Device, pt.Live)
		}
		hi = max(hi, p.MinCapacity)
	}
	for _, pt := range c.Recording {
		hi = max(hi, pt.Device)
	}
	if c.Capacity > 0 {
		hi = max(hi, c.Capacity-c.Overhead)
	}
	if hi <= lo {
		return sc
	}
	bottom := lo - min(lo, (hi-lo)/4)
	z := sc
	z.yStep = niceBytes(max(hi-bottom, 1))
	z.bottom = bottom / z.yStep * z.yStep
	z.top = (hi + z.yStep - 1) / z.yStep * z.yStep
	for (z.top-z.bottom)/z.yStep >= maxTicks*2 { // keep the tick count sane
		z.yStep *= 2
		z.bottom = bottom / z.yStep * z.yStep
		z.top = (hi + z.yStep - 1) / z.yStep * z.yStep
	}
	return z
}
