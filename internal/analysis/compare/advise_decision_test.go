package compare

import (
	"context"
	"strings"
	"testing"
)

// pinnedTrace leaves every freed 64 MiB block pinned by a 36 MiB one
// carved from its segment (the 28 MiB left is too small for the next
// round's), then asks for 512 MiB: PyTorch's defaults keep a 64 MiB
// segment per round (the pinned ones cannot go back), while
// expandable segments, or a split limit that keeps small requests off the
// 64 MiB blocks, reuse the freed room: settings that gain far more than a
// change's worth of margin.
func pinnedTrace(rounds int) eventLog {
	var l eventLog
	id := uint64(1)
	for range rounds {
		l.alloc(id, 64<<20)
		l.free(id)
		l.alloc(id+1, 36<<20)
		id += 2
	}
	l.alloc(id, 512<<20)
	return l
}

// flushTrace frees eight 512 MiB blocks and asks for four of 1 GiB: the
// cached 512 MiB segments cannot serve them, so under a capacity PyTorch
// releases them — at the out of memory with the defaults (a retry), early
// and repeatedly with garbage_collection_threshold. Either way the smallest
// device is the same; garbage collection only lowers the peak under a
// capacity, a headroom it cannot grow into.
func flushTrace() eventLog {
	var l eventLog
	for i := range uint64(8) {
		l.alloc(1+i, 512<<20)
	}
	for i := range uint64(8) {
		l.free(1 + i)
	}
	for i := range uint64(4) {
		l.alloc(100+i, 1<<30)
	}
	return l
}

func adviseAt(t *testing.T, events eventLog, capacity uint64) *Advice {
	t.Helper()
	a, err := Advise(context.Background(), Source{Name: "hand-written", Events: events}, Options{Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func policyOf(t *testing.T, a *Advice, name string) PolicyResult {
	t.Helper()
	for _, p := range a.Comparison.Policies {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no row %s", name)
	return PolicyResult{}
}

func adviceText(t *testing.T, a *Advice) string {
	t.Helper()
	var b strings.Builder
	if err := a.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Where the defaults fit and a setting gains at least a change's worth of
// margin (max(1 GiB, 1% of the capacity)), that setting is recommended:
// the one with the most margin, and the text says by how much.
func TestAdviseRecommendsASettingThatGainsAChangesWorthOfMargin(t *testing.T) {
	a := adviseAt(t, pinnedTrace(64), 8<<30)
	d := policyOf(t, a, defaultsPolicy)
	if a.Defaults == nil || !a.Defaults.Fits || a.Decision != DecisionWorthAChange {
		t.Fatalf("decision %q, defaults %+v: want the defaults to fit and a change worth it", a.Decision, a.Defaults)
	}
	if a.ChangeThreshold != 1<<30 {
		t.Fatalf("threshold %d at 8 GiB, want 1 GiB", a.ChangeThreshold)
	}
	rec := policyOf(t, a, a.Recommended)
	if rec.TorchConf == nil || *rec.TorchConf == "" || d.MinDevice-rec.MinDevice < a.ChangeThreshold || a.Gain == nil || *a.Gain != int64(d.MinDevice-rec.MinDevice) {
		t.Fatalf("recommended %s (%d B) against the defaults' %d B, gain %v", a.Recommended, rec.MinDevice, d.MinDevice, a.Gain)
	}
	for _, p := range a.Comparison.Policies {
		if isTorch(p.Name) && p.Verdict.Fits && p.MinDevice < rec.MinDevice {
			t.Fatalf("%s needs %d B, less than the recommended %s's %d B", p.Name, p.MinDevice, a.Recommended, rec.MinDevice)
		}
	}
	if a.UseLine != "PYTORCH_CUDA_ALLOC_CONF="+*rec.TorchConf {
		t.Fatalf("use line %q", a.UseLine)
	}
	text := adviceText(t, a)
	for _, want := range []string{"PyTorch's defaults fit", "of margin", "headroom at their peak", "worth a change: " + *rec.TorchConf, "at least a change's worth (1.00 GiB: the larger of 1 GiB and 1% of the capacity)"} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), want) {
			t.Fatalf("no %q in:\n%s", want, text)
		}
	}

	// Below the defaults' smallest device the same setting is the answer,
	// because the defaults do not fit.
	a = adviseAt(t, pinnedTrace(64), d.MinDevice-64<<20)
	if a.Decision != DecisionDefaultsDoNotFit || a.Defaults.Fits || a.Recommended != rec.Name || a.Gain != nil {
		t.Fatalf("below the defaults' smallest device: decision %q, recommended %s, gain %v", a.Decision, a.Recommended, a.Gain)
	}
	if text := adviceText(t, a); !strings.Contains(text, "PyTorch's defaults do not fit: out of memory at event") || !strings.Contains(text, "recommended: "+*rec.TorchConf) {
		t.Fatalf("advice:\n%s", text)
	}
}

// Where the defaults fit and no setting gains a change's worth, the advice
// is the defaults — not the setting with the smallest device, which stays
// its own line — and a setting that shows more headroom only because it
// keeps releasing its cache (garbage_collection_threshold) is not taken
// for one with more room: its margin is the defaults', and its slow path
// shows the cudaFree calls it pays.
func TestAdviseKeepsTheDefaultsWhenNoSettingGainsAChange(t *testing.T) {
	a := adviseAt(t, flushTrace(), 10<<30)
	d, gc := policyOf(t, a, defaultsPolicy), policyOf(t, a, torchPrefix+"garbage_collection_threshold:0.6")
	if a.Decision != DecisionDefaultsFit || a.Recommended != defaultsPolicy || a.UseLine != "unset PYTORCH_CUDA_ALLOC_CONF (PyTorch's defaults)" {
		t.Fatalf("decision %q, recommended %s, use %q: want the defaults", a.Decision, a.Recommended, a.UseLine)
	}
	if !gc.Verdict.Fits || gc.Verdict.Headroom <= d.Verdict.Headroom {
		t.Fatalf("garbage collection's headroom %d B is not above the defaults' %d B: the trace does not show the trap", gc.Verdict.Headroom, d.Verdict.Headroom)
	}
	if *gc.Verdict.Margin != *d.Verdict.Margin {
		t.Fatalf("garbage collection's margin %d B, the defaults' %d B: want the same smallest device", *gc.Verdict.Margin, *d.Verdict.Margin)
	}
	if *gc.Verdict.SlowPath.DeviceFrees <= *d.Verdict.SlowPath.DeviceFrees {
		t.Fatalf("garbage collection's cudaFree calls %d, the defaults' %d: its flushing does not show", *gc.Verdict.SlowPath.DeviceFrees, *d.Verdict.SlowPath.DeviceFrees)
	}
	text := adviceText(t, a)
	flat := strings.Join(strings.Fields(text), " ")
	for _, want := range []string{"the defaults already fit", "PyTorch's defaults fit, with " + signedBytes(*d.Verdict.Margin) + " of margin", "> to run on 10.00 GiB: unset PYTORCH_CUDA_ALLOC_CONF", "* the PyTorch setting that needs the smallest device"} {
		if !strings.Contains(flat, want) {
			t.Fatalf("no %q in:\n%s", want, text)
		}
	}

	// Nothing fits 1 GiB: no recommendation, and NoneFits says so for
	// -require-fit.
	a = adviseAt(t, flushTrace(), 1<<30)
	if !a.NoneFits() || a.Recommended != "" || a.UseLine != "" {
		t.Fatalf("at 1 GiB: decision %q, recommended %q", a.Decision, a.Recommended)
	}
	if a = adviseAt(t, flushTrace(), 0); a.Decision != "" || a.NoneFits() || a.Defaults != nil {
		t.Fatalf("without a capacity: decision %q", a.Decision)
	}
}
