package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// findChromium returns a headless-capable browser, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// headless runs the browser on a page (args name it and what to do:
// --screenshot=FILE, --dump-dom, --window-size=W,H) with a profile folder
// of its own, and returns what it printed; it fails the test on an error
// or after two minutes.
func headless(t *testing.T, browser, profile string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + profile}
	cmd := exec.CommandContext(ctx, browser, append(base, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.Bytes())
	}
	return out
}

// standalone fails the test when a page could reach past itself: a
// script or image fetched (src=), a stylesheet linked or imported, a frame,
// a request from the script, or any URL but the SVG namespace's. Its own
// styles, script and data are inline.
func standalone(t *testing.T, page []byte) {
	t.Helper()
	s := strings.ReplaceAll(string(page), "http://www.w3.org/2000/svg", "")
	for _, bad := range []string{"http://", "https://", "src=", "<link", "@import", "<iframe", "<img", "fetch(", "XMLHttpRequest", "WebSocket", "import("} {
		if strings.Contains(s, bad) {
			t.Fatalf("the page is not standalone: it has %q", bad)
		}
	}
}

// measurement returns the JSON a measuring script left in <pre
// id="measure"> of a dumped page.
func measurement(t *testing.T, dom []byte) []byte {
	t.Helper()
	_, after, ok := bytes.Cut(dom, []byte(`<pre id="measure">`))
	js, _, ok2 := bytes.Cut(after, []byte("</pre>"))
	if !ok || !ok2 {
		t.Fatalf("the browser did not run the measurement:\n%.2000s", dom)
	}
	return []byte(html.UnescapeString(string(js)))
}

// TestHTMLReportTimelineIsDrawnInARealBrowser renders the HTML report in
// headless Chromium and checks the screenshot shows both timeline colours:
// the page is standalone and the SVG really draws.
func TestHTMLReportTimelineIsDrawnInARealBrowser(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skip("no chromium on PATH: .ci/run installs Debian's chromium; install it to run this test")
	}
	events, err := trace.Synth("growth", 3, trace.SynthParams{Allocs: 400})
	if err != nil {
		t.Fatal(err)
	}
	var list []trace.Event
	for e := range events {
		list = append(list, e)
	}
	c, err := Run(context.Background(), Source{Name: "growth", Events: list}, Options{
		Policies: []string{Adaptive}, SkipCapacity: true, Timeline: 500,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	var html bytes.Buffer
	if err := c.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	standalone(t, html.Bytes())
	if err := os.WriteFile(page, html.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "shot.png")
	headless(t, browser, filepath.Join(dir, "profile"), "--window-size=1000,700", "--screenshot="+shot, "file://"+page)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	live, reserved := countColour(img, 0x1f, 0x77, 0xb4), countColour(img, 0xd6, 0x27, 0x28)
	if live < 200 || reserved < 200 {
		t.Fatalf("timeline not drawn: %d live-blue and %d reserved-red pixels, want ≥ 200 each", live, reserved)
	}
}

// countColour counts pixels within a small distance of (r, g, b).
func countColour(img image.Image, r, g, b uint8) int {
	n := 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if near(pr>>8, r) && near(pg>>8, g) && near(pb>>8, b) {
				n++
			}
		}
	}
	return n
}

func near(v uint32, want uint8) bool {
	d := int(v) - int(want)
	return d > -24 && d < 24
}

// measureScript, appended to a copy of the report (the report itself has
// no script), measures what the browser drew: per panel the tick labels,
// the top of the drawn reserved line in bytes (through the y ticks'
// positions and values), the peak marker, and the level lines.
const measureScript = `<script>
const out = {};
for (const svg of document.querySelectorAll('svg.timeline')) {
  const ticks = [...svg.querySelectorAll('.y-ticks .tick')];
  const at = t => ({bytes: +t.dataset.bytes, y: t.querySelector('line').getBBox().y});
  const a = at(ticks[0]), b = at(ticks[ticks.length - 1]);
  const perUnit = (b.bytes - a.bytes) / (a.y - b.y);
  const top = svg.querySelector('polyline.reserved').getBBox().y;
  const peak = svg.querySelector('circle.peak');
  out[svg.id.slice('timeline-'.length)] = {
    yticks: ticks.map(t => t.querySelector('text').textContent),
    tickYs: ticks.map(t => at(t).y),
    xticks: [...svg.querySelectorAll('.x-ticks .tick text')].map(t => t.textContent),
    perUnit, drawnPeak: a.bytes + (a.y - top) * perUnit, lineTop: top,
    markerBytes: peak.dataset.bytes, markerY: peak.cy.baseVal.value,
    levels: [...svg.querySelectorAll('.level')].map(g => ({cls: g.querySelector('line').className.baseVal, bytes: g.dataset.bytes, y: g.querySelector('line').getBBox().y})),
  };
}
const pre = document.createElement('pre');
pre.id = 'measure';
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>`

// panelMeasure is what measureScript reports for one panel.
type panelMeasure struct {
	YTicks      []string  `json:"yticks"`
	TickYs      []float64 `json:"tickYs"`
	XTicks      []string  `json:"xticks"`
	PerUnit     float64   `json:"perUnit"`
	DrawnPeak   float64   `json:"drawnPeak"`
	LineTop     float64   `json:"lineTop"`
	MarkerBytes string    `json:"markerBytes"`
	MarkerY     float64   `json:"markerY"`
	Levels      []struct {
		Class string  `json:"cls"`
		Bytes string  `json:"bytes"`
		Y     float64 `json:"y"`
	} `json:"levels"`
}

// The HTML report, rendered in headless Chromium: every panel has the same
// y axis (binary units, ticks) and an x axis in trace time with ticks; the
// capacity and the policy's smallest capacity are drawn as lines at their
// levels; and the drawn peak of the reserved line is the JSON peak — the
// marker carries it to the byte, and the line's top is at the marker.
func TestHTMLReportAxesLinesAndPeakInARealBrowser(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skip("no chromium on PATH: .ci/run installs Debian's chromium; install it to run this test")
	}
	events := synthEvents(t, "transformer", 2, trace.SynthParams{Allocs: 3000})
	c, err := Run(context.Background(), Source{Name: "transformer", Events: events}, Options{
		Policies: []string{Adaptive, AdaptivePages, Torch}, Timeline: 200, Capacity: 8 << 30,
	})
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	standalone(t, page.Bytes())
	dir := t.TempDir()
	path := filepath.Join(dir, "measure.html")
	measured := bytes.Replace(page.Bytes(), []byte("</body>"), []byte(measureScript+"</body>"), 1)
	if err := os.WriteFile(path, measured, 0o644); err != nil {
		t.Fatal(err)
	}
	js := measurement(t, headless(t, browser, filepath.Join(dir, "profile"), "--dump-dom", "file://"+path))
	var panels map[string]panelMeasure
	if err := json.Unmarshal(js, &panels); err != nil {
		t.Fatal(err)
	}
	var first *panelMeasure
	for _, p := range c.Policies {
		m, ok := panels[p.Name]
		if !ok {
			t.Fatalf("no panel for %s", p.Name)
		}
		if len(m.YTicks) < 3 || len(m.XTicks) < 3 || !strings.HasSuffix(m.YTicks[1], "iB") || !strings.HasSuffix(m.XTicks[1], "s") {
			t.Fatalf("%s: y ticks %q, x ticks %q: want binary sizes and trace times", p.Name, m.YTicks, m.XTicks)
		}
		if first == nil {
			first = &m
		} else if !slices.Equal(m.YTicks, first.YTicks) || !slices.Equal(m.TickYs, first.TickYs) || !slices.Equal(m.XTicks, first.XTicks) {
			t.Fatalf("%s: axes differ from the first panel's: %q at %v vs %q at %v", p.Name, m.YTicks, m.TickYs, first.YTicks, first.TickYs)
		}
		if m.MarkerBytes != strconv.FormatUint(p.PeakReserved, 10) {
			t.Fatalf("%s: peak marker %s B, JSON peak %d B", p.Name, m.MarkerBytes, p.PeakReserved)
		}
		if d := m.LineTop - m.MarkerY; d > 0.01 || d < -0.01 {
			t.Fatalf("%s: the drawn line's top is at y %.3f, the peak marker at %.3f", p.Name, m.LineTop, m.MarkerY)
		}
		if d := m.DrawnPeak - float64(p.PeakReserved); d > m.PerUnit*0.05 || d < -m.PerUnit*0.05 {
			t.Fatalf("%s: drawn peak %.0f B, JSON %d B (%.0f B per unit)", p.Name, m.DrawnPeak, p.PeakReserved, m.PerUnit)
		}
		want := map[string]uint64{"capacity": c.Capacity, "min-capacity": p.MinCapacity}
		for _, l := range m.Levels {
			if l.Bytes != strconv.FormatUint(want[l.Class], 10) {
				t.Fatalf("%s: %s line at %s B, want %d", p.Name, l.Class, l.Bytes, want[l.Class])
			}
			delete(want, l.Class)
		}
		if len(want) != 0 {
			t.Fatalf("%s: lines missing: %v", p.Name, want)
		}
	}
}

// adviseMeasureScript, appended to a copy of advise's page, reports the
// viewport's width, the advice table's verdict cells' right edges, the
// marked rows, and every pair of the table's text boxes that overlap.
const adviseMeasureScript = `<script>
const table = document.getElementById('advice-table');
const heads = [...table.rows[1].cells].map(c => c.textContent.trim());
const vcol = heads.indexOf('verdict');
const boxes = [];
const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  if (!n.textContent.trim()) continue;
  const r = document.createRange();
  r.selectNodeContents(n);
  for (const b of r.getClientRects()) boxes.push({text: n.textContent.trim(), l: b.left, r: b.right, t: b.top, b: b.bottom});
}
const overlaps = [];
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
  const a = boxes[i], b = boxes[j];
  const w = Math.min(a.r, b.r) - Math.max(a.l, b.l), h = Math.min(a.b, b.b) - Math.max(a.t, b.t);
  if (w > 0.5 && h > 0.5) overlaps.push(a.text + ' / ' + b.text);
}
const rows = [...table.rows].slice(2);
const out = {
  viewport: document.documentElement.clientWidth,
  title: document.title,
  verdictRight: Math.max(...[...table.rows].slice(1).map(r => r.cells[vcol].getBoundingClientRect().right)),
  tableRight: table.getBoundingClientRect().right,
  recommended: rows.filter(r => r.classList.contains('recommended')).map(r => r.cells[0].textContent),
  smallest: rows.filter(r => r.classList.contains('smallest')).map(r => r.cells[0].textContent),
  overlaps: overlaps,
  boxes: boxes.length,
  hasPre: !!document.querySelector('pre#advice'),
};
const pre = document.createElement('pre');
pre.id = 'measure';
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>`

// advise's HTML page in headless Chromium at 1400×900 and 1920×1080: it
// is titled "gpumem advise"; the advice is a table, not a clipped block of
// text; the recommended row is there, marked by its class and by a visible
// "▶ recommended"; the verdict column lies within the window; and no two
// of the table's text boxes overlap.
func TestAdvisePageInARealBrowser(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skip("no chromium on PATH: .ci/run installs Debian's chromium; install it to run this test")
	}
	a, err := Advise(context.Background(), Source{Name: "pinned", Events: pinnedTrace(64)}, Options{Capacity: 8 << 30, Timeline: 200})
	if err != nil {
		t.Fatal(err)
	}
	if a.Recommended == "" || a.Recommended == defaultsPolicy {
		t.Fatalf("the trace does not recommend a change: %q", a.Recommended)
	}
	var page bytes.Buffer
	if err := a.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	standalone(t, page.Bytes())
	dir := t.TempDir()
	path := filepath.Join(dir, "advise.html")
	measured := bytes.Replace(page.Bytes(), []byte("</body>"), []byte(adviseMeasureScript+"</body>"), 1)
	if err := os.WriteFile(path, measured, 0o644); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain.html")
	if err := os.WriteFile(plain, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := policyOf(t, a, a.Recommended)
	for _, size := range []struct{ w, h int }{{1400, 900}, {1920, 1080}} {
		t.Run(fmt.Sprintf("%dx%d", size.w, size.h), func(t *testing.T) {
			profile := filepath.Join(dir, fmt.Sprintf("profile-%d", size.w))
			window := fmt.Sprintf("--window-size=%d,%d", size.w, size.h)
			shot := filepath.Join(dir, fmt.Sprintf("advise-%dx%d.png", size.w, size.h))
			headless(t, browser, profile, window, "--screenshot="+shot, "file://"+plain)
			f, err := os.Open(shot)
			if err != nil {
				t.Fatalf("no screenshot: %v", err)
			}
			img, err := png.Decode(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() != size.w || b.Dy() != size.h {
				t.Fatalf("screenshot %v, want %dx%d", b, size.w, size.h)
			}
			// The recommended row's green: #e6f4ea, distinct from the
			// page's other fills.
			if n := countExact(img, 0xe6, 0xf4, 0xea); n < 2000 {
				t.Fatalf("the recommended row's background shows on %d pixels, want ≥ 2000", n)
			}
			js := measurement(t, headless(t, browser, profile, window, "--dump-dom", "file://"+path))
			var m struct {
				Viewport     float64  `json:"viewport"`
				Title        string   `json:"title"`
				VerdictRight float64  `json:"verdictRight"`
				TableRight   float64  `json:"tableRight"`
				Recommended  []string `json:"recommended"`
				Smallest     []string `json:"smallest"`
				Overlaps     []string `json:"overlaps"`
				Boxes        int      `json:"boxes"`
				HasPre       bool     `json:"hasPre"`
			}
			if err := json.Unmarshal(js, &m); err != nil {
				t.Fatal(err)
			}
			if m.Viewport < float64(size.w)-20 || m.Viewport > float64(size.w) {
				t.Fatalf("the page was laid out %v px wide, want the %d px window", m.Viewport, size.w)
			}
			if !strings.HasPrefix(m.Title, "gpumem advise: ") || m.HasPre {
				t.Fatalf("title %q, advice as a <pre>: %v", m.Title, m.HasPre)
			}
			if len(m.Recommended) != 1 || !strings.Contains(m.Recommended[0], "▶ recommended") || !strings.Contains(m.Recommended[0], strings.Split(*rec.TorchConf, ",")[0]) {
				t.Fatalf("recommended rows %q, want one marked ▶ recommended for %s", m.Recommended, *rec.TorchConf)
			}
			if len(m.Smallest) != 1 || !strings.Contains(m.Smallest[0], "smallest device") {
				t.Fatalf("smallest-device rows %q", m.Smallest)
			}
			if m.VerdictRight > m.Viewport || m.TableRight > m.Viewport {
				t.Fatalf("the verdict column ends at %.0f px and the table at %.0f px, past the %.0f px window", m.VerdictRight, m.TableRight, m.Viewport)
			}
			if m.Boxes < 100 || len(m.Overlaps) > 0 {
				t.Fatalf("%d text boxes, overlapping: %q", m.Boxes, m.Overlaps)
			}
		})
	}
}

// countExact counts pixels of exactly (r, g, b).
func countExact(img image.Image, r, g, b uint8) int {
	n := 0
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if uint8(pr>>8) == r && uint8(pg>>8) == g && uint8(pb>>8) == b {
				n++
			}
		}
	}
	return n
}
