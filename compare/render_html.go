package compare

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"

	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/replay"
)

// WriteHTML writes one standalone page (no scripts, fonts or other
// external references): per policy a timeline of live and reserved bytes,
// every panel on one y scale in binary units and one x scale in trace
// time, both with ticks; the capacity asked about and each policy's
// smallest capacity as lines; each peak marked; PyTorch's recorded reserve
// beside them; then the figures and the breakdowns as HTML tables, and the
// text report.
//
// The timelines keep each bucket's lowest and highest points (replay R3),
// so a panel's drawn peak is the reported peak to the byte: the peak
// marker carries it in data-bytes.
func (c *Comparison) WriteHTML(w io.Writer) error {
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		return err
	}
	sc := c.scales()
	data := struct {
		C       *Comparison
		Header  []string
		Charts  []chart
		Table   htmlTable
		Parts   htmlTable
		Text    string
		HasRec  bool
		Rec     string // who recorded the reserve: PyTorch, or a snapshot's writer
		HasCap  bool
		Summary []string
		// Title is the page's command; Advice the advice block of
		// advise's page (advise_html.go).
		Title  string
		Advice template.HTML
		Slow   htmlTable
		// Zoomed are the panels again on a y scale from a little below
		// peak live to the top (shown by the zoom checkbox, no script).
		Zoomed    []chart
		ZoomRange string
	}{C: c, Title: "gpumem replay", Text: text.String(), HasRec: len(c.Recording) > 0, HasCap: c.Capacity > 0, Rec: "PyTorch"}
	if c.PyTorch != nil {
		data.Rec = c.PyTorch.Recorder()
	}
	if c.advice != nil {
		advice, err := c.advice.adviceHTML()
		if err != nil {
			return err
		}
		data.Title, data.Advice = "gpumem advise", advice
	}
	zoom := c.zoomScales(sc)
	for _, p := range c.Policies {
		if len(p.Timeline) > 0 {
			data.Charts = append(data.Charts, c.newChart(p, sc, false))
			data.Zoomed = append(data.Zoomed, c.newChart(p, zoom, true))
		}
	}
	data.ZoomRange = binaryLabel(zoom.bottom) + " to " + binaryLabel(zoom.top)
	data.Table, data.Parts = c.htmlTables()
	data.Slow = c.slowPathHTML()
	data.Summary = c.summaryLines()
	return pageTemplate.Execute(w, data)
}

// Panel geometry, in SVG user units.
const (
	chartW, chartH             = 960, 250
	marginLeft, marginRight    = 78, 16
	marginTop, marginBottom    = 14, 34
	plotW                      = chartW - marginLeft - marginRight
	plotH                      = chartH - marginTop - marginBottom
	maxTicks                   = 6
	useEventsWhenTimeSpanBelow = 2 // µs: a trace without times is drawn by event index
)

// scales are the axes every panel shares.
type scales struct {
	top      uint64 // bytes at the top of the plot
	bottom   uint64 // bytes at the bottom: 0, or above it when zoomed (a multiple of yStep)
	yStep    uint64
	x0, x1   int64 // the x range: trace time (µs) or event index
	xStep    int64
	byEvents bool
}

func (c *Comparison) scales() scales {
	var hi uint64 = 1
	for _, p := range c.Policies {
		for _, pt := range p.Timeline {
			hi = max(hi, pt.Live, pt.Device)
		}
		hi = max(hi, p.MinCapacity)
	}
	for _, pt := range c.Recording {
		hi = max(hi, pt.Device)
	}
	hi = max(hi, c.Capacity-c.Overhead*boolToUint(c.Capacity > 0))
	sc := scales{yStep: niceBytes(hi)}
	sc.top = (hi + sc.yStep - 1) / sc.yStep * sc.yStep
	sc.x0, sc.x1 = c.firstT, c.lastT
	if sc.x1-sc.x0 < useEventsWhenTimeSpanBelow {
		sc.byEvents, sc.x0, sc.x1 = true, 0, int64(max(c.Events-1, 1))
	}
	sc.xStep = niceDecimal(sc.x1 - sc.x0)
	return sc
}

func boolToUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// niceBytes is a tick step of 1, 2 or 5 × 10ᵏ binary units (B, KiB, …)
// giving at most maxTicks ticks up to hi.
func niceBytes(hi uint64) uint64 {
	for unit := uint64(1); ; unit <<= 10 {
		for _, m := range []uint64{1, 2, 5, 10, 20, 50, 100, 200, 500} {
			if step := m * unit; hi/step < maxTicks {
				return step
			}
		}
		if unit >= 1<<50 {
			return 1 << 60
		}
	}
}

// niceDecimal is a tick step of 1, 2 or 5 × 10ᵏ giving at most maxTicks
// ticks over span.
func niceDecimal(span int64) int64 {
	for p := int64(1); p < math.MaxInt64/10; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if span/(m*p) < maxTicks {
				return m * p
			}
		}
	}
	return math.MaxInt64
}

// y is the height of b bytes; a level below a zoomed scale's bottom is
// drawn on the bottom edge.
func (sc scales) y(b uint64) float64 {
	b = max(b, sc.bottom)
	return marginTop + plotH - float64(b-sc.bottom)/float64(max(sc.top-sc.bottom, 1))*plotH
}

func (sc scales) x(pt replay.Point) float64 {
	v := pt.T
	if sc.byEvents {
		v = int64(pt.Event)
	}
	return marginLeft + float64(v-sc.x0)/float64(max(sc.x1-sc.x0, 1))*plotW
}

// tick is one axis tick: its position and label.
type tick struct {
	Pos   float64
	Label string
	Bytes uint64
}

func (sc scales) yTicks() []tick {
	var out []tick
	for b := sc.bottom; b <= sc.top; b += sc.yStep {
		out = append(out, tick{Pos: sc.y(b), Label: binaryLabel(b), Bytes: b})
		if sc.top-b < sc.yStep {
			break
		}
	}
	return out
}

func (sc scales) xTicks() []tick {
	var out []tick
	for v := int64(0); v <= sc.x1-sc.x0; v += sc.xStep {
		label := durationUS(v)
		if v == 0 {
			label = "0"
		}
		if sc.byEvents {
			label = fmt.Sprintf("event %d", v)
		}
		out = append(out, tick{Pos: marginLeft + float64(v)/float64(max(sc.x1-sc.x0, 1))*plotW, Label: label})
		if sc.x1-sc.x0-v < sc.xStep {
			break
		}
	}
	return out
}

// binaryLabel is a tick label: whole binary units where it can be.
func binaryLabel(b uint64) string {
	if b == 0 {
		return "0"
	}
	for _, u := range []struct {
		div  uint64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if b >= u.div && b%u.div == 0 {
			return fmt.Sprintf("%d %s", b/u.div, u.name)
		}
	}
	return pool.Bytes(b).String()
}

// hline is a horizontal line across the plot at a byte level.
type hline struct {
	Class, Label string
	Y            float64
	Bytes        uint64
	LabelX       float64
	Anchor       string // the label's text-anchor
}

// chart is one policy's panel.
type chart struct {
	Name                     string
	ID, Class                string   // the svg's id and class: timeline (y from 0) or timeline-zoom
	Verdict                  string   // the policy's verdict at -capacity, "" without one
	Frames                   []string // the top of the failing allocation's stack, if any
	FramesNote               string   // which frames those are
	OOM                      *oomMark
	Hover                    []hoverColumn
	Labels                   []placedLabel
	Live, Reserved, Recorded string // SVG polyline points
	PeakX, PeakY             float64
	Peak                     uint64
	PeakLabel                string
	PeakDX                   int
	PeakAnchor               string
	YTicks, XTicks           []tick
	Lines                    []hline
	W, H                     int
	PlotX0, PlotX1           float64
	PlotY0, PlotY1           float64
	XAxisLabel               string
}

func (c *Comparison) newChart(p PolicyResult, sc scales, zoomed bool) chart {
	poly := func(pts []replay.Point, val func(replay.Point) uint64) string {
		var b strings.Builder
		for _, pt := range pts {
			fmt.Fprintf(&b, "%.2f,%.2f ", sc.x(pt), sc.y(val(pt)))
		}
		return b.String()
	}
	ch := chart{
		Name:     p.Name,
		Live:     poly(p.Timeline, func(pt replay.Point) uint64 { return pt.Live }),
		Reserved: poly(p.Timeline, func(pt replay.Point) uint64 { return pt.Device }),
		Recorded: steps(c.Recording, sc),
		YTicks:   sc.yTicks(), XTicks: sc.xTicks(),
		W: chartW, H: chartH,
		PlotX0: marginLeft, PlotX1: marginLeft + plotW, PlotY0: marginTop, PlotY1: marginTop + plotH,
		XAxisLabel: "trace time",
		ID:         "timeline-" + p.Name, Class: "timeline",
	}
	if zoomed {
		ch.ID, ch.Class = "zoom-"+p.Name, "timeline-zoom"
	}
	if sc.byEvents {
		ch.XAxisLabel = "event"
	}
	peak := p.Timeline[0]
	for _, pt := range p.Timeline {
		if pt.Device > peak.Device {
			peak = pt
		}
	}
	ch.Peak, ch.PeakX, ch.PeakY = peak.Device, sc.x(peak), sc.y(peak.Device)
	ch.PeakLabel = "peak " + pool.Bytes(peak.Device).String()
	// The label sits on the side of the peak with room for it.
	ch.PeakDX, ch.PeakAnchor = 6, "start"
	if ch.PeakX > marginLeft+plotW/2 {
		ch.PeakDX, ch.PeakAnchor = -6, "end"
	}
	// The capacity's label on the left, the smallest capacity's on the
	// right: the two lines are often a few pixels apart.
	if c.Capacity > 0 {
		capBytes := c.Capacity - c.Overhead
		ch.Lines = append(ch.Lines, hline{Class: "capacity", Label: "capacity " + pool.Bytes(capBytes).String(), Y: sc.y(capBytes), Bytes: capBytes,
			LabelX: marginLeft + 4, Anchor: "start"})
	}
	if p.MinCapacity > 0 {
		ch.Lines = append(ch.Lines, hline{Class: "min-capacity", Label: "smallest capacity " + pool.Bytes(p.MinCapacity).String(), Y: sc.y(p.MinCapacity), Bytes: p.MinCapacity,
			LabelX: marginLeft + plotW - 4, Anchor: "end"})
	}
	if v := p.Verdict; v != nil {
		if v.Fits {
			ch.Verdict = "fits " + pool.Bytes(c.Capacity).String() + ", " + pool.Bytes(v.Headroom).String() + " headroom at its peak"
		} else if o := v.OutOfMemory; o != nil {
			ch.Verdict = fmt.Sprintf("does not fit %s: out of memory at event %d (%s requested)", pool.Bytes(c.Capacity), o.Event, pool.Bytes(o.Request))
			if a := v.Allocation; a != nil {
				ch.Verdict = fmt.Sprintf("does not fit %s: out of memory at %s", pool.Bytes(c.Capacity), a)
				if len(a.Frames) > 0 {
					ch.FramesNote = a.framesNote()
					for _, f := range a.Frames {
						ch.Frames = append(ch.Frames, f.String())
					}
				}
			}
			x := sc.x(replay.Point{Event: o.Event, T: o.T})
			ch.OOM = &oomMark{X: x, Event: o.Event, Label: "out of memory at " + v.oomPlace()}
		}
	}
	ch.Labels = ch.placeLabels()
	ch.Hover = hoverColumns(p.Timeline, sc)
	return ch
}

// htmlTable is a table with a grouped header row.
type htmlTable struct {
	Groups  []htmlGroup
	Columns []string
	Rows    [][]string
}

type htmlGroup struct {
	Title string
	Span  int
}

func (c *Comparison) htmlTables() (figures, parts htmlTable) {
	figures.Groups = []htmlGroup{{"", 1}, {"unlimited capacity", 4}, {"smallest capacity", 5}}
	figures.Columns = []string{"policy", "peak reserved", "÷ peak live", "relocations", "bytes moved", "capacity", "÷ peak live", "relocations", "compactions", "bytes moved"}
	if c.Capacity > 0 {
		figures.Groups = append(figures.Groups, htmlGroup{"at " + pool.Bytes(c.Capacity).String(), 1})
		figures.Columns = append(figures.Columns, "verdict")
	}
	for _, p := range c.Policies {
		row := []string{p.Name, pool.Bytes(p.PeakReserved).String(), fmt.Sprintf("%.3f", p.ReservedOverLive), fmt.Sprint(p.Relocations), pool.Bytes(p.BytesMoved).String()}
		if p.MinCapacity > 0 {
			row = append(row, pool.Bytes(p.MinCapacity).String(), fmt.Sprintf("%.3f", p.MinCapacityOver), fmt.Sprint(p.MinCapacityRelocations), fmt.Sprint(p.MinCapacityCompactions), pool.Bytes(p.MinCapacityBytesMoved).String())
		} else {
			row = append(row, "-", "-", "-", "-", "-")
		}
		if v := p.Verdict; v != nil {
			if v.Fits {
				row = append(row, "fits, "+pool.Bytes(v.Headroom).String()+" headroom")
			} else {
				row = append(row, fmt.Sprintf("out of memory at %s (%s requested)", v.oomPlace(), pool.Bytes(v.OutOfMemory.Request)))
			}
		}
		figures.Rows = append(figures.Rows, row)
	}
	names := []string{}
	for _, part := range (&Breakdown{}).Parts() {
		names = append(names, part.Name)
	}
	parts.Groups = []htmlGroup{{"", 1}, {"at the unlimited peak", 2}, {"reserved but not live", len(names)}}
	parts.Columns = append([]string{"policy", "reserved", "live"}, names...)
	for _, p := range c.Policies {
		if p.Breakdown == nil {
			continue
		}
		row := []string{p.Name, pool.Bytes(p.Breakdown.Reserved).String(), pool.Bytes(p.Breakdown.Live).String()}
		for _, part := range p.Breakdown.Parts() {
			row = append(row, pool.Bytes(part.Bytes).String())
		}
		parts.Rows = append(parts.Rows, row)
	}
	return figures, parts
}

// summaryLines are the report's first lines (trace, PyTorch, capacity and,
// on replay's page, what it counts and whether the live tensors alone pass
// it).
func (c *Comparison) summaryLines() []string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events over %s of trace time, peak live %s\n", c.Events, traceSpan(c), pool.Bytes(c.PeakLive))
	c.writePyTorch(&b)
	if c.Capacity > 0 {
		fmt.Fprintf(&b, "capacity %s, %s overhead outside the allocator\n", pool.Bytes(c.Capacity), pool.Bytes(c.Overhead))
		if c.advice == nil { // advise's page says them in its answer
			for _, l := range c.capacityLines("no policy and no allocator setting", false) {
				b.WriteString(l + "\n")
			}
		}
	}
	return strings.Split(strings.TrimSpace(b.String()), "\n")
}

var pageTemplate = template.Must(template.Must(template.New("page").Parse(panelTemplate)).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}: {{.C.Trace}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;background:#fff;color:#222}
h1{font-size:1.3em} h2{font-size:1.05em;margin:1.2em 0 .3em}
svg{background:#fff;border:1px solid #ccc}
.plot{fill:#f7f7f9}
.grid{stroke:#ddd;stroke-width:1}
.axis{stroke:#444;stroke-width:1}
.tick text,.axis-label{font-size:11px;fill:#444}
.live{fill:none;stroke:#1f77b4;stroke-width:1.5}
.reserved{fill:none;stroke:#d62728;stroke-width:1.5}
.recorded{fill:none;stroke:#2ca02c;stroke-width:1.5;stroke-dasharray:4 3}
.capacity{stroke:#000;stroke-width:1.5;stroke-dasharray:8 4}
.min-capacity{stroke:#ff7f0e;stroke-width:1.5;stroke-dasharray:2 3}
.line-label{font-size:11px}
.peak{fill:#d62728;stroke:#fff;stroke-width:1}
.oom{stroke:#8b0000;stroke-width:2}
.oom-label{fill:#8b0000;font-weight:600}
.hover rect{fill:transparent} .hover rect:hover{fill:rgba(0,0,0,.06)}
h2 .verdict{font-weight:normal;font-size:.9em;color:#444} h2 .verdict.no-fit{color:#8b0000}
p.frames-note{font-size:.85em;color:#555;margin:.2em 0} ol.frames{font-size:.85em;margin:.2em 0 .6em;padding-left:2em} ol.frames code{white-space:pre-wrap;word-break:break-all}
.zoomed{display:none} #zoom:checked ~ .charts .full{display:none} #zoom:checked ~ .charts .zoomed{display:block}
label.zoom{font-size:.9em}
table{border-collapse:collapse;margin:.5em 0 1em} td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right} td:first-child,th:first-child{text-align:left}
th.group{background:#f0f0f4}
pre{background:#f7f7f9;padding:1em;border:1px solid #ccc;overflow:auto}
.key span{display:inline-block;margin-right:1.5em}
.advice-wrap{max-width:100%;overflow-x:auto}
table.advice{font-size:.88em;margin:.4em 0} table.advice td,table.advice th{padding:.2em .45em;white-space:nowrap} table.advice th{white-space:normal}
table.advice th.group{text-align:center} table.advice td.setting{text-align:left;white-space:normal;min-width:16em;max-width:22em}
table.advice .mark-label{display:block;color:#1a7f37;font-weight:600;font-size:.9em}
table.advice tr.recommended{background:#e6f4ea} table.advice tr.recommended .setting-name{font-weight:600}
p.answer{font-size:1.05em;margin:.3em 0} p.note{font-size:.85em;color:#555;margin:.2em 0}
</style></head><body>
<h1>{{.Title}}: {{.C.Trace}}</h1>
{{if .Advice}}<h2>Advice</h2>{{.Advice}}{{end}}
{{range .Summary}}<p class="summary">{{.}}</p>
{{end}}
<p class="key"><span style="color:#1f77b4">━ live bytes</span><span style="color:#d62728">━ reserved (device) bytes</span>{{if .HasRec}}<span style="color:#2ca02c">┅ {{.Rec}}'s recorded reserve</span>{{end}}{{if .HasCap}}<span>╍ capacity</span>{{end}}<span style="color:#ff7f0e">┈ the policy's smallest capacity</span><span style="color:#d62728">● peak</span></p>
<input type="checkbox" id="zoom"><label class="zoom" for="zoom"> zoom every panel to {{.ZoomRange}}, the range where the policies differ (hover a panel for exact values)</label>
<div class="charts">
<div class="full">{{range .Charts}}{{template "panel" .}}{{end}}</div>
<div class="zoomed">{{range .Zoomed}}{{template "panel" .}}{{end}}</div>
</div>
<h2>Figures</h2>
<table id="figures">
<tr>{{range .Table.Groups}}<th class="group" colspan="{{.Span}}">{{.Title}}</th>{{end}}</tr>
<tr>{{range .Table.Columns}}<th>{{.}}</th>{{end}}</tr>
{{range .Table.Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{if .Slow.Rows}}<h2>The slow path: what fitting cost</h2>
<table id="slow-path">
<tr>{{range .Slow.Groups}}<th class="group" colspan="{{.Span}}">{{.Title}}</th>{{end}}</tr>
<tr>{{range .Slow.Columns}}<th>{{.}}</th>{{end}}</tr>
{{range .Slow.Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>{{end}}
{{if .Parts.Rows}}<h2>Where the reserved bytes sat at each policy's peak</h2>
<table id="breakdown">
<tr>{{range .Parts.Groups}}<th class="group" colspan="{{.Span}}">{{.Title}}</th>{{end}}</tr>
<tr>{{range .Parts.Columns}}<th>{{.}}</th>{{end}}</tr>
{{range .Parts.Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>{{end}}
<h2>Report</h2>
<pre>{{.Text}}</pre>
</body></html>
`))

// Geometry the template reads.
func (chart) PlotWidth() float64  { return plotW }
func (chart) PlotHeight() float64 { return plotH }
func (chart) PlotLeft() float64   { return marginLeft }
func (chart) PlotRight() float64  { return marginLeft + plotW }
func (chart) PlotBottom() float64 { return marginTop + plotH }
func (chart) TickBottom() float64 { return marginTop + plotH + 5 }
func (chart) TickLabelX() float64 { return marginLeft - 6 }
func (chart) XLabelY() float64    { return marginTop + plotH + 17 }
func (chart) AxisLabelY() float64 { return chartH - 3 }
