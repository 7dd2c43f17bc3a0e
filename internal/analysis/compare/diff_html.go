package compare

import (
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// WriteHTML writes the difference as one standalone page (no scripts,
// fonts or other external references): the two runs, peak live, the
// reserves with their split and smallest capacities, and the sites as a
// table whose rows add up to the difference in peak live (the first sites
// listed, the rest summed in one row, sites 0: all), each site's frames
// in full. Then the text report.
func (d *Difference) WriteHTML(w io.Writer, sites int) error {
	var text strings.Builder
	if err := d.WriteTextWidth(&text, 0, sites); err != nil {
		return err
	}
	type siteRow struct {
		A, B, Delta, Count string
		Frames             []string
		Name               string
		Rest, Total        bool
	}
	type reserveRow struct {
		Name                                        string
		A, B, Delta, Live, Cached, MinA, MinB, MinD string
	}
	data := struct {
		D        *Difference
		A, B     string
		Peak     []string
		Reserves []reserveRow
		Sites    []siteRow
		Text     string
		How      string
	}{D: d, Text: text.String(),
		A:    fmt.Sprintf("%s (%d events; torch policy with %s, %s)", d.A.Trace, d.A.Events, confName(d.A.TorchConf), d.A.TorchSettingsFrom),
		B:    fmt.Sprintf("%s (%d events; torch policy with %s, %s)", d.B.Trace, d.B.Events, confName(d.B.TorchConf), d.B.TorchSettingsFrom),
		Peak: []string{units.Bytes(d.A.PeakLive).String(), units.Bytes(d.B.PeakLive).String(), signedBytesText(d.PeakLiveDelta)},
		How:  d.siteHow()}
	add := func(name string, r ReserveDiff, minA, minB uint64, minD *int64) {
		row := reserveRow{Name: name, A: units.Bytes(r.A.Reserved).String(), B: units.Bytes(r.B.Reserved).String(), Delta: signedBytesText(r.Delta),
			Live: signedBytesText(r.LiveDelta), Cached: signedBytesText(r.CachedFreeDelta),
			MinA: orDash(minA > 0, units.Bytes(minA).String()), MinB: orDash(minB > 0, units.Bytes(minB).String()), MinD: "-"}
		if minD != nil {
			row.MinD = signedBytesText(*minD)
		}
		data.Reserves = append(data.Reserves, row)
	}
	if r := d.Recorded; r != nil {
		add(d.Recorder+" (recorded)", *r, 0, 0, nil)
	}
	for _, p := range d.Policies {
		add(p.Name, p.Reserve, p.AMinCapacity, p.BMinCapacity, p.MinCapacityDelta)
	}
	shown := d.Sites
	if sites > 0 && len(shown) > sites {
		shown = shown[:sites]
	}
	for _, s := range shown {
		row := siteRow{A: units.Bytes(s.ABytes).String(), B: units.Bytes(s.BBytes).String(), Delta: signedBytesText(s.Delta), Count: fmt.Sprintf("%d → %d", s.ACount, s.BCount)}
		for _, f := range s.Frames {
			row.Frames = append(row.Frames, f.String())
		}
		if len(row.Frames) == 0 {
			row.Name = s.Name()
		}
		data.Sites = append(data.Sites, row)
	}
	if rest := d.Sites[len(shown):]; len(rest) > 0 {
		var ra, rb uint64
		var rd int64
		var ca, cb int
		for _, s := range rest {
			ra, rb, rd, ca, cb = ra+s.ABytes, rb+s.BBytes, rd+s.Delta, ca+s.ACount, cb+s.BCount
		}
		data.Sites = append(data.Sites, siteRow{A: units.Bytes(ra).String(), B: units.Bytes(rb).String(), Delta: signedBytesText(rd),
			Count: fmt.Sprintf("%d → %d", ca, cb), Name: fmt.Sprintf("the other %d sites", len(rest)), Rest: true})
	}
	data.Sites = append(data.Sites, siteRow{A: data.Peak[0], B: data.Peak[1], Delta: data.Peak[2],
		Count: fmt.Sprintf("%d → %d", d.A.LiveAllocations, d.B.LiveAllocations), Name: fmt.Sprintf("all %d sites: the peak live bytes", len(d.Sites)), Total: true})
	return diffPage.Execute(w, data)
}

var diffPage = template.Must(template.New("diff").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>gpumem diff: {{.D.A.Trace}} and {{.D.B.Trace}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{padding:.2em .6em;border-bottom:1px solid #ddd;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th{background:#f4f4f4;text-align:center}
tr.total td{border-top:2px solid #888;font-weight:bold}
tr.rest td{color:#555}
ol{margin:0;padding-left:1.2em}
code,pre{font:12px/1.3 ui-monospace,monospace}
pre{background:#f8f8f8;padding:1em;overflow-x:auto}
</style></head><body>
<h1>gpumem diff</h1>
<p><b>A</b>: {{.A}}<br><b>B</b>: {{.B}}</p>
<p>peak live: A {{index .Peak 0}}, B {{index .Peak 1}}, B − A <b>{{index .Peak 2}}</b></p>
<h2>Reserves</h2>
<table><tr><th rowspan="2">reserve</th><th colspan="3">peak reserved</th><th colspan="2">B − A at the peaks</th><th colspan="3">smallest capacity</th></tr>
<tr><th>A</th><th>B</th><th>B − A</th><th>live</th><th>cached free</th><th>A</th><th>B</th><th>B − A</th></tr>
{{range .Reserves}}<tr><td>{{.Name}}</td><td class="n">{{.A}}</td><td class="n">{{.B}}</td><td class="n">{{.Delta}}</td><td class="n">{{.Live}}</td><td class="n">{{.Cached}}</td><td class="n">{{.MinA}}</td><td class="n">{{.MinB}}</td><td class="n">{{.MinD}}</td></tr>
{{end}}</table>
<p>Each reserve at its own peak: the difference splits into live bytes and cached free ones (reserved but not live: cache, rounding, fragmentation).</p>
<h2>Peak live by allocation site</h2>
<p>{{.How}}; the rows add up to the difference in peak live.</p>
<table><tr><th>A</th><th>B</th><th>B − A</th><th>allocations</th><th>site</th></tr>
{{range .Sites}}<tr{{if .Total}} class="total"{{else if .Rest}} class="rest"{{end}}><td class="n">{{.A}}</td><td class="n">{{.B}}</td><td class="n">{{.Delta}}</td><td class="n">{{.Count}}</td><td>{{if .Frames}}<ol>{{range .Frames}}<li><code>{{.}}</code></li>{{end}}</ol>{{else}}{{.Name}}{{end}}</td></tr>
{{end}}</table>
{{if .D.FramesError}}<p>warning: stack frames not read, those allocations grouped by size: {{.D.FramesError}}</p>{{end}}
<h2>Text report</h2>
<pre>{{.Text}}</pre>
</body></html>
`))
