package compare

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/replay"
)

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func seconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s < 1e-3:
		return fmt.Sprintf("%.1fµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.1fms", s*1e3)
	}
	return fmt.Sprintf("%.2fs", s)
}

// WriteJSON writes the comparison as one JSON object.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// WriteHTML writes one standalone page (no external scripts or fonts): an
// SVG timeline of live and reserved bytes per policy, and the table.
func (c *Comparison) WriteHTML(w io.Writer) error {
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		return err
	}
	data := struct {
		C      *Comparison
		Charts []chart
		Text   string
	}{C: c, Text: text.String()}
	for _, p := range c.Policies {
		if len(p.Timeline) > 0 {
			data.Charts = append(data.Charts, newChart(p.Name, p.Timeline, c.Recording, c.Events))
		}
	}
	return pageTemplate.Execute(w, data)
}

// chart is one policy's SVG timeline.
type chart struct {
	Name           string
	Live, Reserved string // SVG polyline points
	Recorded       string
	Max            string
	W, H           int
}

func newChart(name string, pts, recorded []replay.Point, events int) chart {
	const w, h = 900, 220
	var top uint64 = 1
	for _, p := range pts {
		top = max(top, p.Live, p.Device)
	}
	for _, p := range recorded {
		top = max(top, p.Device)
	}
	n := max(events, 1)
	poly := func(pts []replay.Point, val func(replay.Point) uint64) string {
		var b strings.Builder
		for _, p := range pts {
			x := float64(p.Event) / float64(n) * w
			y := h - float64(val(p))/float64(top)*(h-10)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		return b.String()
	}
	return chart{
		Name:     name,
		Live:     poly(pts, func(p replay.Point) uint64 { return p.Live }),
		Reserved: poly(pts, func(p replay.Point) uint64 { return p.Device }),
		Recorded: poly(recorded, func(p replay.Point) uint64 { return p.Device }),
		Max:      pool.Bytes(top).String(),
		W:        w, H: h,
	}
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gpumem replay: {{.C.Trace}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;background:#fff;color:#222}
h1{font-size:1.3em} h2{font-size:1.05em;margin:1.2em 0 .3em}
svg{background:#f7f7f9;border:1px solid #ccc}
.live{fill:none;stroke:#1f77b4;stroke-width:2}
.reserved{fill:none;stroke:#d62728;stroke-width:2}
.recorded{fill:none;stroke:#2ca02c;stroke-width:1.5;stroke-dasharray:4 3}
pre{background:#f7f7f9;padding:1em;border:1px solid #ccc;overflow:auto}
.key span{display:inline-block;margin-right:1.5em}
</style></head><body>
<h1>gpumem replay: {{.C.Trace}}</h1>
<p class="key"><span style="color:#1f77b4">━ live bytes</span><span style="color:#d62728">━ reserved (device) bytes</span>{{if .C.Recording}}<span style="color:#2ca02c">┅ PyTorch recorded reserve</span>{{end}}</p>
{{range .Charts}}<h2>{{.Name}} <small>(top {{.Max}})</small></h2>
<svg id="timeline-{{.Name}}" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" xmlns="http://www.w3.org/2000/svg">
<polyline class="reserved" points="{{.Reserved}}"/>
<polyline class="live" points="{{.Live}}"/>
{{if .Recorded}}<polyline class="recorded" points="{{.Recorded}}"/>{{end}}
</svg>
{{end}}
<h2>Figures</h2>
<pre>{{.Text}}</pre>
</body></html>
`))
