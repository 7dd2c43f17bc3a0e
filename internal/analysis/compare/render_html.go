package compare

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// WriteHTML writes one standalone page (no fonts, styles, scripts or data
// fetched from anywhere: what it draws is in the page): what failed and
// what was live then, when a policy runs out of memory at the capacity
// (render_html_failure.go); per policy a timeline of live and reserved
// bytes, PyTorch's policies first for a PyTorch snapshot, every panel the
// window's width, on one y scale in binary units and one x scale in trace
// time, both with ticks; the capacity asked about and each policy's
// smallest capacity as lines; each peak marked; the recorded reserve
// beside them; then the figures and the breakdowns as HTML tables, the
// text report, and the page's own size in bytes.
//
// The panels are drawn by the page's own script (render_html.js)
// from the timelines embedded as compact JSON, at the pixel width of the
// window and of the stretch of time shown: a drag across a panel zooms
// every panel's time axis to the stretch selected, a button or a double
// click shows the whole run again; when idle stretches take most of the
// trace's time the page opens on the peak's neighbourhood. Each series is
// thinned to the extremes of each pixel column (first, lowest, highest,
// last), so the DOM stays small and the drawn peak is the reported peak:
// the timelines keep each bucket's lowest and highest points (replay R3),
// and the peak marker carries the peak in data-bytes.
func (c *Comparison) WriteHTML(w io.Writer) error {
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		return err
	}
	sc := c.scales()
	zoom := c.zoomScales(sc)
	data := struct {
		C       *Comparison
		Header  []string
		Panels  []panelShell
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
		// ZoomRange is the y range the zoom checkbox shows.
		ZoomRange string
		// Failures are what was live at each out-of-memory.
		Failures []failureView
		// Data and Script draw the panels.
		Data, Script template.HTML
		Size         string
	}{C: c, Title: "gpumem replay", Text: text.String(), HasRec: len(c.Recording) > 0, HasCap: c.Capacity > 0, Rec: "PyTorch",
		Script: template.HTML("<script>" + panelScript + "</script>"), Size: pageSizeMark}
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
	chart := c.chartData(sc, zoom)
	chart.RecName = data.Rec
	js, err := json.Marshal(chart)
	if err != nil {
		return err
	}
	// json.Marshal escapes <, > and &: the data cannot end its element.
	data.Data = template.HTML(`<script type="application/json" id="gpumem-data">` + string(js) + `</script>`)
	for _, i := range c.panelOrder() {
		data.Panels = append(data.Panels, c.panelShell(c.Policies[i]))
	}
	data.ZoomRange = binaryLabel(zoom.bottom) + " to " + binaryLabel(zoom.top)
	data.Table, data.Parts = c.htmlTables()
	data.Slow = c.slowPathHTML()
	data.Summary = c.summaryLines()
	data.Failures = c.failureViews()
	var page bytes.Buffer
	if err := pageTemplate.Execute(&page, data); err != nil {
		return err
	}
	_, err = w.Write(withSize(page.Bytes()))
	return err
}

// panelScript draws the panels (render_html.js).
//
//go:embed render_html.js
var panelScript string

// pageSizeMark stands in the page for its size until the page is written
// (withSize): as wide as any size it becomes, so that writing the size in
// leaves the size as it was.
const pageSizeMark = "@@@@@@@@@@@@"

// withSize writes the page's own size in bytes where pageSizeMark stands,
// padded with spaces to the mark's width (HTML shows them as one).
func withSize(page []byte) []byte {
	n := strconv.Itoa(len(page))
	return bytes.Replace(page, []byte(pageSizeMark), []byte(n+strings.Repeat(" ", len(pageSizeMark)-len(n))), 1)
}

// panelShell is what the page holds of a panel before its script draws it:
// the heading, the failing allocation's frames, and an empty svg.
type panelShell struct {
	Name       string
	Verdict    string   // the policy's verdict at -capacity, "" without one
	NoFit      bool     // the verdict is an out-of-memory
	Frames     []string // the top of the failing allocation's stack, if any
	FramesNote string   // which frames those are
}

func (c *Comparison) panelShell(p PolicyResult) panelShell {
	ps := panelShell{Name: p.Name}
	if v := p.Verdict; v != nil {
		if v.Fits {
			ps.Verdict = "fits " + units.Bytes(c.Capacity).String() + ", " + units.Bytes(v.Headroom).String() + " headroom at its peak"
		} else if o := v.OutOfMemory; o != nil {
			ps.NoFit = true
			ps.Verdict = fmt.Sprintf("does not fit %s: out of memory at %s (%s requested)", units.Bytes(c.Capacity), v.oomPlace(), units.Bytes(o.Request))
			if a := v.Allocation; a != nil {
				ps.Verdict = fmt.Sprintf("does not fit %s: out of memory at %s", units.Bytes(c.Capacity), a)
				if len(a.Frames) > 0 {
					ps.FramesNote = a.framesNote()
					for _, f := range a.Frames {
						ps.Frames = append(ps.Frames, f.String())
					}
				}
			}
		}
	}
	return ps
}

// panelOrder is the order of the panels: for a PyTorch snapshot the
// PyTorch policies first (what the user ran, to set gpumem's against),
// then the others, each group in report order; else report order.
func (c *Comparison) panelOrder() []int {
	var first, rest []int
	for i, p := range c.Policies {
		if len(p.Timeline) == 0 {
			continue
		}
		if c.PyTorch != nil && isTorch(p.Name) {
			first = append(first, i)
		} else {
			rest = append(rest, i)
		}
	}
	return append(first, rest...)
}

// The y axes have at most maxTicks ticks (the script gives a wide panel's
// time axis more).
const (
	maxTicks                   = 6
	useEventsWhenTimeSpanBelow = 2 // µs: a trace without times is drawn by event index
)

// scales are the axes every panel shares.
type scales struct {
	top      uint64 // bytes at the top of the plot
	bottom   uint64 // bytes at the bottom: 0, or above it when zoomed (a multiple of yStep)
	yStep    uint64
	x0, x1   int64 // the x range: trace time (µs) or event index
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
// ticks over span (the script's niceStep is the same).
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

// yAxis is a y scale as the script draws it: its range and ticks.
type yAxis struct {
	Bottom uint64  `json:"bottom"`
	Top    uint64  `json:"top"`
	Ticks  []yTick `json:"ticks"`
}

type yTick struct {
	Bytes uint64 `json:"b"`
	Label string `json:"l"`
}

func (sc scales) yAxis() yAxis {
	a := yAxis{Bottom: sc.bottom, Top: sc.top}
	for b := sc.bottom; b <= sc.top; b += sc.yStep {
		a.Ticks = append(a.Ticks, yTick{Bytes: b, Label: binaryLabel(b)})
		if sc.top-b < sc.yStep {
			break
		}
	}
	return a
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
	return units.Bytes(b).String()
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
		figures.Groups = append(figures.Groups, htmlGroup{"at " + units.Bytes(c.Capacity).String(), 1})
		figures.Columns = append(figures.Columns, "verdict")
	}
	for _, p := range c.Policies {
		row := []string{p.Name, units.Bytes(p.PeakReserved).String(), fmt.Sprintf("%.3f", p.ReservedOverLive), fmt.Sprint(p.Relocations), units.Bytes(p.BytesMoved).String()}
		if p.MinCapacity > 0 {
			row = append(row, units.Bytes(p.MinCapacity).String(), fmt.Sprintf("%.3f", p.MinCapacityOver), fmt.Sprint(p.MinCapacityRelocations), fmt.Sprint(p.MinCapacityCompactions), units.Bytes(p.MinCapacityBytesMoved).String())
		} else {
			row = append(row, "-", "-", "-", "-", "-")
		}
		if v := p.Verdict; v != nil {
			if v.Fits {
				row = append(row, "fits, "+units.Bytes(v.Headroom).String()+" headroom")
			} else {
				row = append(row, fmt.Sprintf("out of memory at %s (%s requested)", v.oomPlace(), units.Bytes(v.OutOfMemory.Request)))
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
		row := []string{p.Name, units.Bytes(p.Breakdown.Reserved).String(), units.Bytes(p.Breakdown.Live).String()}
		for _, part := range p.Breakdown.Parts() {
			row = append(row, units.Bytes(part.Bytes).String())
		}
		parts.Rows = append(parts.Rows, row)
	}
	return figures, parts
}

// summaryLines are the report's first lines (trace, PyTorch, capacity).
func (c *Comparison) summaryLines() []string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events over %s of trace time, peak live %s\n", c.Events, traceSpan(c), units.Bytes(c.PeakLive))
	c.writePyTorch(&b)
	if c.Capacity > 0 {
		fmt.Fprintf(&b, "capacity %s, %s overhead outside the allocator\n", units.Bytes(c.Capacity), units.Bytes(c.Overhead))
	}
	return strings.Split(strings.TrimSpace(b.String()), "\n")
}

var pageTemplate = template.Must(template.Must(template.New("page").Parse(failureTemplate)).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>{{.Title}}: {{.C.Trace}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em 2em;background:#fff;color:#222}
h1{font-size:1.3em} h2{font-size:1.05em;margin:1.2em 0 .3em} h3{font-size:.98em;margin:1em 0 .3em}
svg.timeline{display:block;background:#fff;border:1px solid #ccc;user-select:none} #gm-shared{position:absolute}
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
.overlay{fill:transparent;cursor:crosshair} .selection{fill:rgba(31,119,180,.15);stroke:#1f77b4;stroke-width:1} .cursor{stroke:#888;stroke-width:1}
.readout{font-size:.8em;color:#444;min-height:1.3em;margin:.1em 0 .4em;font-variant-numeric:tabular-nums}
h2 .verdict{font-weight:normal;font-size:.9em;color:#444} h2 .verdict.no-fit{color:#8b0000}
p.frames-note{font-size:.85em;color:#555;margin:.2em 0} ol.frames{font-size:.85em;margin:.2em 0 .6em;padding-left:2em} ol.frames code{white-space:pre-wrap;word-break:break-all}
.controls{position:sticky;top:0;z-index:1;display:flex;flex-wrap:wrap;gap:.4em 1.2em;align-items:center;font-size:.9em;margin:.4em 0 .2em;padding:.4em .6em;background:#f4f4f8;border:1px solid #ddd}
.controls button{font:inherit;padding:.1em .6em} #x-range{font-weight:600} .hint{color:#555}
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
#failure{border-left:4px solid #8b0000;padding:.1em 0 .1em 1em;margin:1em 0}
#failure h2{color:#8b0000} .failure p{margin:.3em 0}
details.failure{margin:.4em 0} details.failure>summary{font-weight:600;cursor:pointer} details.failure[open]>summary{margin-bottom:.3em}
table.live-at-failure{font-size:.88em} table.live-at-failure td{vertical-align:top}
table.live-at-failure .where{text-align:left} table.live-at-failure td.share{white-space:nowrap;text-align:left} table.live-at-failure td.size{white-space:nowrap}
table.live-at-failure tr.request td{background:#fbeaea;font-weight:600} table.live-at-failure tr.rest td,table.live-at-failure tr.total td{color:#555}
.bar{display:inline-block;height:.7em;background:#1f77b4;vertical-align:middle;margin-right:.4em} tr.request .bar{background:#8b0000}
table.live-at-failure code{font-size:.95em;white-space:pre-wrap;word-break:break-all} table.live-at-failure summary{cursor:pointer} table.live-at-failure ol{margin:.2em 0;padding-left:1.6em} table.live-at-failure p.note{margin:.2em 0}
footer{font-size:.8em;color:#666;margin-top:2em}
</style></head><body>
<h1>{{.Title}}: {{.C.Trace}}</h1>
{{if .Advice}}<h2>Advice</h2>{{.Advice}}{{end}}
{{range .Summary}}<p class="summary">{{.}}</p>
{{end}}{{if .Failures}}{{template "failures" .Failures}}{{end}}
<p class="key"><span style="color:#1f77b4">━ live bytes</span><span style="color:#d62728">━ reserved (device) bytes</span>{{if .HasRec}}<span style="color:#2ca02c">┅ {{.Rec}}'s recorded reserve</span>{{end}}{{if .HasCap}}<span>╍ capacity</span>{{end}}<span style="color:#ff7f0e">┈ the policy's smallest capacity</span><span style="color:#d62728">● peak</span></p>
<div class="controls"><span id="x-range"></span><button type="button" id="zoom-reset">whole run</button><button type="button" id="zoom-focus" hidden>the peak's neighbourhood</button>
<label class="zoom"><input type="checkbox" id="zoom"> y axis from {{.ZoomRange}}, where the policies differ</label>
<span class="hint">drag across a panel to zoom into that stretch of time; double-click a panel for the whole run</span></div>
<noscript><p>The timelines are drawn by the page's script, which is off: the figures and the report below are the same without it.</p></noscript>
<div class="charts">
<svg id="gm-shared" width="0" height="0" aria-hidden="true" xmlns="http://www.w3.org/2000/svg"><defs><polyline id="gm-live" class="live"/><polyline id="gm-rec" class="recorded"/></defs></svg>
{{range .Panels}}<section class="panel" id="panel-{{.Name}}" data-policy="{{.Name}}"><h2>{{.Name}}{{if .Verdict}} <span class="verdict{{if .NoFit}} no-fit{{end}}">— {{.Verdict}}</span>{{end}}</h2>
{{if .Frames}}<p class="frames-note">allocated at ({{.FramesNote}}):</p>
<ol class="frames">{{range .Frames}}<li><code>{{.}}</code></li>{{end}}</ol>
{{end}}<svg id="timeline-{{.Name}}" class="timeline" height="250" xmlns="http://www.w3.org/2000/svg"></svg><div class="readout"></div></section>
{{end}}</div>
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
<footer id="page-size">This page: {{.Size}} bytes, self-contained (its styles, script and data are in it; it fetches nothing).</footer>
{{.Data}}
{{.Script}}
</body></html>
`))
