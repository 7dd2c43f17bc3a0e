package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// writeDiffTrace writes a native trace of allocs (sizes in MiB, all live
// at the end) to dir/name.
func writeDiffTrace(t *testing.T, dir, name string, mib ...uint64) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc := trace.NewEncoder(f)
	for i, m := range mib {
		if err := enc.Encode(trace.Event{Op: trace.OpAlloc, T: int64(i), ID: uint64(i + 1), Size: m << 20}); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// diffJSON is the part of diff -json the tests read.
type diffJSON struct {
	A, B struct {
		PeakLive  uint64 `json:"peak_live_bytes"`
		TorchConf string `json:"pytorch_alloc_conf"`
	}
	Delta int64 `json:"peak_live_delta_bytes"`
	Sites []struct {
		Frames []json.RawMessage `json:"frames"`
		ABytes uint64            `json:"a_bytes"`
		BBytes uint64            `json:"b_bytes"`
		Delta  int64             `json:"delta_bytes"`
	} `json:"sites"`
	Policies []struct {
		Name string `json:"name"`
	} `json:"policies"`
}

// gpumem diff A B on two traces: JSON with each side's peak live and the
// sites (frames, a_bytes, b_bytes, delta_bytes) adding up to the
// difference; the text and HTML reports; and the usage errors, each
// naming the flag or argument to change.
func TestDiffCommand(t *testing.T) {
	dir := t.TempDir()
	a := writeDiffTrace(t, dir, "a.jsonl", 8, 8, 2)
	b := writeDiffTrace(t, dir, "b.jsonl", 8, 8, 8, 4)
	var d diffJSON
	if err := json.Unmarshal([]byte(mustRun(t, "diff", "-quiet", "-json", "-no-search", "-policies", "adaptive,torch", a, b)), &d); err != nil {
		t.Fatal(err)
	}
	if d.A.PeakLive != 18<<20 || d.B.PeakLive != 28<<20 || d.Delta != 10<<20 || len(d.Policies) != 2 {
		t.Fatalf("%+v", d)
	}
	var sum int64
	for _, s := range d.Sites {
		if s.Frames == nil || s.Delta != int64(s.BBytes)-int64(s.ABytes) {
			t.Fatalf("site %+v", s)
		}
		sum += s.Delta
	}
	if sum != d.Delta || len(d.Sites) != 3 {
		t.Fatalf("%d sites sum to %d, want %d", len(d.Sites), sum, d.Delta)
	}
	text := mustRun(t, "diff", "-quiet", "-no-search", "-policies", "adaptive", a, b)
	for _, w := range []string{"A: a.jsonl", "B: b.jsonl", "B − A +10.00 MiB", "no stack: allocations of 8.00 MiB", "all 3 sites: the peak live bytes"} {
		if !strings.Contains(text, w) {
			t.Fatalf("text lacks %q:\n%s", w, text)
		}
	}
	page := filepath.Join(dir, "diff.html")
	mustRun(t, "diff", "-quiet", "-no-search", "-policies", "adaptive", "-html", page, a, b)
	if html, err := os.ReadFile(page); err != nil || !strings.Contains(string(html), "<h1>gpumem diff</h1>") {
		t.Fatalf("-html: %v", err)
	}
	if out := mustRun(t, "help", "diff"); !strings.HasPrefix(out, "usage: gpumem diff") || !strings.Contains(out, "-b-torch-conf") {
		t.Fatalf("help diff:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"diff"}, "two runs"},
		{[]string{"diff", a, b, a}, "two runs"},
		{[]string{"diff", a}, "-a-torch-conf or -b-torch-conf"},
		{[]string{"diff", a, a}, "-a-torch-conf or -b-torch-conf"},
		{[]string{"diff", "-a-torch-conf", "expandable_segments:True", "-b-torch-conf", "expandable_segments:True", a}, "both"},
		{[]string{"diff", "-b-torch-conf", "expandable_segments:Maybe", a}, "-b-torch-conf"},
		{[]string{"diff", "-sites", "-1", a, b}, "-sites"},
		{[]string{"diff", "-frames", "-1", a, b}, "-frames"},
		{[]string{"diff", "-policies", "nosuch", a, b}, "-policies"},
		{[]string{"diff", "-json", "-format", "text", a, b}, "contradict"},
	} {
		_, _, err := runCmd(t, tc.args...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gpumem %s: %v (exit %d); want a usage error naming %q", strings.Join(tc.args, " "), err, exitCode(err), tc.want)
		}
	}
	if _, _, err := runCmd(t, "diff", a, filepath.Join(dir, "missing.jsonl")); exitCode(err) != 1 || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("a missing B: %v", err)
	}
}

// Two settings of one run, given once: the torch model's reserve falls
// with expandable segments on the shared compression snapshot, peak live
// and every site unchanged.
func TestDiffCommandTwoSettingsOfOneSnapshot(t *testing.T) {
	path := filepath.Join(sharedTraces, "llm-compression-empty-cache.pickle")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared snapshot not available (../shared beside the checkout): %v", err)
	}
	var d diffJSON
	if err := json.Unmarshal([]byte(mustRun(t, "diff", "-quiet", "-json", "-no-search", "-policies", "torch", "-b-torch-conf", "expandable_segments:True", path)), &d); err != nil {
		t.Fatal(err)
	}
	if d.Delta != 0 || d.A.TorchConf != "" || d.B.TorchConf != "expandable_segments:True" || len(d.Sites) == 0 {
		t.Fatalf("%+v", d)
	}
	for _, s := range d.Sites {
		if s.Delta != 0 || len(s.Frames) == 0 && s.ABytes == 0 {
			t.Fatalf("site %+v", s)
		}
	}
}
