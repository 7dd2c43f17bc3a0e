package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// The allocation a policy fails at is named as the snapshot has it: its
// device_traces entry (not the replay's event number, which the prelude
// and entries that emit nothing shift), its size and PyTorch's stream; an
// allocation the prelude rebuilt says so.
func TestOutOfMemoryNamesTheSnapshotEntry(t *testing.T) {
	js := `{"segments": [{"device": 0, "address": 1048576, "total_size": 2097152, "stream": 7, "blocks": [{"address": 1048576, "size": 1048576, "state": "active_allocated"}]}],
 "device_traces": [[
  {"action": "segment_alloc", "addr": 8388608, "size": 4194304, "stream": 7, "time_us": 1},
  {"action": "alloc", "addr": 8388608, "size": 2097152, "stream": 7, "time_us": 2},
  {"action": "free_requested", "addr": 8388608, "size": 2097152, "stream": 7, "time_us": 3},
  {"action": "alloc", "addr": 16777216, "size": 33554432, "stream": 7, "time_us": 4}]]}`
	snap, err := trace.ReadSnapshot(strings.NewReader(js), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromSnapshot("tiny", snap)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive, Torch}, SkipCapacity: true, Capacity: 24 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Policies {
		a := p.Verdict.Allocation
		if p.Verdict.Fits || a == nil || a.Entry == nil || *a.Entry != 3 || a.Size != 32<<20 || a.PyTorchStream == nil || *a.PyTorchStream != 7 || a.Prelude {
			t.Fatalf("%s: verdict %+v, allocation %+v; want entry 3, 32 MiB, PyTorch stream 7", p.Name, p.Verdict, a)
		}
		if s := a.String(); !strings.Contains(s, "device_traces entry 3") || !strings.Contains(s, "32.00 MiB") || !strings.Contains(s, "0x7") {
			t.Fatalf("%s: %q", p.Name, s)
		}
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil || !strings.Contains(text.String(), "out of memory at device_traces entry 3 (event") {
		t.Fatalf("the report does not name the entry (%v):\n%s", err, text.String())
	}
	// At 512 KiB the prelude's 1 MiB block itself fails: said as such.
	c, err = Run(context.Background(), src, Options{Policies: []string{Adaptive}, SkipCapacity: true, Capacity: 1 << 19})
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Policies[0].Verdict.Allocation; a == nil || !a.Prelude || a.Entry != nil || !strings.Contains(a.String(), "before the trace's first entry") {
		t.Fatalf("the prelude's block: %+v", a)
	}
}

// framesSource is a snapshot of three allocs, written as a pickle with
// stacks as PyTorch records them (the unwinder's and the allocator's
// frames first, nn.Module's wrappers between the user's), with
// Source.Frames reading them again from the same bytes; reads counts the
// calls.
func framesSource(t *testing.T) (src Source, reads *int) {
	t.Helper()
	stack := []trace.TorchFrame{
		{Name: "torch::unwind::unwind()", Filename: "??"},
		{Name: "torch::CapturedTraceback::gather(bool, bool, bool)", Filename: "??"},
		{Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", Filename: ""},
		{Name: "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", Filename: "??"},
		{Name: "_PyEval_EvalFrameDefault", Filename: "??"},
		{Name: "forward", Filename: "/home/u/model.py", Line: 55},
		{Name: "_call_impl", Filename: "/venv/site-packages/torch/nn/modules/module.py", Line: 1750},
		{Name: "_wrapped_call_impl", Filename: "/venv/site-packages/torch/nn/modules/module.py", Line: 1739},
		{Name: "train_step", Filename: "/home/u/train.py", Line: 12},
		{Name: "<module>", Filename: "/home/u/train.py", Line: 40},
	}
	small := []trace.TorchFrame{{Name: "torch::unwind::unwind()", Filename: "??"}, {Name: "setup", Filename: "/home/u/train.py", Line: 3}}
	snap := &trace.TorchSnapshot{Traces: [][]trace.TorchTraceEntry{{
		{Action: "segment_alloc", Addr: 8 << 20, Size: 4 << 20, TimeUS: 1, Frames: small},
		{Action: "alloc", Addr: 8 << 20, Size: 2 << 20, TimeUS: 2, Frames: small},
		{Action: "segment_alloc", Addr: 16 << 20, Size: 32 << 20, TimeUS: 3, Frames: stack},
		{Action: "alloc", Addr: 16 << 20, Size: 32 << 20, TimeUS: 4, Frames: stack},
	}}}
	var b bytes.Buffer
	if err := trace.WriteTorchSnapshot(&b, snap); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	s, err := trace.ReadSnapshot(bytes.NewReader(data), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, err = FromSnapshot("frames", s)
	if err != nil {
		t.Fatal(err)
	}
	reads = new(int)
	src.Frames = func(entries []int) (map[int][]trace.TorchFrame, error) {
		*reads++
		return s.ReadFrames(bytes.NewReader(data), entries)
	}
	return src, reads
}

// The failing allocation shows the top of its stack: the user's Python
// frames, the unwinder's, the allocator's and nn.Module's left out, in the
// text (once per entry), the JSON (file, line, name) and the HTML; the
// stacks are read once for all the policies, and not at all with Frames 0.
func TestFailingAllocationShowsTheUsersFrames(t *testing.T) {
	src, reads := framesSource(t)
	c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive, Torch}, SkipCapacity: true, Capacity: 24 << 20, Frames: 2, Timeline: 100})
	if err != nil {
		t.Fatal(err)
	}
	if *reads != 1 {
		t.Fatalf("the stacks were read %d times for two failing policies, want once", *reads)
	}
	want := []Frame{{File: "/home/u/model.py", Line: 55, Name: "forward"}, {File: "/home/u/train.py", Line: 12, Name: "train_step"}}
	for _, p := range c.Policies {
		a := p.Verdict.Allocation
		if a == nil || a.Entry == nil || *a.Entry != 3 || !slices.Equal(a.Frames, want) || a.StackDepth != 10 {
			t.Fatalf("%s: allocation %+v, want entry 3 with frames %v of a stack of 10", p.Name, a, want)
		}
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"  allocated at (innermost first; 2 of the stack's 10 frames: its Python frames, PyTorch's own wrappers left out):",
		"    /home/u/model.py:55  forward\n    /home/u/train.py:12  train_step\n",
		"  allocated at the same place as for adaptive above",
	} {
		if !strings.Contains(text.String(), line) {
			t.Fatalf("the text report lacks %q:\n%s", line, text.String())
		}
	}
	if strings.Contains(text.String(), "unwind") || strings.Contains(text.String(), "_call_impl") {
		t.Fatalf("the text report shows PyTorch's own frames:\n%s", text.String())
	}
	var js bytes.Buffer
	if err := c.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Policies []struct {
			Verdict struct {
				Allocation map[string]any `json:"failing_allocation"`
			} `json:"verdict"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	frames, _ := doc.Policies[0].Verdict.Allocation["frames"].([]any)
	if len(frames) != 2 || !reflect.DeepEqual(frames[0], map[string]any{"file": "/home/u/model.py", "line": 55.0, "name": "forward"}) {
		t.Fatalf("JSON frames %v", doc.Policies[0].Verdict.Allocation["frames"])
	}
	var page bytes.Buffer
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `<ol class="frames"><li><code>/home/u/model.py:55  forward</code></li>`) {
		t.Fatalf("the HTML report lacks the frames:\n%s", page.String())
	}

	// Frames 0: nothing read, no "frames" in the JSON.
	*reads = 0
	c, err = Run(context.Background(), src, Options{Policies: []string{Adaptive}, SkipCapacity: true, Capacity: 24 << 20})
	if err != nil {
		t.Fatal(err)
	}
	js.Reset()
	if err := c.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if *reads != 0 || c.Policies[0].Verdict.Allocation.Frames != nil || strings.Contains(js.String(), `"frames":`) {
		t.Fatalf("Frames 0: %d reads, frames %v", *reads, c.Policies[0].Verdict.Allocation.Frames)
	}
	// A policy that fits reads nothing either.
	c, err = Run(context.Background(), src, Options{Policies: []string{Adaptive}, SkipCapacity: true, Capacity: 1 << 30, Frames: 5})
	if err != nil || *reads != 0 || !c.Policies[0].Verdict.Fits {
		t.Fatalf("fitting: %v, %d reads", err, *reads)
	}
}

// Frames that cannot be read leave the verdict as it is and say why.
func TestUnreadableFramesAreAWarning(t *testing.T) {
	src, _ := framesSource(t)
	src.Frames = func([]int) (map[int][]trace.TorchFrame, error) { return nil, errors.New("the file is gone") }
	c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive}, SkipCapacity: true, Capacity: 24 << 20, Frames: 5})
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Policies[0].Verdict.Allocation; a == nil || a.Entry == nil || *a.Entry != 3 || a.Frames != nil || c.FramesError != "the file is gone" {
		t.Fatalf("allocation %+v, frames error %q", a, c.FramesError)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil || !strings.Contains(text.String(), "warning: stack frames not read: the file is gone") {
		t.Fatalf("%v:\n%s", err, text.String())
	}
}

// advise names the defaults' failing allocation and shows its frames, read
// once for the whole grid.
func TestAdviseShowsTheDefaultsFailingFrames(t *testing.T) {
	src, reads := framesSource(t)
	a, err := Advise(context.Background(), src, Options{Capacity: 24 << 20, Frames: 1})
	if err != nil {
		t.Fatal(err)
	}
	if *reads != 1 {
		t.Fatalf("the stacks were read %d times, want once", *reads)
	}
	var text strings.Builder
	if err := a.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PyTorch's defaults do not fit: out of memory at device_traces entry 3", "\n    /home/u/model.py:55  forward\n"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("advise's text lacks %q:\n%s", want, text.String())
		}
	}
}

// On a real snapshot, at a capacity below the smallest one, the failing
// allocation is named with frames of the user's Python code.
func TestSharedSnapshotFailingAllocationHasPythonFrames(t *testing.T) {
	const name = "transformer-ctx128-forward.pickle"
	path := filepath.Join("..", "..", "..", "..", "shared", "traces", name)
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("shared snapshot %s not available (../shared beside the checkout): %v", name, err)
	}
	snap, err := trace.ReadSnapshot(f, trace.SnapshotOptions{})
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromSnapshot(name, snap)
	if err != nil {
		t.Fatal(err)
	}
	src.Frames = FramesFromFile(path, snap)
	c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive}})
	if err != nil {
		t.Fatal(err)
	}
	below := c.Policies[0].MinCapacity - 64<<20
	c, err = Run(context.Background(), src, Options{Policies: []string{Adaptive, Torch}, SkipCapacity: true, Capacity: below, Frames: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Policies {
		a := p.Verdict.Allocation
		if p.Verdict.Fits || a == nil || a.Entry == nil || len(a.Frames) == 0 || len(a.Frames) > 5 {
			t.Fatalf("%s at %d B: verdict %+v, allocation %+v", p.Name, below, p.Verdict, a)
		}
		for _, fr := range a.Frames {
			if !strings.HasSuffix(fr.File, ".py") || fr.Line <= 0 || strings.HasSuffix(fr.File, "torch/nn/modules/module.py") {
				t.Fatalf("%s: entry %d shows %+v, want the user's Python frames", p.Name, *a.Entry, a.Frames)
			}
		}
		t.Logf("%s: out of memory at entry %d, %d of %d frames, first %s", p.Name, *a.Entry, len(a.Frames), a.StackDepth, a.Frames[0])
	}
}

// A frame reads "file:line  name"; a C++ frame's argument list, which
// repeats what its name implies, is cut to "(…)".
func TestFrameString(t *testing.T) {
	for f, want := range map[Frame]string{
		{File: "/home/u/model.py", Line: 55, Name: "forward"}:                                      "/home/u/model.py:55  forward",
		{File: "RegisterCUDA.cpp", Name: "at::native::zeros(c10::ArrayRef<long>, long)"}:           "RegisterCUDA.cpp  at::native::zeros(…)",
		{File: "??", Name: "torch::autograd::Node::operator()(std::vector<at::Tensor>&&)"}:         "torch::autograd::Node::operator()(…)",
		{Name: "torch::autograd::VariableType::(anonymous namespace)::bmm(c10::DispatchKeySet)"}:   "torch::autograd::VariableType::(anonymous namespace)::bmm(…)",
		{Name: "void at::meta::checks<at::meta::structured_bmm>(at::meta::structured_bmm&) const"}: "void at::meta::checks<at::meta::structured_bmm>(…) const",
		{Name: "c10::impl::wrap<at::Tensor (at::Tensor const&)>::call(c10::OperatorKernel*)"}:      "c10::impl::wrap<at::Tensor (at::Tensor const&)>::call(…)",
		{Name: "at::Tensor::size()"}:            "at::Tensor::size()",
		{Name: "execute_native_thread_routine"}: "execute_native_thread_routine",
	} {
		if got := f.String(); got != want {
			t.Errorf("%+v: %q, want %q", f, got, want)
		}
	}
	long := Frame{File: "x.py", Line: 1, Name: strings.Repeat("é", 200)}
	if got := long.String(); !strings.HasSuffix(got, "…") || utf8.RuneCountInString(got) != len("x.py:1  ")+160+1 {
		t.Errorf("a long name: %d runes", utf8.RuneCountInString(got))
	}
}
