package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// framesSnapshot writes a snapshot whose big allocation (entry 3) was made
// by the user's code six frames down a stack PyTorch's way: the
// unwinder's and the allocator's frames first, nn.Module's wrappers
// between the user's.
func framesSnapshot(t *testing.T) string {
	t.Helper()
	stack := []trace.TorchFrame{
		{Name: "torch::unwind::unwind()", Filename: "??"},
		{Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)"},
		{Name: "_PyEval_EvalFrameDefault", Filename: "??"},
		{Name: "attention", Filename: "/home/u/model.py", Line: 147},
		{Name: "_call_impl", Filename: "/venv/site-packages/torch/nn/modules/module.py", Line: 1750},
		{Name: "forward", Filename: "/home/u/model.py", Line: 208},
		{Name: "step", Filename: "/home/u/train.py", Line: 30},
		{Name: "main", Filename: "/home/u/train.py", Line: 41},
		{Name: "<module>", Filename: "/home/u/train.py", Line: 50},
		{Name: "run", Filename: "/home/u/launch.py", Line: 9},
	}
	s := &trace.TorchSnapshot{Traces: [][]trace.TorchTraceEntry{{
		{Action: "segment_alloc", Addr: 8 << 20, Size: 4 << 20, TimeUS: 1},
		{Action: "alloc", Addr: 8 << 20, Size: 2 << 20, TimeUS: 2},
		{Action: "segment_alloc", Addr: 16 << 20, Size: 32 << 20, TimeUS: 3, Frames: stack},
		{Action: "alloc", Addr: 16 << 20, Size: 32 << 20, TimeUS: 4, Frames: stack},
	}}}
	path := filepath.Join(t.TempDir(), "frames.pickle")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.WriteTorchSnapshot(f, s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// -frames N shows the top N frames of the failing allocation's stack, the
// user's Python frames first (default 5, 0 none), in replay's and advise's
// text and replay's JSON; below 0 is a usage error.
func TestFramesFlagShowsTheFailingAllocationsStack(t *testing.T) {
	snap := framesSnapshot(t)
	replay := func(args ...string) string {
		return mustRun(t, append([]string{"replay", "-quiet", "-no-search", "-policies", "adaptive", "-capacity", "24MiB"}, append(args, snap)...)...)
	}
	out := replay()
	want := "out of memory at device_traces entry 3 (event 1): an allocation of 32.00 MiB on stream 0 (PyTorch stream 0x0)"
	frames := "  allocated at (innermost first; 5 of the stack's 10 frames: its Python frames, PyTorch's own wrappers left out):\n" +
		"    /home/u/model.py:147  attention\n    /home/u/model.py:208  forward\n    /home/u/train.py:30  step\n" +
		"    /home/u/train.py:41  main\n    /home/u/train.py:50  <module>\n"
	if !strings.Contains(out, want) || !strings.Contains(out, frames) {
		t.Fatalf("replay's default: want %q and five frames:\n%s", want, out)
	}
	if out := replay("-frames", "1"); !strings.Contains(out, "1 of the stack's 10 frames") || !strings.Contains(out, "/home/u/model.py:147  attention\n") || strings.Contains(out, "model.py:208") {
		t.Fatalf("-frames 1:\n%s", out)
	}
	if out := replay("-frames", "0"); strings.Contains(out, "allocated at") || !strings.Contains(out, want) {
		t.Fatalf("-frames 0 still shows frames, or no longer names the allocation:\n%s", out)
	}
	var doc struct {
		Policies []struct {
			Verdict struct {
				Allocation struct {
					Entry  int `json:"device_traces_entry"`
					Frames []struct {
						File string `json:"file"`
						Line int    `json:"line"`
						Name string `json:"name"`
					} `json:"frames"`
				} `json:"failing_allocation"`
			} `json:"verdict"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(replay("-json", "-frames", "2")), &doc); err != nil {
		t.Fatal(err)
	}
	if a := doc.Policies[0].Verdict.Allocation; a.Entry != 3 || len(a.Frames) != 2 || a.Frames[1].File != "/home/u/model.py" || a.Frames[1].Line != 208 || a.Frames[1].Name != "forward" {
		t.Fatalf("JSON allocation %+v", a)
	}
	out = mustRun(t, "advise", "-quiet", "-capacity", "24MiB", "-frames", "2", snap)
	if !strings.Contains(out, "PyTorch's defaults do not fit: out of memory at device_traces entry 3") || !strings.Contains(out, "    /home/u/model.py:147  attention\n    /home/u/model.py:208  forward\n") {
		t.Fatalf("advise -frames 2:\n%s", out)
	}
	for _, cmd := range []string{"replay", "advise"} {
		if _, _, err := runCmd(t, cmd, "-frames", "-1", snap); exitCode(err) != 2 || !strings.Contains(err.Error(), "-frames -1") {
			t.Errorf("%s -frames -1: %v (exit %d), want a usage error", cmd, err, exitCode(err))
		}
	}
}

// A snapshot's allocation is named by its device_traces entry wherever a
// report names it (the table's verdict cells, advise's table, the HTML
// page), the event number only beside the entry.
func TestSnapshotAllocationsAreNamedByTheirEntry(t *testing.T) {
	snap := framesSnapshot(t)
	html := filepath.Join(t.TempDir(), "r.html")
	for _, args := range [][]string{
		{"replay", "-quiet", "-no-search", "-policies", "adaptive,torch", "-capacity", "24MiB", "-html", html, snap},
		{"advise", "-quiet", "-capacity", "24MiB", snap},
	} {
		out := mustRun(t, args...)
		for _, line := range strings.Split(out, "\n") {
			if i := strings.Index(line, "event 1"); i >= 0 && !strings.Contains(line, "device_traces entry 3 (event 1)") {
				t.Errorf("%s: the event named without its entry: %q", args[0], line)
			}
		}
		if want := map[string]string{"replay": "out of memory at device_traces entry 3\n", "advise": "OOM at device_traces entry 3"}[args[0]]; !strings.Contains(out, want) {
			t.Errorf("%s: want %q in\n%s", args[0], want, out)
		}
	}
	b, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(b), "out of memory at device_traces entry 3") || strings.Contains(string(b), "out of memory at event") {
		t.Fatalf("HTML page: %v; want the entry named", err)
	}
}
