package compare

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// The page's view of an out-of-memory: for each policy that does not fit
// the capacity, the failing request and the allocations live at that
// moment, largest first, with their sizes, their share of the live bytes
// and where they came from (the snapshot's entry and the top of its stack
// where it has one), and why it failed (the cause the text report gives).
// Policies that fail at the same request with the same cause and the same
// largest allocations share one view.

// failureView is one out-of-memory as the page shows it.
type failureView struct {
	Policies []string
	Heading  string
	// Cause is the cause's word (CauseExhaustion, …), CauseText the text
	// report's explanation of it, Figures the state of the allocator.
	Cause, CauseText string
	Figures          string
	Request          liveRow
	Rows             []liveRow
	// Rest sums the live allocations the rows leave out (nil when none).
	Rest      *liveRow
	Live      string
	LiveCount int
	LiveBytes uint64
}

// liveRow is one allocation of a failure view.
type liveRow struct {
	Rank  int
	Bytes uint64
	Size  string
	// Share is its share of the live bytes in words, Bar the same as a
	// CSS width (percent, at most 100).
	Share, Bar string
	Where      string
	// Frame is the top frame, shortened; Frames the whole top of the
	// stack read, with FramesNote saying which frames those are.
	Frame      string
	Frames     []string
	FramesNote string
}

func newLiveRow(a *FailingAllocation, live uint64) liveRow {
	r := liveRow{Bytes: a.Size, Size: units.Bytes(a.Size).String(), Where: a.place()}
	r.Share, r.Bar = share(a.Size, live)
	if len(a.Frames) > 0 {
		r.Frame = a.Frames[0].short()
		r.FramesNote = a.framesNote()
		for _, f := range a.Frames {
			r.Frames = append(r.Frames, f.String())
		}
	}
	return r
}

// share is n's share of total in words and as a bar's CSS width.
func share(n, total uint64) (words, bar string) {
	if total == 0 {
		return "-", "0"
	}
	f := float64(n) / float64(total) * 100
	words = fmt.Sprintf("%.1f %%", f)
	if f < 0.1 && n > 0 {
		words = "< 0.1 %"
	}
	return words, fmt.Sprintf("%.1f", min(f, 100))
}

// failureViews are the views of c's out-of-memory verdicts, in the
// panels' order (PyTorch's first for a snapshot), one per distinct
// failure.
func (c *Comparison) failureViews() []failureView {
	var out []failureView
	keys := map[string]int{}
	for _, i := range c.panelOrder() {
		p := c.Policies[i]
		v := p.Verdict
		if v == nil || v.Fits || v.OutOfMemory == nil {
			continue
		}
		o := v.OutOfMemory
		key := fmt.Sprint(o.Event, o.Cause, o.Request, o.Live)
		for _, a := range o.LargestLive {
			key += fmt.Sprint(" ", a.Event)
		}
		if i, ok := keys[key]; ok {
			out[i].Policies = append(out[i].Policies, p.Name)
			continue
		}
		keys[key] = len(out)
		out = append(out, c.failureView(p.Name, v))
	}
	return out
}

func (c *Comparison) failureView(policy string, v *Verdict) failureView {
	o := v.OutOfMemory
	f := failureView{Policies: []string{policy}, Cause: o.Cause, LiveCount: o.LiveAllocations, LiveBytes: o.Live, Live: units.Bytes(o.Live).String()}
	f.Heading = fmt.Sprintf("out of memory at %s, a request of %s", v.oomPlace(), units.Bytes(o.Request))
	req := &FailingAllocation{Event: o.Event, Size: o.Request}
	if a := v.Allocation; a != nil {
		f.Heading = "out of memory at " + a.String()
		req = a
	}
	f.Request = newLiveRow(req, o.Live)
	f.Request.Where = "the failing request: " + f.Request.Where
	// The cause in the text report's words, without its list of the
	// largest allocations (the table below is that list).
	oc := *o
	oc.LargestLive = nil
	var b strings.Builder
	oc.writeCause(&b, v.Capacity, policy, map[string]string{})
	f.CauseText = strings.Join(strings.Fields(b.String()), " ")
	figures := []string{
		fmt.Sprintf("%s live in %d allocations", units.Bytes(o.Live), o.LiveAllocations),
		fmt.Sprintf("%s requested", units.Bytes(o.Request)),
		fmt.Sprintf("%s for the allocator", units.Bytes(v.Capacity)),
		fmt.Sprintf("%s reserved", units.Bytes(o.Device)),
		fmt.Sprintf("%s free on the device", units.Bytes(o.FreeOnDevice)),
		fmt.Sprintf("%s free in reserved memory", units.Bytes(o.FreeInPages)),
	}
	if o.LargestFree > 0 {
		figures = append(figures, fmt.Sprintf("largest free block %s", units.Bytes(o.LargestFree)))
	}
	if o.Held > 0 {
		figures = append(figures, fmt.Sprintf("%s held for other streams or pools", units.Bytes(o.Held)))
	}
	f.Figures = strings.Join(figures, "; ")
	var sum uint64
	for i, a := range o.LargestLive {
		r := newLiveRow(a, o.Live)
		r.Rank = i + 1
		f.Rows = append(f.Rows, r)
		sum += a.Size
	}
	if n := o.LiveAllocations - len(o.LargestLive); n > 0 {
		rest := o.Live - min(o.Live, sum)
		r := liveRow{Bytes: rest, Size: units.Bytes(rest).String(), Where: fmt.Sprintf("the other %d allocations", n)}
		r.Share, r.Bar = share(rest, o.Live)
		f.Rest = &r
	}
	return f
}

// PolicyList names the view's policies.
func (f failureView) PolicyList() string { return strings.Join(f.Policies, ", ") }

// failureTemplate is the failure section ("failures", given the views):
// the first view open, the others a click away, so the panels stay near
// the top of the page.
const failureTemplate = `{{define "frames"}}{{if .Frames}}<details><summary><code>{{.Frame}}</code></summary><p class="note">{{.FramesNote}}:</p><ol>{{range .Frames}}<li><code>{{.}}</code></li>{{end}}</ol></details>{{else}}<span class="no-frames">—</span>{{end}}{{end}}
{{define "failures"}}<section id="failure"><h2>What was live when it ran out of memory</h2>
{{range $i, $f := .}}<details class="failure" data-cause="{{.Cause}}" data-policies="{{.PolicyList}}"{{if eq $i 0}} open{{end}}>
<summary>{{range $j, $p := .Policies}}{{if $j}}, {{end}}<a href="#panel-{{$p}}">{{$p}}</a>{{end}}: {{.Heading}}</summary>
<p class="cause">{{.CauseText}}</p>
<p class="figures">{{.Figures}}.</p>
<table class="live-at-failure">
<tr><th>#</th><th>size</th><th class="share">share of the live bytes</th><th class="where">allocation</th><th class="where">allocated at</th></tr>
<tr class="request" data-bytes="{{.Request.Bytes}}"><td>✗</td><td class="size">{{.Request.Size}}</td><td class="share"><span class="bar" style="width:{{.Request.Bar}}px"></span>{{.Request.Share}}</td><td class="where">{{.Request.Where}}</td><td class="where">{{template "frames" .Request}}</td></tr>
{{range .Rows}}<tr class="live-row" data-bytes="{{.Bytes}}"><td>{{.Rank}}</td><td class="size">{{.Size}}</td><td class="share"><span class="bar" style="width:{{.Bar}}px"></span>{{.Share}}</td><td class="where">{{.Where}}</td><td class="where">{{template "frames" .}}</td></tr>
{{end}}{{with .Rest}}<tr class="rest" data-bytes="{{.Bytes}}"><td></td><td class="size">{{.Size}}</td><td class="share"><span class="bar" style="width:{{.Bar}}px"></span>{{.Share}}</td><td class="where">{{.Where}}</td><td></td></tr>
{{end}}<tr class="total" data-bytes="{{.LiveBytes}}"><td></td><td class="size">{{.Live}}</td><td class="share">100 %</td><td class="where">live then, in {{.LiveCount}} allocations</td><td></td></tr>
</table></details>
{{end}}</section>{{end}}`
