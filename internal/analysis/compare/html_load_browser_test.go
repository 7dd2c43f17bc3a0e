package compare

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cdp is a connection to a browser over --remote-debugging-pipe: JSON
// messages ended by a NUL byte, the browser reading fd 3 and writing fd 4.
type cdp struct {
	w      *os.File
	r      *bufio.Reader
	id     int
	events []string // methods of the events read while waiting for a reply
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    any             `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     json.RawMessage `json:"error,omitempty"`
}

func (c *cdp) read() (cdpMessage, error) {
	b, err := c.r.ReadBytes(0)
	if err != nil {
		return cdpMessage{}, err
	}
	var m cdpMessage
	err = json.Unmarshal(b[:len(b)-1], &m)
	return m, err
}

// call sends a command and returns its result.
func (c *cdp) call(session, method string, params any, result any) error {
	c.id++
	b, err := json.Marshal(cdpMessage{ID: c.id, Method: method, Params: params, SessionID: session})
	if err != nil {
		return err
	}
	if _, err := c.w.Write(append(b, 0)); err != nil {
		return err
	}
	for {
		m, err := c.read()
		if err != nil {
			return err
		}
		if m.ID == c.id {
			if m.Error != nil {
				return fmt.Errorf("%s: %s", method, m.Error)
			}
			if result == nil {
				return nil
			}
			return json.Unmarshal(m.Result, result)
		}
		if m.Method != "" {
			c.events = append(c.events, m.Method)
		}
	}
}

// wait reads until the event method arrives (or has arrived since the
// last wait).
func (c *cdp) wait(method string) error {
	for i, e := range c.events {
		if e == method {
			c.events = c.events[i+1:]
			return nil
		}
	}
	c.events = nil
	for {
		m, err := c.read()
		if err != nil {
			return err
		}
		if m.Method == method {
			return nil
		}
	}
}

// pageLoad is how long a page took to open, in ms after navigation
// start: its DOM built (its inline script run), its load event, and the
// second animation frame after it (laid out and painted once).
type pageLoad struct {
	DCL, Load, Painted float64
	Elements           int
}

// pageLoadProbe runs in the page once it has loaded.
const pageLoadProbe = `new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  r(JSON.stringify({DCL: nav.domContentLoadedEventEnd, Load: nav.loadEventEnd, Painted: performance.now(), Elements: document.getElementsByTagName('*').length}));
})))`

// measureLoads opens each page runs times in one headless browser at
// 1920×1080 and returns the best of each figure.
func measureLoads(t *testing.T, browser string, pages []string, runs int) []pageLoad {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	toBrowser, browserIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	browserOut, fromBrowser, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	// The profile is removed after the browser has closed, its helper
	// processes with it (t.TempDir's removal can race them).
	profile, err := os.MkdirTemp("", "gpumem-html-load")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(profile)
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--hide-scrollbars", "--window-size=1920,1080", "--remote-debugging-pipe",
		"--user-data-dir="+profile, "about:blank")
	cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toBrowser.Close()
	fromBrowser.Close()
	c := &cdp{w: browserIn, r: bufio.NewReaderSize(browserOut, 1<<20)}
	defer func() {
		c.call("", "Browser.close", map[string]any{}, nil) // the reply may not come: the browser is gone
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	var targets struct {
		TargetInfos []struct{ TargetID, Type string } `json:"targetInfos"`
	}
	if err := c.call("", "Target.getTargets", map[string]any{}, &targets); err != nil {
		t.Fatal(err)
	}
	target := ""
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" {
			target = ti.TargetID
		}
	}
	var attached struct{ SessionID string }
	if err := c.call("", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}, &attached); err != nil {
		t.Fatal(err)
	}
	s := attached.SessionID
	for _, m := range []string{"Page.enable", "Runtime.enable"} {
		if err := c.call(s, m, map[string]any{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	navigate := func(url string) {
		if err := c.call(s, "Page.navigate", map[string]any{"url": url}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.wait("Page.loadEventFired"); err != nil {
			t.Fatal(err)
		}
	}
	// Round robin, after a pass not counted, so that no page pays for the
	// browser's warming up or gains from a quiet moment the others miss.
	out := make([]pageLoad, len(pages))
	for i := range out {
		out[i] = pageLoad{DCL: 1e9, Load: 1e9, Painted: 1e9}
	}
	for run := -1; run < runs; run++ {
		for i, page := range pages {
			abs, err := filepath.Abs(page)
			if err != nil {
				t.Fatal(err)
			}
			navigate("about:blank")
			navigate("file://" + abs)
			var ev struct {
				Result struct{ Value string } `json:"result"`
			}
			if err := c.call(s, "Runtime.evaluate", map[string]any{"expression": pageLoadProbe, "awaitPromise": true, "returnByValue": true}, &ev); err != nil {
				t.Fatal(err)
			}
			var l pageLoad
			if err := json.Unmarshal([]byte(ev.Result.Value), &l); err != nil {
				t.Fatalf("%s: %v (%q)", page, err, ev.Result.Value)
			}
			if run < 0 {
				continue
			}
			b := &out[i]
			*b = pageLoad{DCL: min(b.DCL, l.DCL), Load: min(b.Load, l.Load), Painted: min(b.Painted, l.Painted), Elements: l.Elements}
		}
	}
	return out
}

// How long headless Chromium takes to open HTML pages: those of the
// folder $GPUMEM_HTML_PAGES (every .html in it: written by any version of
// gpumem, to compare), else the replay page of the shared training step
// at a capacity it does not fit. Each page is opened five times in one
// browser at 1920×1080 and the best figures logged: bytes, elements, ms
// after navigation start to the DOM built (inline scripts run), the load
// event and the second frame after it (laid out and painted). This
// version's page is standalone, under 300 KiB and 2500 elements with every
// panel drawn, and opens in under five seconds, however loaded the
// machine.
func TestHTMLPageLoadTimes(t *testing.T) {
	browser := findChromium()
	if browser == "" {
		t.Skip("no chromium on PATH: .ci/run installs Debian's chromium; install it to run this test")
	}
	var pages []string
	if dir := os.Getenv("GPUMEM_HTML_PAGES"); dir != "" {
		var err error
		if pages, err = filepath.Glob(filepath.Join(dir, "*.html")); err != nil || len(pages) == 0 {
			t.Fatalf("no .html in $GPUMEM_HTML_PAGES %s (%v)", dir, err)
		}
	} else {
		src := sharedSource(t, "transformer-ctx128-fullstep.pickle")
		c, err := Run(context.Background(), src, Options{Timeline: 1500, Capacity: 48 << 30, SkipCapacity: true})
		if err != nil {
			t.Fatal(err)
		}
		var page bytes.Buffer
		if err := c.WriteHTML(&page); err != nil {
			t.Fatal(err)
		}
		standalone(t, page.Bytes())
		if page.Len() > 300<<10 || strings.Count(page.String(), `<svg id="timeline-`) != len(c.Policies) {
			t.Errorf("the page is %d bytes, want at most 300 KiB, with a panel for each of the %d policies", page.Len(), len(c.Policies))
		}
		path := filepath.Join(t.TempDir(), "fullstep-48GiB.html")
		if err := os.WriteFile(path, page.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		pages = []string{path}
	}
	loads := measureLoads(t, browser, pages, 5)
	t.Logf("%-24s %9s %8s %8s %8s %8s", "page", "bytes", "elements", "DOM", "load", "painted")
	for i, p := range pages {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		l := loads[i]
		t.Logf("%-24s %9d %8d %5.0f ms %5.0f ms %5.0f ms", filepath.Base(p), st.Size(), l.Elements, l.DCL, l.Load, l.Painted)
		if os.Getenv("GPUMEM_HTML_PAGES") == "" && (l.Painted > 5000 || l.Elements > 2500) {
			t.Errorf("%s took %.0f ms to open, with %d elements", filepath.Base(p), l.Painted, l.Elements)
		}
	}
}
