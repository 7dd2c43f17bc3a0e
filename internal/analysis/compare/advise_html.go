package compare

import (
	"html/template"
	"io"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// WriteHTML writes the comparison's HTML page as advise's: titled "gpumem
// advise", the answer and the advice table first (adviceHTML), then the
// timelines and figures every report has.
func (a *Advice) WriteHTML(w io.Writer) error {
	c := *a.Comparison
	c.advice = a
	return c.WriteHTML(w)
}

// adviceRow is one row of the advice table. Class marks the recommended
// row ("recommended") and the smallest-device pick ("smallest") for CSS
// and for tests; Marks says the same in words, visibly, above the
// setting's name.
type adviceRow struct {
	Class   string
	Marks   []string
	Setting []string // the setting's options, a line break allowed between them
	Cells   []string
}

// adviceTable is the advice as an HTML table: the columns grouped by run,
// the answer at the capacity first, right after the setting, so the
// verdict is never the column a narrow window cuts off; the marks sit in
// the setting's cell rather than a column of their own.
type adviceTable struct {
	Answer  []string
	Groups  []htmlGroup
	Columns []string
	Rows    []adviceRow
	Notes   []string
}

func (a *Advice) adviceTable() adviceTable {
	c := a.Comparison
	_, short := a.baselineWords()
	answer, _ := a.answerLines()
	t := adviceTable{Answer: answer}
	t.Groups = []htmlGroup{{"", 1}}
	t.Columns = []string{"setting (PYTORCH_CUDA_ALLOC_CONF)"}
	slow := []string{"retries", "cudaMalloc", "cudaFree", "relocations", "bytes moved"}
	if c.Capacity > 0 {
		t.Groups = append(t.Groups, htmlGroup{"at " + units.Bytes(c.Capacity).String(), 3 + len(slow)}, htmlGroup{"smallest", 1})
		t.Columns = append(t.Columns, append([]string{"verdict", "margin", "headroom at peak"}, slow...)...)
		t.Columns = append(t.Columns, "device")
	} else {
		t.Groups = append(t.Groups, htmlGroup{"at the smallest capacity", 1 + len(slow)})
		t.Columns = append(t.Columns, append([]string{"device"}, slow...)...)
	}
	t.Groups = append(t.Groups, htmlGroup{"unlimited", 1})
	t.Columns = append(t.Columns, "peak reserved")
	for _, p := range c.Policies {
		r := adviceRow{Setting: strings.SplitAfter(a.rowName(p), ",")}
		if p.Name == a.Recommended {
			r.Class, r.Marks = "recommended", append(r.Marks, "▶ recommended")
		}
		if p.Name == a.BestPolicy {
			r.Class, r.Marks = strings.TrimSpace(r.Class+" smallest"), append(r.Marks, "* smallest device")
		}
		device := orDash(p.MinDevice > 0, units.Bytes(p.MinDevice).String())
		if c.Capacity > 0 {
			v := p.Verdict
			verdict, headroom, s := "-", "-", (*SlowPath)(nil)
			if v != nil {
				verdict, s = verdictWord(v), v.SlowPath
				if v.Fits {
					headroom = units.Bytes(v.Headroom).String()
				}
			}
			r.Cells = append([]string{verdict, marginText(v), headroom}, slowPathCells(s)...)
			r.Cells = append(r.Cells, device)
		} else {
			r.Cells = append([]string{device}, slowPathCells(p.MinCapacitySlowPath)...)
		}
		r.Cells = append(r.Cells, units.Bytes(p.PeakReserved).String())
		t.Rows = append(t.Rows, r)
	}
	// The same two lines as the text's, the recommendation first.
	smallest, recommended := a.summaryLines()
	if recommended != "" {
		t.Notes = append(t.Notes, strings.TrimSuffix("▶"+strings.TrimPrefix(recommended, markRecommended), ".")+".")
	}
	if smallest != "" {
		t.Notes = append(t.Notes, smallest)
	}
	threshold := units.Bytes(max(a.ChangeThreshold, ChangeThreshold(c.Capacity))).String() + " more margin than " + short + " (the larger of 1 GiB and 1% of the capacity)"
	if c.Capacity == 0 {
		threshold = units.Bytes(max(a.ChangeThreshold, ChangeThreshold(0))).String() + " less than " + short + " need (the larger of 1 GiB and 1% of their smallest device)"
	}
	t.Notes = append(t.Notes,
		"margin: the capacity less the smallest device, the room the workload could still grow into; headroom: what was left at the peak of the run at the capacity; a change is recommended only for at least "+threshold+".",
		"retries: allocations that released cached memory and tried again (PyTorch's num_alloc_retries, gpumem's cleanups); cudaMalloc, cudaFree: PyTorch's num_device_alloc and num_device_free (page maps and unmaps with expandable segments); relocations: gpumem's.",
		"garbage_collection_threshold acts only under a capacity (its smallest capacity is the figure to read); settings are modelled from PyTorch's source, the defaults checked against recorded snapshots.")
	return t
}

// adviceHTML is the advice block of advise's page.
func (a *Advice) adviceHTML() (template.HTML, error) {
	var b strings.Builder
	if err := adviceTemplate.Execute(&b, a.adviceTable()); err != nil {
		return "", err
	}
	return template.HTML(b.String()), nil
}

// The setting cell breaks only between a setting's options (<wbr> after
// each comma), so a long combination wraps instead of widening the table
// past the window.
var adviceTemplate = template.Must(template.New("advice").Parse(`<div id="advice">
{{range .Answer}}<p class="answer">{{.}}</p>
{{end}}<div class="advice-wrap"><table id="advice-table" class="advice">
<tr>{{range .Groups}}<th class="group" colspan="{{.Span}}">{{.Title}}</th>{{end}}</tr>
<tr>{{range .Columns}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr{{if .Class}} class="{{.Class}}"{{end}}><td class="setting">{{range .Marks}}<span class="mark-label">{{.}}</span>{{end}}<span class="setting-name">{{range .Setting}}{{.}}<wbr>{{end}}</span></td>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>
{{range .Notes}}<p class="note">{{.}}</p>
{{end}}</div>`))
