package compare

import (
	"context"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
)

func adviseWith(t *testing.T, events eventLog, capacity uint64, recorded, conf *torch.Settings) *Advice {
	t.Helper()
	a, err := Advise(context.Background(), Source{Name: "hand-written", Events: events, TorchSettings: recorded}, Options{Capacity: capacity, TorchSettings: conf})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustConf(t *testing.T, line string) *torch.Settings {
	t.Helper()
	s, err := torch.ParseConf(line)
	if err != nil {
		t.Fatal(err)
	}
	return &s
}

// "As it is" is the settings the workload ran with: a snapshot recorded
// with expandable_segments:True is judged by that row, not by PyTorch's
// defaults, so below the defaults' smallest device (where they do not fit)
// the recorded settings fit and the advice is to keep them.
func TestAdviseJudgesAsItIsByTheRecordedSettings(t *testing.T) {
	plain := adviseAt(t, pinnedTrace(64), 8<<30)
	if plain.Baseline != defaultsPolicy || plain.BaselineFrom != "PyTorch's defaults" {
		t.Fatalf("no recorded settings: baseline %q from %q, want the defaults", plain.Baseline, plain.BaselineFrom)
	}
	d, exp := policyOf(t, plain, defaultsPolicy), policyOf(t, plain, torchPrefix+"expandable_segments:True")
	if exp.MinDevice >= d.MinDevice-64<<20 {
		t.Fatalf("setup: expandable segments need %d B, the defaults %d B; want expandable to fit below the defaults", exp.MinDevice, d.MinDevice)
	}
	capacity := d.MinDevice - 64<<20
	a := adviseWith(t, pinnedTrace(64), capacity, mustConf(t, "expandable_segments:True"), nil)
	if a.Baseline != torchPrefix+"expandable_segments:True" || a.BaselineConf != "expandable_segments:True" || a.BaselineFrom != "the snapshot's allocator_settings" {
		t.Fatalf("baseline %q (%q) from %q, want the grid's expandable_segments:True row from the snapshot", a.Baseline, a.BaselineConf, a.BaselineFrom)
	}
	if a.Defaults == nil || !a.Defaults.Fits || a.Decision != DecisionDefaultsFit || a.Recommended != a.Baseline {
		t.Fatalf("decision %q, recommended %s, verdict %+v: want the recorded settings to fit and be kept", a.Decision, a.Recommended, a.Defaults)
	}
	if a.UseLine != "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (as now: the snapshot's allocator_settings)" {
		t.Fatalf("use line %q", a.UseLine)
	}
	text := strings.Join(strings.Fields(adviceText(t, a)), " ")
	for _, want := range []string{"the settings the snapshot recorded (expandable_segments:True) fit", "the recorded settings already fit", "expandable_segments:True (now)"} {
		if !strings.Contains(text, want) {
			t.Fatalf("no %q in:\n%s", want, text)
		}
	}
	// PyTorch's defaults are still a row of the grid, not the baseline.
	if p := policyOf(t, a, defaultsPolicy); p.Verdict == nil || p.Verdict.Fits {
		t.Fatalf("the defaults' row at %d B: %+v, want it present and out of memory", capacity, p.Verdict)
	}
}

// Settings the grid has no row for are replayed as the torch policy; the
// -torch-conf settings come before the recorded ones; recorded defaults
// are the defaults' row.
func TestAdviseBaselineOutsideTheGridAndItsPrecedence(t *testing.T) {
	a := adviseWith(t, flushTrace(), 0, mustConf(t, "max_split_size_mb:100"), nil)
	if a.Baseline != Torch || a.BaselineConf != "max_split_size_mb:100" {
		t.Fatalf("baseline %q (%q), want the torch policy with max_split_size_mb:100", a.Baseline, a.BaselineConf)
	}
	if p := policyOf(t, a, Torch); p.TorchConf == nil || *p.TorchConf != "max_split_size_mb:100" {
		t.Fatalf("torch row with %v, want max_split_size_mb:100", p.TorchConf)
	}
	a = adviseWith(t, flushTrace(), 0, mustConf(t, "max_split_size_mb:100"), mustConf(t, "max_split_size_mb:128"))
	if a.Baseline != torchPrefix+"max_split_size_mb:128" || a.BaselineFrom != "-torch-conf" {
		t.Fatalf("baseline %q from %q, want -torch-conf's max_split_size_mb:128 row", a.Baseline, a.BaselineFrom)
	}
	// Options the model ignores keep the grid's row and stay in the line.
	a = adviseWith(t, flushTrace(), 0, mustConf(t, "expandable_segments:True,pinned_use_cuda_host_register:True"), nil)
	if a.Baseline != torchPrefix+"expandable_segments:True" || !strings.Contains(a.BaselineConf, "pinned_use_cuda_host_register:True") || len(a.Comparison.Policies) != len(AdviceGrid)+1 {
		t.Fatalf("unmodelled option: baseline %q (%q) with %d rows, want the grid's expandable row, the full line and no extra row", a.Baseline, a.BaselineConf, len(a.Comparison.Policies))
	}
	a = adviseWith(t, flushTrace(), 0, nil, mustConf(t, "pinned_use_cuda_host_register:True"))
	if a.Baseline != defaultsPolicy || a.BaselineFrom != "-torch-conf" {
		t.Fatalf("only an unmodelled option: baseline %q from %q, want the defaults' row from -torch-conf", a.Baseline, a.BaselineFrom)
	}
	a = adviseWith(t, flushTrace(), 0, &torch.Settings{}, nil)
	if a.Baseline != defaultsPolicy || len(a.Comparison.Policies) != len(AdviceGrid)+1 {
		t.Fatalf("recorded defaults: baseline %q with %d rows, want the defaults' row and no extra one", a.Baseline, len(a.Comparison.Policies))
	}
}
