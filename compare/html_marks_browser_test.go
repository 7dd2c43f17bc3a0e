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

	"github.com/gpumem/gpumem/replay"
	"github.com/gpumem/gpumem/trace"
)

// marksScript measures, in the browser, what the report marks: every
// panel's label boxes (full and zoomed), its out-of-memory line, its hover
// strips, the recorded reserve's segments, and whether the zoom checkbox
// swaps the panel sets.
const marksScript = `<script>
const out = {panels: {}};
const boxOf = e => { const b = e.getBBox(); return {x0: b.x, x1: b.x + b.width, y0: b.y, y1: b.y + b.height}; };
const measure = svg => {
  const labels = [...svg.querySelectorAll('.labels text')].map(t => ({text: t.textContent, box: boxOf(t)}));
  const overlaps = [];
  for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++) {
    const a = labels[i].box, b = labels[j].box;
    if (a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1) overlaps.push(labels[i].text + ' / ' + labels[j].text);
  }
  const rec = svg.querySelector('polyline.recorded');
  const pts = rec ? [...rec.points].map(p => [p.x, p.y]) : [];
  let sloped = 0;
  for (let i = 1; i < pts.length; i++) if (Math.abs(pts[i][0] - pts[i-1][0]) > 0.01 && Math.abs(pts[i][1] - pts[i-1][1]) > 0.01) sloped++;
  const oom = svg.querySelector('line.oom');
  return {labels: labels.map(l => l.text), overlaps, recordedPoints: pts.length, sloped,
    oomEvent: oom ? +oom.dataset.event : -1, oomLabel: !!svg.querySelector('.oom-label'),
    hover: [...svg.querySelectorAll('.hover title')].map(t => t.textContent),
    bottom: +svg.querySelector('.y-ticks .tick').dataset.bytes};
};
const shown = cls => [...document.querySelectorAll('svg.' + cls)].filter(s => getComputedStyle(s.parentElement).display !== 'none').length;
out.fullShown = shown('timeline'); out.zoomShown = shown('timeline-zoom');
for (const svg of document.querySelectorAll('svg.timeline')) out.panels[svg.id.slice('timeline-'.length)] = measure(svg);
const box = document.getElementById('zoom');
box.checked = true;
out.fullShownZoomed = shown('timeline'); out.zoomShownZoomed = shown('timeline-zoom');
out.zoom = {};
for (const svg of document.querySelectorAll('svg.timeline-zoom')) out.zoom[svg.id.slice('zoom-'.length)] = measure(svg);
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
	Hover          []string `json:"hover"`
	Bottom         uint64   `json:"bottom"`
}

type marksMeasure struct {
	Panels          map[string]marksPanel `json:"panels"`
	Zoom            map[string]marksPanel `json:"zoom"`
	FullShown       int                   `json:"fullShown"`
	ZoomShown       int                   `json:"zoomShown"`
	FullShownZoomed int                   `json:"fullShownZoomed"`
	ZoomShownZoomed int                   `json:"zoomShownZoomed"`
}

// The replay page in headless Chromium, at a capacity one policy does not
// fit and with a sparse recorded reserve (issue 24's HTML points): the
// recorded reserve is drawn in steps, never sloped; a policy that does not
// fit has its out-of-memory line and label at the failed event and says so
// in its heading; no two labels of a panel overlap (the peak label sat on
// the smallest capacity's); the zoom checkbox swaps every panel for one
// whose y axis starts above 0; each panel's hover strips carry the exact
// byte counts, the peak's among them. Screenshots at 1400×900 and
// 1920×1080 show the page drawn.
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
	if bytes.Contains(page.Bytes(), []byte("<script")) {
		t.Fatal("the report has a script")
	}
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
	n := len(c.Policies)
	if m.FullShown != n || m.ZoomShown != 0 || m.FullShownZoomed != 0 || m.ZoomShownZoomed != n {
		t.Fatalf("panels shown: %d full and %d zoomed, then with the zoom box %d and %d; want %d, 0, 0, %d",
			m.FullShown, m.ZoomShown, m.FullShownZoomed, m.ZoomShownZoomed, n, n)
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
			peak := "(" + strconv.FormatUint(p.PeakReserved, 10) + " B)"
			found := false
			for _, h := range pm.Hover {
				found = found || strings.Contains(h, "reserved up to") && strings.Contains(h, peak)
			}
			if len(pm.Hover) < 50 || !found {
				t.Errorf("%s (%s): %d hover strips, none with the peak's exact %s", p.Name, set.name, len(pm.Hover), peak)
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
