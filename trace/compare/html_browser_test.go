package compare

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
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
