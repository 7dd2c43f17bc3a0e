package compare

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/gpumem/gpumem/trace"
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
	if bytes.Contains(html.Bytes(), []byte("<script")) || bytes.Contains(html.Bytes(), []byte("http://")) && !bytes.Contains(html.Bytes(), []byte("http://www.w3.org/2000/svg")) {
		t.Fatal("the page is not standalone: it has a script or an external reference")
	}
	if err := os.WriteFile(page, html.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1000,700", "--screenshot="+shot, "file://"+page)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
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
	if bytes.Contains(page.Bytes(), []byte("<script")) {
		t.Fatal("the report has a script")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "measure.html")
	measured := bytes.Replace(page.Bytes(), []byte("</body>"), []byte(measureScript+"</body>"), 1)
	if err := os.WriteFile(path, measured, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--dump-dom", "file://"+path).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	_, after, ok := bytes.Cut(out, []byte(`<pre id="measure">`))
	js, _, ok2 := bytes.Cut(after, []byte("</pre>"))
	if !ok || !ok2 {
		t.Fatalf("the browser did not run the measurement:\n%.2000s", out)
	}
	var panels map[string]panelMeasure
	if err := json.Unmarshal([]byte(html.UnescapeString(string(js))), &panels); err != nil {
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
