package compare

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// Advise replays every grid setting beside gpumem's adaptive policy, marks
// the PyTorch setting that needs the smallest device, and, given a
// capacity, names the line to use when one fits.
func TestAdviseCoversTheGridAndMarksTheBest(t *testing.T) {
	events := synthEvents(t, "transformer", 3, trace.SynthParams{Allocs: 600})
	a, err := Advise(context.Background(), Source{Name: "transformer", Events: events}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := a.Comparison
	if len(c.Policies) != 1+len(AdviceGrid) || c.Policies[0].Name != Adaptive {
		t.Fatalf("%d policies, first %s", len(c.Policies), c.Policies[0].Name)
	}
	var best *PolicyResult
	for i, p := range c.Policies[1:] {
		if p.Name != torchPrefix+AdviceGrid[i] || p.TorchConf == nil || p.MinCapacity == 0 {
			t.Fatalf("row %d: %s (conf %v, min capacity %d), want torch:%s", i, p.Name, p.TorchConf, p.MinCapacity, AdviceGrid[i])
		}
		if best == nil || p.MinCapacity < best.MinCapacity {
			best = &c.Policies[1+i]
		}
	}
	if a.BestPolicy != best.Name || a.Best != *best.TorchConf {
		t.Fatalf("best %s (%q), want %s", a.BestPolicy, a.Best, best.Name)
	}
	var text strings.Builder
	if err := a.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	// The smallest-device pick is marked in the settings table, in the
	// slow-path table and on its own line.
	if !strings.Contains(text.String(), "gpumem adaptive") || strings.Count(text.String(), "\n*") != 3 {
		t.Fatalf("advice text:\n%s", text.String())
	}

	// At exactly the best setting's smallest capacity that setting fits.
	a, err = Advise(context.Background(), Source{Name: "transformer", Events: events}, Options{Capacity: best.MinCapacity})
	if err != nil {
		t.Fatal(err)
	}
	if a.UseLine == "" || len(a.Fitting) == 0 {
		t.Fatalf("at %d B nothing fits: %+v", best.MinCapacity, a)
	}
	// The recommendation needs no larger a device than the best setting
	// (an equal one with fewer retries may win the tie).
	rec := policyOf(t, a, a.Recommended)
	if rec.MinCapacity != best.MinCapacity || a.UseLine != "PYTORCH_CUDA_ALLOC_CONF="+*rec.TorchConf && *rec.TorchConf != "" {
		t.Fatalf("recommended %s (%d B, use %q), want one needing %d B like %s", rec.Name, rec.MinCapacity, a.UseLine, best.MinCapacity, best.Name)
	}
}

// ParsePolicies keeps a torch:CONF policy's own commas.
func TestParsePoliciesKeepsTorchConfTogether(t *testing.T) {
	got := ParsePolicies("adaptive,torch:expandable_segments:True,max_split_size_mb:128,exclusive,torch:defaults")
	want := []string{"adaptive", "torch:expandable_segments:True,max_split_size_mb:128", "exclusive", "torch:defaults"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q, want %q", got, want)
	}
	if err := checkPolicy("torch:nosuch_key:1"); err == nil {
		t.Fatal("a bad conf was accepted")
	}
	// "torch:" was silently PyTorch's defaults: a lost setting.
	for _, name := range []string{"torch:", "torch: "} {
		if err := checkPolicy(name); !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), "empty setting") || !strings.Contains(err.Error(), "torch:defaults") {
			t.Fatalf("checkPolicy(%q) = %v, want an empty-setting error pointing to torch:defaults", name, err)
		}
	}
}

// On the shared U-Net snapshot advise prints every grid setting and
// gpumem's adaptive, with the best PyTorch setting marked.
func TestAdviseOnSharedSnapshot(t *testing.T) {
	src := sharedSource(t, "unet-snapshot.pickle")
	a, err := Advise(context.Background(), src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := a.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, conf := range AdviceGrid[1:] {
		if !strings.Contains(text.String(), conf) {
			t.Fatalf("no row for %s:\n%s", conf, text.String())
		}
	}
	if a.BestPolicy == "" || !strings.Contains(text.String(), "* the PyTorch setting that needs the smallest device") {
		t.Fatalf("no best setting:\n%s", text.String())
	}
}

// The case: at 80 GiB on the full training step every setting
// fits, and max_split_size_mb:128 gains 20 MiB of margin while reserving
// more at its peak; garbage_collection_threshold:0.6 shows 5 GiB more
// headroom at its peak than the defaults with the defaults' smallest
// device. The advice is the defaults, with their margin and headroom, and
// the collector's cudaFree calls show what its headroom costs; the
// smallest-device line names max_split_size_mb:128 without a line to use
// and says why it is not the recommendation (issue 37: the two lines
// disagreed).
func TestAdviseKeepsTheDefaultsOnTheSharedFullStepAt80GiB(t *testing.T) {
	if raceDetector {
		t.Skip("the full step's 14 replays and searches take minutes under the race detector; TestAdviseKeepsTheDefaultsWhenNoSettingGainsAChange covers the rule")
	}
	src := sharedSource(t, "transformer-ctx128-fullstep.pickle")
	a, err := Advise(context.Background(), src, Options{Capacity: 80 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if a.Decision != DecisionDefaultsFit || a.Recommended != defaultsPolicy || !a.Defaults.Fits {
		t.Fatalf("decision %q, recommended %s", a.Decision, a.Recommended)
	}
	if a.BestPolicy == defaultsPolicy {
		t.Fatalf("the smallest-device pick is the defaults: the snapshot no longer shows a setting with a small gain")
	}
	d, gc := policyOf(t, a, defaultsPolicy), policyOf(t, a, torchPrefix+"garbage_collection_threshold:0.6")
	if gc.Verdict.Headroom < d.Verdict.Headroom+(4<<30) || *gc.Verdict.Margin != *d.Verdict.Margin {
		t.Fatalf("garbage collection: headroom %d, margin %d; defaults: headroom %d, margin %d", gc.Verdict.Headroom, *gc.Verdict.Margin, d.Verdict.Headroom, *d.Verdict.Margin)
	}
	if *gc.Verdict.SlowPath.DeviceFrees == 0 || *d.Verdict.SlowPath.DeviceFrees != 0 {
		t.Fatalf("cudaFree calls: garbage collection %d, defaults %d", *gc.Verdict.SlowPath.DeviceFrees, *d.Verdict.SlowPath.DeviceFrees)
	}
	text := adviceText(t, a)
	flat := strings.Join(strings.Fields(text), " ")
	for _, want := range []string{"at 80.00 GiB PyTorch's defaults fit, with 28.54 GiB of margin", "23.09 GiB of headroom at their peak", "the defaults already fit", "the most, max_split_size_mb:128, gains 20.00 MiB",
		"> to run on 80.00 GiB: unset PYTORCH_CUDA_ALLOC_CONF",
		"* the PyTorch setting that needs the smallest device: max_split_size_mb:128 (51.44 GiB; gpumem adaptive needs 51.08 GiB); it needs 20.00 MiB less than PyTorch's defaults, under a change's worth (1.00 GiB), so it is not the recommendation."} {
		if !strings.Contains(flat, want) {
			t.Fatalf("no %q in:\n%s", want, text)
		}
	}
}
