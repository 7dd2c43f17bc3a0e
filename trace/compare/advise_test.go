package compare

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/trace"
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
	if !strings.Contains(text.String(), "gpumem adaptive") || strings.Count(text.String(), "\n*") != 2 {
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
	if want := "PYTORCH_CUDA_ALLOC_CONF=" + *best.TorchConf; *best.TorchConf != "" && a.UseLine != want {
		t.Fatalf("use line %q, want %q", a.UseLine, want)
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
