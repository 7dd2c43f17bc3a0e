package compare

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/replay"
)

// What a panel marks beside its lines: the out-of-memory point of a policy
// that does not fit, labels that never overlap, a zoomed twin, and exact
// values on hover. The page stays standalone and without a script: the
// zoom is a CSS checkbox and the readout the SVG <title> tooltips every
// browser shows.

// panelTemplate draws one panel (chart); WriteHTML's page includes it for
// the full and the zoomed panels.
const panelTemplate = `{{define "panel"}}{{$c := .}}<h2>{{.Name}}{{if .Verdict}} <span class="verdict{{if .OOM}} no-fit{{end}}">— {{.Verdict}}</span>{{end}}</h2>
{{if .Frames}}<p class="frames-note">allocated at ({{.FramesNote}}):</p>
<ol class="frames">{{range .Frames}}<li><code>{{.}}</code></li>{{end}}</ol>
{{end}}<svg id="{{.ID}}" class="{{.Class}}" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" xmlns="http://www.w3.org/2000/svg">
<rect class="plot" x="{{.PlotX0}}" y="{{.PlotY0}}" width="{{printf "%.2f" (.PlotWidth)}}" height="{{printf "%.2f" (.PlotHeight)}}"/>
<g class="y-ticks">{{range .YTicks}}<g class="tick" data-bytes="{{.Bytes}}" data-y="{{printf "%.2f" .Pos}}"><line class="grid" x1="{{$c.PlotLeft}}" x2="{{$c.PlotRight}}" y1="{{printf "%.2f" .Pos}}" y2="{{printf "%.2f" .Pos}}"/><text x="{{$c.TickLabelX}}" y="{{printf "%.2f" .Pos}}" text-anchor="end" dominant-baseline="middle">{{.Label}}</text></g>{{end}}</g>
<g class="x-ticks">{{range .XTicks}}<g class="tick"><line class="axis" x1="{{printf "%.2f" .Pos}}" x2="{{printf "%.2f" .Pos}}" y1="{{$c.PlotBottom}}" y2="{{$c.TickBottom}}"/><text x="{{printf "%.2f" .Pos}}" y="{{$c.XLabelY}}" text-anchor="middle">{{.Label}}</text></g>{{end}}</g>
<line class="axis" x1="{{.PlotX0}}" x2="{{.PlotX0}}" y1="{{.PlotY0}}" y2="{{.PlotY1}}"/>
<line class="axis" x1="{{.PlotX0}}" x2="{{.PlotX1}}" y1="{{.PlotY1}}" y2="{{.PlotY1}}"/>
<text class="axis-label" x="{{.PlotX1}}" y="{{.AxisLabelY}}" text-anchor="end">{{.XAxisLabel}}</text>
{{if .Recorded}}<polyline class="recorded" points="{{.Recorded}}"/>{{end}}
<polyline class="reserved" points="{{.Reserved}}"/>
<polyline class="live" points="{{.Live}}"/>
{{range .Lines}}<g class="level" data-bytes="{{.Bytes}}"><line class="{{.Class}}" x1="{{$c.PlotLeft}}" x2="{{$c.PlotRight}}" y1="{{printf "%.2f" .Y}}" y2="{{printf "%.2f" .Y}}"/></g>
{{end}}{{if .OOM}}<line class="oom" data-event="{{.OOM.Event}}" x1="{{printf "%.2f" .OOM.X}}" x2="{{printf "%.2f" .OOM.X}}" y1="{{$c.PlotY0}}" y2="{{$c.PlotY1}}"/>
{{end}}<circle class="peak" data-bytes="{{.Peak}}" cx="{{printf "%.2f" .PeakX}}" cy="{{printf "%.2f" .PeakY}}" r="4"/>
<g class="labels">{{range .Labels}}<text class="line-label {{.Class}}" x="{{printf "%.2f" .X}}" y="{{printf "%.2f" .Y}}" text-anchor="{{.Anchor}}">{{.Text}}</text>{{end}}</g>
<g class="hover">{{range .Hover}}<rect x="{{printf "%.2f" .X}}" y="{{$c.PlotY0}}" width="{{printf "%.2f" .W}}" height="{{printf "%.2f" ($c.PlotHeight)}}"><title>{{.Text}}</title></rect>{{end}}</g>
</svg>
{{end}}`

// oomMark is the first failed allocation of a policy that does not fit the
// capacity: a vertical line at its event.
type oomMark struct {
	X     float64
	Event int
	Label string
}

// placedLabel is a text label at its final place (baseline y).
type placedLabel struct {
	Class, Text, Anchor string
	X, Y                float64
}

// Label geometry: 11 px text, about 6.2 px a character (system-ui), a
// line's label sitting 3 px above it.
const (
	labelCharW   = 6.2
	labelHeight  = 12.0
	labelAboveBy = 3.0
)

// box is a label's extent, x0 < x1, top < bottom.
type box struct{ x0, x1, top, bottom float64 }

func (l placedLabel) box() box {
	w := float64(len([]rune(l.Text))) * labelCharW
	x0 := l.X
	switch l.Anchor {
	case "end":
		x0 = l.X - w
	case "middle":
		x0 = l.X - w/2
	}
	return box{x0: x0, x1: x0 + w, top: l.Y - labelHeight + 2, bottom: l.Y + 2}
}

func (a box) overlaps(b box) bool {
	return a.x0 < b.x1 && b.x0 < a.x1 && a.top < b.bottom && b.top < a.bottom
}

// placeLabels puts the lines' labels, the peak's and the out-of-memory
// mark's where none overlaps another (the peak label sat on the smallest
// capacity's when the two levels were close): each in turn at its own
// place, else moved a label's height at a time, below then above, staying
// inside the plot.
func (ch chart) placeLabels() []placedLabel {
	var want []placedLabel
	for _, l := range ch.Lines {
		want = append(want, placedLabel{Class: l.Class + "-label", Text: l.Label, Anchor: l.Anchor, X: l.LabelX, Y: l.Y - labelAboveBy})
	}
	want = append(want, placedLabel{Class: "peak-label", Text: ch.PeakLabel, Anchor: ch.PeakAnchor, X: ch.PeakX + float64(ch.PeakDX), Y: ch.PeakY + 14})
	if ch.OOM != nil {
		anchor, dx := "start", 4.0
		if ch.OOM.X > marginLeft+plotW/2 {
			anchor, dx = "end", -4
		}
		want = append(want, placedLabel{Class: "oom-label", Text: ch.OOM.Label, Anchor: anchor, X: ch.OOM.X + dx, Y: marginTop + plotH - 6})
	}
	var placed []placedLabel
	for _, l := range want {
		y0 := l.Y
		for try := 0; try < 24; try++ {
			shift := float64((try+1)/2) * labelHeight
			if try%2 == 0 {
				shift = -shift
			}
			l.Y = y0 - shift
			if try == 0 {
				l.Y = y0
			}
			b := l.box()
			if b.top < marginTop || b.bottom > marginTop+plotH {
				continue
			}
			free := true
			for _, p := range placed {
				if b.overlaps(p.box()) {
					free = false
					break
				}
			}
			if free {
				break
			}
		}
		placed = append(placed, l)
	}
	return placed
}

// hoverColumn is a strip of the plot whose tooltip gives the exact figures
// of the timeline points under it.
type hoverColumn struct {
	X, W float64
	Text string
}

// maxHoverColumns bounds the strips of a panel: enough to point at any
// step, few enough to keep the page small.
const maxHoverColumns = 240

// hoverColumns groups the timeline into at most maxHoverColumns strips
// across the plot, each saying the highest live and reserved bytes of its
// points, exactly, and where in the trace they are.
func hoverColumns(pts []replay.Point, sc scales) []hoverColumn {
	if len(pts) == 0 {
		return nil
	}
	per := (len(pts) + maxHoverColumns - 1) / maxHoverColumns
	var out []hoverColumn
	for i := 0; i < len(pts); i += per {
		group := pts[i:min(i+per, len(pts))]
		var live, device uint64
		for _, p := range group {
			live, device = max(live, p.Live), max(device, p.Device)
		}
		x0, x1 := sc.x(group[0]), sc.x(group[len(group)-1])
		out = append(out, hoverColumn{X: x0, W: max(x1-x0, 0), Text: fmt.Sprintf("events %d–%d (t %s): live up to %s (%d B), reserved up to %s (%d B)",
			group[0].Event, group[len(group)-1].Event, durationUS(group[0].T-sc.x0), pool.Bytes(live), live, pool.Bytes(device), device)})
	}
	// Widen each strip to the next one's start, so the whole plot answers.
	for i := range out {
		end := float64(marginLeft + plotW)
		if i+1 < len(out) {
			end = out[i+1].X
		}
		out[i].W = max(end-out[i].X, 1)
	}
	return out
}

// steps draws a recorded reserve as PyTorch's reserve moved: level until
// the next segment entry, then straight up or down (a polyline through the
// points alone slopes between sparse entries).
func steps(pts []replay.Point, sc scales) string {
	var b strings.Builder
	for i, pt := range pts {
		x, y := sc.x(pt), sc.y(pt.Device)
		if i > 0 {
			fmt.Fprintf(&b, "%.2f,%.2f ", x, sc.y(pts[i-1].Device))
		}
		fmt.Fprintf(&b, "%.2f,%.2f ", x, y)
	}
	return b.String()
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
