package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
)

// checkSums fails unless the sites add up exactly: A's bytes to A's peak
// live, B's to B's, the deltas to the difference, each delta its B less A.
func checkSums(t *testing.T, d *Difference) {
	t.Helper()
	var a, b uint64
	var dd int64
	for _, s := range d.Sites {
		if s.Delta != int64(s.BBytes)-int64(s.ABytes) || s.Frames == nil {
			t.Fatalf("site %+v: delta is not B less A, or frames is null", s)
		}
		a, b, dd = a+s.ABytes, b+s.BBytes, dd+s.Delta
	}
	if a != d.A.PeakLive || b != d.B.PeakLive || dd != int64(d.B.PeakLive)-int64(d.A.PeakLive) || dd != d.PeakLiveDelta {
		t.Fatalf("sites sum to A %d, B %d, delta %d; peak live A %d, B %d, delta %d", a, b, dd, d.A.PeakLive, d.B.PeakLive, d.PeakLiveDelta)
	}
}

// diffSnapshot is a snapshot source of the given trace entries, an entry
// per (size in MiB, frames) alloc, each on its own new segment, with a
// block live before the trace began (the prelude) of prelude MiB when > 0;
// Source.Frames reads the frames again from the same bytes.
func diffSnapshot(t *testing.T, name string, prelude uint64, allocs ...struct {
	mib    uint64
	frames []trace.TorchFrame
}) Source {
	t.Helper()
	snap := &trace.TorchSnapshot{Traces: [][]trace.TorchTraceEntry{{}}}
	addr := uint64(1 << 30)
	if prelude > 0 {
		snap.Segments = []trace.TorchSegment{{Address: 64 << 20, TotalSize: prelude << 20, SegmentType: "large",
			Blocks: []trace.TorchBlock{{Address: 64 << 20, Size: prelude << 20, RequestedSize: prelude << 20, State: "active_allocated"}}}}
	}
	for i, a := range allocs {
		snap.Segments = append(snap.Segments, trace.TorchSegment{Address: addr, TotalSize: a.mib << 20, SegmentType: "large",
			Blocks: []trace.TorchBlock{{Address: addr, Size: a.mib << 20, RequestedSize: a.mib << 20, State: "active_allocated"}}})
		snap.Traces[0] = append(snap.Traces[0],
			trace.TorchTraceEntry{Action: "segment_alloc", Addr: addr, Size: a.mib << 20, TimeUS: int64(2 * i)},
			trace.TorchTraceEntry{Action: "alloc", Addr: addr, Size: a.mib << 20, TimeUS: int64(2*i + 1), Frames: a.frames})
		addr += 1 << 30
	}
	var b bytes.Buffer
	if err := trace.WriteTorchSnapshot(&b, snap); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	s, err := trace.ReadSnapshot(bytes.NewReader(data), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromSnapshot(name, s)
	if err != nil {
		t.Fatal(err)
	}
	src.Frames = func(entries []int) (map[int][]trace.TorchFrame, error) {
		return s.ReadFrames(bytes.NewReader(data), entries)
	}
	return src
}

type diffAlloc = struct {
	mib    uint64
	frames []trace.TorchFrame
}

// Sites are named by the user's frames (PyTorch's wrappers and the
// unwinder left out, as on the out-of-memory line), allocations without
// frames grouped by size, the prelude's apart; each site's live bytes at
// each peak add up to the peak, and the largest difference comes first.
func TestDiffAttributesPeakLiveToSites(t *testing.T) {
	model := []trace.TorchFrame{{Name: "torch::unwind::unwind()", Filename: "??"}, {Name: "forward", Filename: "/home/u/model.py", Line: 55},
		{Name: "_call_impl", Filename: "/venv/torch/nn/modules/module.py", Line: 1750}, {Name: "step", Filename: "/home/u/train.py", Line: 12}}
	optim := []trace.TorchFrame{{Name: "step", Filename: "/home/u/optim.py", Line: 82}, {Name: "main", Filename: "/home/u/train.py", Line: 30}}
	a := diffSnapshot(t, "a", 16, diffAlloc{10, model}, diffAlloc{4, nil}, diffAlloc{6, optim})
	b := diffSnapshot(t, "b", 16, diffAlloc{10, model}, diffAlloc{10, model}, diffAlloc{4, nil}, diffAlloc{8, nil})
	d, err := Diff(context.Background(), a, b, DiffOptions{Options: Options{Policies: []string{Torch, Adaptive}, Frames: 5}})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, d)
	if d.A.PeakLive != 36<<20 || d.B.PeakLive != 48<<20 || d.PeakLiveDelta != 12<<20 || d.SiteFrames != 5 {
		t.Fatalf("peak live A %d, B %d, delta %d", d.A.PeakLive, d.B.PeakLive, d.PeakLiveDelta)
	}
	type want struct {
		name       string
		a, b       uint64
		ac, bc     int
		beforeLive bool
	}
	wants := []want{
		{"model.py:55 forward ← u/train.py:12 step", 10 << 20, 20 << 20, 1, 2, false},
		{"no stack: allocations of 8.00 MiB", 0, 8 << 20, 0, 1, false},
		{"u/optim.py:82 step ← u/train.py:30 main", 6 << 20, 0, 1, 0, false},
		{"live before the trace began (no stack): allocations of 16.00 MiB", 16 << 20, 16 << 20, 1, 1, true},
		{"no stack: allocations of 4.00 MiB", 4 << 20, 4 << 20, 1, 1, false},
	}
	if len(d.Sites) != len(wants) {
		t.Fatalf("%d sites, want %d: %+v", len(d.Sites), len(wants), d.Sites)
	}
	for i, w := range wants {
		s := d.Sites[i]
		if !strings.HasSuffix(s.Name(), w.name) || s.ABytes != w.a || s.BBytes != w.b || s.ACount != w.ac || s.BCount != w.bc || s.BeforeTrace != w.beforeLive {
			t.Errorf("site %d: %q %d → %d (%d → %d allocations), want %q %d → %d (%d → %d)", i, s.Name(), s.ABytes, s.BBytes, s.ACount, s.BCount, w.name, w.a, w.b, w.ac, w.bc)
		}
	}
	if f := d.Sites[0].Frames; len(f) != 2 || f[0].File != "/home/u/model.py" || f[0].Line != 55 || f[1].Name != "step" {
		t.Fatalf("frames %+v; want model.py:55 forward then train.py:12 step, the wrapper left out", f)
	}
	// Recorded reserve: a segment per allocation, so it is live at its peak.
	if r := d.Recorded; r == nil || r.A.Reserved != 36<<20 || r.B.Reserved != 48<<20 || r.Delta != 12<<20 || r.LiveDelta+r.CachedFreeDelta != r.Delta {
		t.Fatalf("recorded %+v", d.Recorded)
	}
	if len(d.Policies) != 2 || d.Policies[0].Name != Torch || d.Policies[0].AMinCapacity == 0 || d.Policies[0].MinCapacityDelta == nil {
		t.Fatalf("policies %+v", d.Policies)
	}
	for _, p := range d.Policies {
		if r := p.Reserve; r.LiveDelta+r.CachedFreeDelta != r.Delta || r.A.Live+r.A.CachedFree != r.A.Reserved {
			t.Fatalf("%s: reserve %+v does not split", p.Name, r)
		}
	}
	// Frames 0: every allocation by size.
	d, err = Diff(context.Background(), a, b, DiffOptions{Options: Options{Policies: []string{Torch}, SkipCapacity: true}})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, d)
	for _, s := range d.Sites {
		if len(s.Frames) != 0 || s.Size == 0 {
			t.Fatalf("-frames 0: site %+v has frames", s)
		}
	}
	// The text lists the first sites and sums the rest, and its total is
	// the difference in peak live; the JSON has the fields scripts read.
	var text strings.Builder
	if err := d.WriteTextWidth(&text, DefaultTextWidth, 2); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"peak live: A 36.00 MiB, B 48.00 MiB, B − A +12.00 MiB", "the other 3 sites", "+12.00 MiB        4 → 5  all 5 sites: the peak live bytes"} {
		if !strings.Contains(text.String(), w) {
			t.Fatalf("text lacks %q:\n%s", w, text.String())
		}
	}
	for _, l := range strings.Split(text.String(), "\n") {
		if len([]rune(l)) > DefaultTextWidth {
			t.Fatalf("line wider than %d: %q", DefaultTextWidth, l)
		}
	}
	var js bytes.Buffer
	if err := d.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, side := range []string{"a", "b"} {
		if _, ok := doc[side].(map[string]any)["peak_live_bytes"]; !ok {
			t.Fatalf("%s lacks peak_live_bytes: %s", side, js.String())
		}
	}
	for _, s := range doc["sites"].([]any) {
		for _, k := range []string{"frames", "a_bytes", "b_bytes", "delta_bytes"} {
			if _, ok := s.(map[string]any)[k]; !ok {
				t.Fatalf("site lacks %s: %v", k, s)
			}
		}
	}
	var page bytes.Buffer
	if err := d.WriteHTML(&page, 2); err != nil || !strings.Contains(page.String(), "<h1>gpumem diff</h1>") || !strings.Contains(page.String(), "the other 3 sites") {
		t.Fatalf("HTML (%v):\n%s", err, page.String())
	}
}

// Two native traces (no frames): the sites are sizes; a side's error
// names it.
func TestDiffNativeTracesGroupBySize(t *testing.T) {
	a := causeTrace([4]any{"alloc", 1, 8, 0}, [4]any{"alloc", 2, 8, 0}, [4]any{"free", 1, 0, 0})
	b := causeTrace([4]any{"alloc", 1, 8, 0}, [4]any{"alloc", 2, 8, 0}, [4]any{"alloc", 3, 2, 0}, [4]any{"free", 1, 0, 0})
	d, err := Diff(context.Background(), a, b, DiffOptions{Options: Options{Policies: []string{Adaptive}, SkipCapacity: true, Frames: 5}})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, d)
	if len(d.Sites) != 2 || d.Sites[0].Size != 2<<20 || d.Sites[0].Delta != 2<<20 || d.Sites[1].Size != 8<<20 || d.Sites[1].ABytes != 16<<20 || d.Sites[1].Delta != 0 || d.Recorded != nil {
		t.Fatalf("sites %+v, recorded %+v", d.Sites, d.Recorded)
	}
	if _, err := Diff(context.Background(), a, Source{Name: "empty"}, DiffOptions{}); err == nil || !strings.Contains(err.Error(), "B (empty)") {
		t.Fatalf("an empty B: %v; want an error naming B", err)
	}
}

// diffShared reads a shared snapshot with its frames, or skips.
func diffShared(t *testing.T, name string) Source {
	t.Helper()
	src := sharedSource(t, name)
	path := filepath.Join("..", "..", "..", "..", "shared", "traces", name)
	f, err := os.Open(path)
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	snap, err := trace.ReadSnapshot(f, trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.Frames = FramesFromFile(path, snap)
	return src
}

// The ctx128 forward pass against the full training step: the step's
// optimizer state and gradients make the difference, the forward's
// activations are gone at the step's peak, and the sites add up to the
// difference in peak live to the byte.
func TestDiffForwardAgainstFullStepOnSharedSnapshots(t *testing.T) {
	a := diffShared(t, "transformer-ctx128-forward.pickle")
	b := diffShared(t, "transformer-ctx128-fullstep.pickle")
	d, err := Diff(context.Background(), a, b, DiffOptions{Options: Options{Policies: []string{Torch, Adaptive}, Frames: 5}})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, d)
	if d.FramesError != "" {
		t.Fatal(d.FramesError)
	}
	top := d.Sites[0]
	if top.ABytes != 0 || top.BBytes < 12<<30 || len(top.Frames) == 0 || !strings.HasSuffix(top.Frames[0].File, "optimizers.py") {
		t.Fatalf("top site %q %d → %d; want the optimizer's state, over 12 GiB in B only", top.Name(), top.ABytes, top.BBytes)
	}
	if r := d.Recorded; r == nil || r.Delta <= 0 || r.LiveDelta+r.CachedFreeDelta != r.Delta || r.LiveDelta != d.PeakLiveDelta {
		t.Fatalf("recorded reserve %+v; want it up by the peak live difference plus cache", d.Recorded)
	}
	for _, p := range d.Policies {
		if p.MinCapacityDelta == nil || *p.MinCapacityDelta < d.PeakLiveDelta-(256<<20) {
			t.Fatalf("%s: smallest capacity %d → %d", p.Name, p.AMinCapacity, p.BMinCapacity)
		}
	}
}

// The compression snapshot under two torch settings: the same events, so
// every site holds the same bytes and the peak live is unchanged, while
// the torch model's reserve falls with expandable segments, all of it
// cached free memory.
func TestDiffTwoTorchSettingsOnSharedSnapshot(t *testing.T) {
	src := diffShared(t, "llm-compression-empty-cache.pickle")
	exp, err := torch.ParseConf("expandable_segments:True")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Diff(context.Background(), src, src, DiffOptions{Options: Options{Policies: []string{Torch}, Frames: 5}, BTorchSettings: &exp})
	if err != nil {
		t.Fatal(err)
	}
	checkSums(t, d)
	if d.PeakLiveDelta != 0 || d.A.TorchConf != "" || d.B.TorchConf != "expandable_segments:True" || d.B.TorchSettingsFrom != "-b-torch-conf" {
		t.Fatalf("sides %+v %+v", d.A, d.B)
	}
	for _, s := range d.Sites {
		if s.Delta != 0 {
			t.Fatalf("site %q differs: %+v", s.Name(), s)
		}
	}
	r := d.Policies[0].Reserve
	if r.Delta >= -(512<<20) || r.LiveDelta != 0 || r.CachedFreeDelta != r.Delta || d.Policies[0].MinCapacityDelta == nil || *d.Policies[0].MinCapacityDelta >= 0 {
		t.Fatalf("torch: reserve %+v, smallest capacity %d → %d; want over 512 MiB less, all of it cached free, a smaller device", r, d.Policies[0].AMinCapacity, d.Policies[0].BMinCapacity)
	}
	var text strings.Builder
	if err := d.WriteText(&text); err != nil || !strings.Contains(strings.Join(strings.Fields(text.String()), " "), "holds the same bytes at both peaks") {
		t.Fatalf("text (%v):\n%s", err, text.String())
	}
}
