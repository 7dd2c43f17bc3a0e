package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/units"
)

// marksScript measures, in the browser, what the report marks: every
// panel's label boxes, its out-of-memory line, the readout a pointer over
// its peak gets, the recorded reserve's segments; then the same with the y
// zoom checkbox ticked.
const marksScript = `<script>
const out = {panels: {}, zoom: {}};
const boxOf = e => { const b = e.getBBox(); return {x0: b.x, x1: b.x + b.width, y0: b.y, y1: b.y + b.height}; };
const measure = svg => {
  const labels = [...svg.querySelectorAll('.labels text')].map(t => ({text: t.textContent, box: boxOf(t)}));
  const overlaps = [];
  for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++) {
    const a = labels[i].box, b = labels[j].box;
    if (a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1) overlaps.push(labels[i].text + ' / ' + labels[j].text);
  }
  // The recorded reserve, the same in every panel, is drawn once and used.
  const use = svg.querySelector('.recorded'), rec = use && (use.tagName === 'use' ? document.querySelector(use.getAttribute('href')) : use);
  const pts = rec ? [...rec.points].map(p => [p.x, p.y]) : [];
  let sloped = 0;
  for (let i = 1; i < pts.length; i++) if (Math.abs(pts[i][0] - pts[i-1][0]) > 0.01 && Math.abs(pts[i][1] - pts[i-1][1]) > 0.01) sloped++;
  const oom = svg.querySelector('line.oom');
  // The pointer over the peak's pixel, halfway up the plot.
  const peak = svg.querySelector('circle.peak'), plot = svg.querySelector('rect.plot'), m = svg.getScreenCTM();
  const y = plot.y.baseVal.value + plot.height.baseVal.value / 2;
  svg.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: Math.floor(m.a * peak.cx.baseVal.value + m.e), clientY: m.d * y + m.f}));
  return {labels: labels.map(l => l.text), overlaps, recordedPoints: pts.length, sloped,
    oomEvent: oom ? +oom.dataset.event : -1, oomLabel: !!svg.querySelector('.oom-label'),
    hover: svg.nextElementSibling.textContent,
    bottom: +svg.querySelector('.y-ticks .tick').dataset.bytes};
};
for (const svg of document.querySelectorAll('svg.timeline')) out.panels[svg.id.slice('timeline-'.length)] = measure(svg);
const box = document.getElementById('zoom');
box.checked = true;
box.dispatchEvent(new Event('change'));
for (const svg of document.querySelectorAll('svg.timeline')) out.zoom[svg.id.slice('timeline-'.length)] = measure(svg);
const pre = document.createElement('pre');
pre.id = 'measure';
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>`

type marksPanel struct {
	Labels         []string `json:"labels"`
	Overlaps       []string `json:"overlaps"`
	RecordedPoints int      `json:"recordedPoints"`
	Sloped         int      `json:"sloped"`
	OOMEvent       int      `json:"oomEvent"`
	OOMLabel       bool     `json:"oomLabel"`
	Hover          string   `json:"hover"`
	Bottom         uint64   `json:"bottom"`
}

type marksMeasure struct {
	Panels map[string]marksPanel `json:"panels"`
	Zoom   map[string]marksPanel `json:"zoom"`
}

// The replay page in headless Chromium, at a capacity one policy does not
// fit and with a sparse recorded reserve (issue 24's HTML points): the
// recorded reserve is drawn in steps, never sloped; a policy that does not
// fit has its out-of-memory line and label at the failed event and says so
// in its heading; no two labels of a panel overlap (the peak label sat on
// the smallest capacity's); the y zoom checkbox draws every panel again on
// a y axis that starts above 0, with the same marks; the pointer over a
// panel's peak reads the peak's exact byte count. Screenshots at 1400×900
// and 1920×1080 show the page drawn.
func TestHTMLReportMarksStepsVerdictsZoomAndHover(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skip("no chromium on PATH: .ci/run installs Debian's chromium; install it to run this test")
	}
	events := synthEvents(t, "transformer", 2, trace.SynthParams{Allocs: 3000})
	first, last := events[0].T, events[len(events)-1].T
	src := Source{Name: "transformer", Events: events, RecordedTimeline: []replay.Point{
		{Event: 0, T: first, Device: 1 << 30},
		{Event: len(events) / 3, T: first + (last-first)/3, Device: 5 << 30},
		{Event: 2 * len(events) / 3, T: first + 2*(last-first)/3, Device: 7 << 30},
		{Event: len(events) - 1, T: last, Device: 6 << 30},
	}}
	c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive, Exclusive, Torch}, Timeline: 300, Capacity: 6<<30 + 700<<20})
	if err != nil {
		t.Fatal(err)
	}
	var noFit *PolicyResult
	for i, p := range c.Policies {
		if p.Verdict != nil && !p.Verdict.Fits {
			noFit = &c.Policies[i]
		}
	}
	if noFit == nil {
		t.Fatal("every policy fits: the test needs one that does not")
	}
	var page bytes.Buffer
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	standalone(t, page.Bytes())
	dir := t.TempDir()
	path := filepath.Join(dir, "marks.html")
	if err := os.WriteFile(path, bytes.Replace(page.Bytes(), []byte("</body>"), []byte(marksScript+"</body>"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "profile")
	js := measurement(t, headless(t, browser, profile, "--dump-dom", "file://"+path))
	var m marksMeasure
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Panels) != len(c.Policies) || len(m.Zoom) != len(c.Policies) {
		t.Fatalf("%d panels, %d with the y zoom; want %d", len(m.Panels), len(m.Zoom), len(c.Policies))
	}
	for _, p := range c.Policies {
		for _, set := range []struct {
			name  string
			panel marksPanel
		}{{"full", m.Panels[p.Name]}, {"zoomed", m.Zoom[p.Name]}} {
			pm := set.panel
			if len(pm.Labels) < 2 || len(pm.Overlaps) > 0 {
				t.Errorf("%s (%s): labels %q, overlapping: %q", p.Name, set.name, pm.Labels, pm.Overlaps)
			}
			if pm.RecordedPoints < 2*len(src.RecordedTimeline)-1 || pm.Sloped != 0 {
				t.Errorf("%s (%s): the recorded reserve has %d points, %d sloped segments; want steps", p.Name, set.name, pm.RecordedPoints, pm.Sloped)
			}
			peak := "reserved up to " + units.Bytes(p.PeakReserved).String() + " (" + strconv.FormatUint(p.PeakReserved, 10) + " B)"
			if !strings.Contains(pm.Hover, peak) {
				t.Errorf("%s (%s): the pointer over the peak reads %q, want the peak's exact %q", p.Name, set.name, pm.Hover, peak)
			}
			wantOOM := -1
			if p.Verdict != nil && !p.Verdict.Fits {
				wantOOM = p.Verdict.OutOfMemory.Event
			}
			if pm.OOMEvent != wantOOM || (wantOOM >= 0) != pm.OOMLabel {
				t.Errorf("%s (%s): out-of-memory line at event %d (label %v), want %d", p.Name, set.name, pm.OOMEvent, pm.OOMLabel, wantOOM)
			}
		}
		if m.Panels[p.Name].Bottom != 0 || m.Zoom[p.Name].Bottom == 0 || m.Zoom[p.Name].Bottom > c.PeakLive {
			t.Errorf("%s: y axes start at %d (full) and %d (zoomed); want 0 and above 0 but not above peak live %d",
				p.Name, m.Panels[p.Name].Bottom, m.Zoom[p.Name].Bottom, c.PeakLive)
		}
	}
	if !bytes.Contains(page.Bytes(), []byte("does not fit")) {
		t.Error("no panel heading says a policy does not fit")
	}
	for _, size := range []string{"1400,900", "1920,1080"} {
		shot := filepath.Join(dir, "shot-"+strings.ReplaceAll(size, ",", "x")+".png")
		headless(t, browser, profile, "--window-size="+size, "--screenshot="+shot, "file://"+path)
		f, err := os.Open(shot)
		if err != nil {
			t.Fatalf("no screenshot at %s: %v", size, err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if red := countColour(img, 0xd6, 0x27, 0x28); red < 50 {
			t.Errorf("the screenshot at %s shows %d reserved-line pixels", size, red)
		}
	}
}
