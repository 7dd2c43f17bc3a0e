package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/units"
)

// panelPolicy is c's result for the named policy.
func panelPolicy(t *testing.T, c *Comparison, name string) PolicyResult {
	t.Helper()
	for _, p := range c.Policies {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no policy %s", name)
	return PolicyResult{}
}

// shotsDir is where a browser test leaves its screenshots: the folder
// $GPUMEM_HTML_SHOTS names (to look at them), else the test's temporary
// folder.
func shotsDir(t *testing.T) string {
	if d := os.Getenv("GPUMEM_HTML_SHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// Times of idleSnapshot's two bursts (µs).
const (
	idleBurst1End   = 1_000
	idleBurst2Start = 1_000_000
)

// idleSnapshot is a PyTorch snapshot of two bursts of work a second apart:
// setup allocations at the start, then, after an idle second, the burst
// that holds the peak, ending in a 64 MiB request; every entry has a
// stack, the user's frame naming its phase and (by line) its size. It
// returns the source, with frames, and the peak live bytes before the
// last request.
func idleSnapshot(t *testing.T) (Source, uint64) {
	t.Helper()
	stack := func(fn string, line int) []trace.TorchFrame {
		return []trace.TorchFrame{
			{Name: "torch::unwind::unwind()", Filename: "??"},
			{Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", Filename: ""},
			{Name: fn, Filename: "/home/u/model.py", Line: line},
			{Name: "train_step", Filename: "/home/u/train.py", Line: 12},
			{Name: "<module>", Filename: "/home/u/train.py", Line: 40},
		}
	}
	type block struct{ addr, size uint64 }
	var (
		entries []trace.TorchTraceEntry
		live    []block
		addr    = uint64(1 << 32)
		now     = int64(1)
		cur     uint64
		peak    uint64
	)
	alloc := func(size uint64, fn string, line int) {
		f := stack(fn, line)
		entries = append(entries,
			trace.TorchTraceEntry{Action: "segment_alloc", Addr: addr, Size: size, TimeUS: now, Frames: f},
			trace.TorchTraceEntry{Action: "alloc", Addr: addr, Size: size, TimeUS: now, Frames: f})
		live = append(live, block{addr, size})
		addr += size
		now += 9
		cur += size
		peak = max(peak, cur)
	}
	free := func(i int) {
		b := live[i]
		live = append(live[:i], live[i+1:]...)
		entries = append(entries,
			trace.TorchTraceEntry{Action: "free_requested", Addr: b.addr, Size: b.size, TimeUS: now},
			trace.TorchTraceEntry{Action: "free_completed", Addr: b.addr, Size: b.size, TimeUS: now},
			trace.TorchTraceEntry{Action: "segment_free", Addr: b.addr, Size: b.size, TimeUS: now})
		now += 7
		cur -= b.size
	}
	for i := range 20 {
		alloc(1<<20, "setup", 10+i%3)
	}
	for range 10 {
		free(len(live) - 1)
	}
	if now > idleBurst1End {
		t.Fatalf("the first burst ends at %d µs", now)
	}
	now = idleBurst2Start
	for i := range 60 {
		alloc(uint64(2+i%7)<<20, "forward", 100+i%7)
		if i%3 == 2 {
			free(len(live) - 2)
		}
	}
	for i := range 6 {
		alloc(uint64(24+4*i)<<20, "backward", 200+i)
	}
	before := peak
	alloc(64<<20, "optimizer_step", 300)
	var b bytes.Buffer
	if err := trace.WriteTorchSnapshot(&b, &trace.TorchSnapshot{Traces: [][]trace.TorchTraceEntry{entries}}); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	s, err := trace.ReadSnapshot(bytes.NewReader(data), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromSnapshot("idle", s)
	if err != nil {
		t.Fatal(err)
	}
	src.Frames = func(entries []int) (map[int][]trace.TorchFrame, error) {
		return s.ReadFrames(bytes.NewReader(data), entries)
	}
	return src, before
}

// zoomScript, appended to a copy of the page, measures the page as it
// opened (panel widths, order, the time range and ticks, the failure
// view), then drags across the first panel from a quarter to three fifths
// of its plot, then presses "whole run", measuring after each.
const zoomScript = `<script>
const svgs = [...document.querySelectorAll('svg.timeline')];
const state = () => ({
  range: svgs.map(s => [+s.dataset.x0, +s.dataset.x1]),
  ticks: [...svgs[0].querySelectorAll('.x-ticks text')].map(t => t.textContent),
  text: document.getElementById('x-range').textContent,
  peaks: svgs.map(s => s.querySelectorAll('circle.peak').length),
  points: svgs.map(s => [...s.querySelectorAll('.series > *')].map(p => (p.tagName === 'use' ? document.querySelector(p.getAttribute('href')) : p).points.numberOfItems)),
});
const out = {
  viewport: document.documentElement.clientWidth,
  widths: svgs.map(s => s.getBoundingClientRect().width),
  order: [...document.querySelectorAll('section.panel')].map(s => s.dataset.policy),
  nodes: document.getElementsByTagName('*').length,
  opened: state(),
};
const f = document.querySelector('#failure details.failure');
out.failure = f && {
  open: f.open, policies: f.dataset.policies, cause: f.dataset.cause,
  summary: f.querySelector('summary').textContent,
  request: [...f.querySelectorAll('tr.request td')].map(td => td.textContent),
  requestBytes: +f.querySelector('tr.request').dataset.bytes,
  rows: [...f.querySelectorAll('tr.live-row')].map(r => ({bytes: +r.dataset.bytes, cells: [...r.cells].map(td => td.textContent), visible: r.getBoundingClientRect().height > 0})),
  total: +f.querySelector('tr.total').dataset.bytes,
};
const svg = svgs[0], plot = svg.querySelector('rect.plot'), m = svg.getScreenCTM();
const px = frac => m.a * (plot.x.baseVal.value + frac * plot.width.baseVal.value) + m.e;
const py = m.d * (plot.y.baseVal.value + plot.height.baseVal.value / 2) + m.f;
out.plot = [plot.x.baseVal.value, plot.width.baseVal.value];
const mouse = (type, x) => svg.dispatchEvent(new MouseEvent(type, {bubbles: true, button: 0, clientX: x, clientY: py}));
mouse('mousedown', px(0.25));
mouse('mousemove', px(0.4));
out.selecting = svg.querySelector('rect.selection').getAttribute('visibility');
mouse('mousemove', px(0.6));
mouse('mouseup', px(0.6));
out.dragged = state();
document.getElementById('zoom-reset').click();
out.whole = state();
document.getElementById('zoom-focus').click();
out.refocused = state();
const pre = document.createElement('pre');
pre.id = 'measure';
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>`

type zoomState struct {
	Range  [][2]float64 `json:"range"`
	Ticks  []string     `json:"ticks"`
	Text   string       `json:"text"`
	Peaks  []int        `json:"peaks"`
	Points [][]int      `json:"points"`
}

type zoomMeasure struct {
	Viewport float64   `json:"viewport"`
	Widths   []float64 `json:"widths"`
	Order    []string  `json:"order"`
	Nodes    int       `json:"nodes"`
	Opened   zoomState `json:"opened"`
	Failure  *struct {
		Open         bool     `json:"open"`
		Policies     string   `json:"policies"`
		Cause        string   `json:"cause"`
		Summary      string   `json:"summary"`
		Request      []string `json:"request"`
		RequestBytes uint64   `json:"requestBytes"`
		Rows         []struct {
			Bytes   uint64   `json:"bytes"`
			Cells   []string `json:"cells"`
			Visible bool     `json:"visible"`
		} `json:"rows"`
		Total uint64 `json:"total"`
	} `json:"failure"`
	Plot      [2]float64 `json:"plot"`
	Selecting string     `json:"selecting"`
	Dragged   zoomState  `json:"dragged"`
	Whole     zoomState  `json:"whole"`
	Refocused zoomState  `json:"refocused"`
}

// The replay page of a PyTorch snapshot whose peak comes after an idle
// second, at a capacity its last request does not fit, in headless
// Chromium at 1400×900 and 1920×1080 (issue 41, item 3): every panel is
// the window's width, less the page's margins; PyTorch's panels come
// first; the page opens on the peak's burst (the idle second and the
// first burst out of view) and says so; a drag across a panel zooms every
// panel to the stretch dragged over, with ticks of its own; "whole run"
// shows the whole run and "the peak's neighbourhood" the burst again; the
// failure view, open at the top, lists the request and the live
// allocations largest first with their sizes, entries and the user's
// frames, as the JSON has them; and no series has more points than two
// per pixel column and a half. The screenshots show the failure view's
// request row and the reserved lines.
func TestHTMLPageZoomsFillsTheWindowAndShowsTheFailureInARealBrowser(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skip("no chromium on PATH: .ci/run installs Debian's chromium; install it to run this test")
	}
	src, before := idleSnapshot(t)
	c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive, AdaptivePages, Torch, TorchExpandable}, SkipCapacity: true,
		Timeline: 1500, Capacity: before + 32<<20, Frames: 5})
	if err != nil {
		t.Fatal(err)
	}
	torch := panelPolicy(t, c, Torch)
	o := torch.Verdict.OutOfMemory
	if torch.Verdict.Fits || o == nil || o.Request != 64<<20 || len(o.LargestLive) != largestLiveShown || len(o.LargestLive[0].Frames) == 0 {
		t.Fatalf("torch at the capacity: %+v; want the 64 MiB request refused with ten live allocations and their frames", torch.Verdict)
	}
	var page bytes.Buffer
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	standalone(t, page.Bytes())
	size := strconv.Itoa(page.Len())
	if !strings.Contains(page.String(), "This page: "+size+" ") {
		t.Errorf("the page does not say its size, %s bytes", size)
	}
	dir := t.TempDir()
	plain := filepath.Join(dir, "idle.html")
	measured := filepath.Join(dir, "idle-measured.html")
	if err := os.WriteFile(plain, page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(measured, bytes.Replace(page.Bytes(), []byte("</body>"), []byte(zoomScript+"</body>"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	shots := shotsDir(t)
	if err := os.WriteFile(filepath.Join(shots, "idle.html"), page.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var widths []float64
	for _, win := range []struct{ w, h int }{{1400, 900}, {1920, 1080}} {
		t.Run(fmt.Sprintf("%dx%d", win.w, win.h), func(t *testing.T) {
			profile := filepath.Join(dir, fmt.Sprintf("profile-%d", win.w))
			window := fmt.Sprintf("--window-size=%d,%d", win.w, win.h)
			js := measurement(t, headless(t, browser, profile, window, "--dump-dom", "file://"+measured))
			var m zoomMeasure
			if err := json.Unmarshal(js, &m); err != nil {
				t.Fatal(err)
			}
			checkZoomPage(t, c, m, float64(win.w))
			widths = append(widths, m.Widths[0])
			shot := filepath.Join(shots, fmt.Sprintf("idle-%dx%d.png", win.w, win.h))
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
			if b := img.Bounds(); b.Dx() != win.w || b.Dy() != win.h {
				t.Fatalf("screenshot %v, want %dx%d", b, win.w, win.h)
			}
			// The failure view's request row (#fbeaea) is on the first
			// screen.
			if n := countExact(img, 0xfb, 0xea, 0xea); n < 1000 {
				t.Errorf("the failing request's row shows on %d pixels, want ≥ 1000", n)
			}
		})
	}
	if len(widths) == 2 && widths[1]-widths[0] < 500 {
		t.Errorf("the panels are %.0f px wide at 1400 px and %.0f px at 1920 px: they do not follow the window", widths[0], widths[1])
	}
}

func checkZoomPage(t *testing.T, c *Comparison, m zoomMeasure, window float64) {
	t.Helper()
	if m.Viewport < window-20 || m.Viewport > window {
		t.Fatalf("the page was laid out %v px wide, want the %v px window", m.Viewport, window)
	}
	// Body margins: 2em (32 px) each side.
	for i, w := range m.Widths {
		if w < m.Viewport-64-2 || w > m.Viewport-64+0.5 {
			t.Errorf("panel %d is %.1f px wide in a %.0f px window, want the window less the margins (%.0f px)", i, w, m.Viewport, m.Viewport-64)
		}
	}
	if want := []string{Torch, TorchExpandable, Adaptive, AdaptivePages}; strings.Join(m.Order, ",") != strings.Join(want, ",") {
		t.Errorf("panels in the order %q, want PyTorch's first: %q", m.Order, want)
	}
	if m.Nodes > 2500 {
		t.Errorf("%d elements in the page", m.Nodes)
	}
	// Opened on the second burst.
	full := [2]float64{float64(c.firstT), float64(c.lastT)}
	for i, r := range m.Opened.Range {
		if r[0] <= idleBurst1End || r[0] > idleBurst2Start || r[1] != full[1] {
			t.Fatalf("panel %d opened on %v of the run's %v, want the burst after %d µs", i, r, full, idleBurst2Start)
		}
		if m.Opened.Peaks[i] != 1 {
			t.Errorf("panel %d opened without its peak marked", i)
		}
	}
	if !strings.Contains(m.Opened.Text, "the peak's neighbourhood: idle stretches take 9") {
		t.Errorf("the range is said as %q", m.Opened.Text)
	}
	// The drag: from a quarter to three fifths of the plot, every panel.
	if m.Selecting != "visible" {
		t.Errorf("no selection drawn while dragging (%q)", m.Selecting)
	}
	o := m.Opened.Range[0]
	span := o[1] - o[0]
	perPx := span / m.Plot[1]
	for i, r := range m.Dragged.Range {
		if d0, d1 := r[0]-(o[0]+0.25*span), r[1]-(o[0]+0.6*span); d0 < -2*perPx-1 || d0 > 2*perPx+1 || d1 < -2*perPx-1 || d1 > 2*perPx+1 {
			t.Fatalf("panel %d dragged from %v to %v, want about [%.0f %.0f]", i, o, r, o[0]+0.25*span, o[0]+0.6*span)
		}
	}
	if strings.Join(m.Dragged.Ticks, "|") == strings.Join(m.Opened.Ticks, "|") || len(m.Dragged.Ticks) < 3 {
		t.Errorf("ticks %q after the drag, %q before", m.Dragged.Ticks, m.Opened.Ticks)
	}
	for i, r := range m.Whole.Range {
		if r != full {
			t.Errorf("panel %d after whole run: %v, want %v", i, r, full)
		}
	}
	if !strings.HasPrefix(m.Whole.Text, "the whole run") || m.Refocused.Range[0] != m.Opened.Range[0] {
		t.Errorf("whole run says %q; back at the peak: %v, opened on %v", m.Whole.Text, m.Refocused.Range[0], m.Opened.Range[0])
	}
	// At most first, lowest, highest, last a column (and the points either
	// side of the range).
	for _, st := range []zoomState{m.Opened, m.Dragged, m.Whole} {
		for i, ps := range st.Points {
			if len(ps) != 3 {
				t.Errorf("panel %d draws %d series (%v), want the recorded reserve, the reserved and the live bytes", i, len(ps), ps)
			}
			for _, n := range ps {
				if n < 2 {
					t.Errorf("panel %d draws a series of %d points", i, n)
				}
				if float64(n) > 4*m.Plot[1]+10 {
					t.Errorf("panel %d draws a series of %d points over %.0f px", i, n, m.Plot[1])
				}
			}
		}
	}
	// The failure: PyTorch's first, open, as the JSON has it.
	f := m.Failure
	torch := panelPolicy(t, c, Torch)
	want := torch.Verdict.OutOfMemory
	if f == nil || !f.Open || !strings.HasPrefix(f.Policies, Torch) || f.Cause != want.Cause {
		t.Fatalf("failure view %+v; want torch's, open, cause %s", f, want.Cause)
	}
	if f.RequestBytes != want.Request || !strings.Contains(strings.Join(f.Request, " "), "64.00 MiB") || !strings.Contains(strings.Join(f.Request, " "), "model.py:300") ||
		!strings.Contains(f.Summary, "device_traces entry") {
		t.Errorf("the failing request: %q (%d B), summary %q", f.Request, f.RequestBytes, f.Summary)
	}
	if len(f.Rows) != len(want.LargestLive) || f.Total != want.Live {
		t.Fatalf("%d live rows (total %d B), want %d (%d B)", len(f.Rows), f.Total, len(want.LargestLive), want.Live)
	}
	for i, r := range f.Rows {
		a := want.LargestLive[i]
		if r.Bytes != a.Size || i > 0 && r.Bytes > f.Rows[i-1].Bytes || !r.Visible {
			t.Errorf("row %d: %d B (visible %v), want %d B, largest first", i, r.Bytes, r.Visible, a.Size)
		}
		text := strings.Join(r.Cells, " | ")
		if !strings.Contains(text, units.Bytes(a.Size).String()) || !strings.Contains(text, fmt.Sprintf("device_traces entry %d", *a.Entry)) ||
			!strings.Contains(text, "/model.py:") {
			t.Errorf("row %d: %q; want its size, entry %d and its frame", i, text, *a.Entry)
		}
	}
}
