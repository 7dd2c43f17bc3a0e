package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// A size in a decimal unit is echoed with the binary value the reports
// print, and a -capacity in GB or TB with what a card sold as that size
// has (an "80 GB" card has 80 GiB: nvidia-smi shows 81920 MiB); binary
// units and bytes need no note.
func TestDecimalNoteEchoesTheBinaryValueAndTheCardHint(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"-capacity", "80GB", "-capacity 80GB = 74.51 GiB; an 80 GB card has 80 GiB (nvidia-smi shows 81920 MiB): did you mean 80GiB?"},
		{"-capacity", "24gb", "-capacity 24gb = 22.35 GiB; a 24 GB card has 24 GiB (nvidia-smi shows 24576 MiB): did you mean 24GiB?"},
		{"-capacity", "18 G", "-capacity 18 G = 16.76 GiB; an 18 GB card has 18 GiB (nvidia-smi shows 18432 MiB): did you mean 18GiB?"},
		{"-capacity", "1.5TB", "-capacity 1.5TB = 1.36 TiB; a 1.5 TB card has 1.5 TiB (nvidia-smi shows 1572864 MiB): did you mean 1.5TiB?"},
		{"-capacity", "100MB", "-capacity 100MB = 95.37 MiB (decimal units; 100MiB is the binary size)"},
		{"-overhead", "500MB", "-overhead 500MB = 476.84 MiB (decimal units; 500MiB is the binary size)"},
		{"-overhead", "1GB", "-overhead 1GB = 953.67 MiB (decimal units; 1GiB is the binary size)"},
		{"-capacity", "80GiB", ""},
		{"-capacity", "80Gi", ""},
		{"-capacity", "1048576", ""},
		{"-capacity", "1048576B", ""},
	} {
		var s sizeFlag
		if err := s.Set(c.value); err != nil {
			t.Fatal(err)
		}
		if got := decimalNote(c.flag, s); got != c.want {
			t.Errorf("decimalNote(%s %s) = %q, want %q", c.flag, c.value, got, c.want)
		}
	}
	if got := decimalNote("-capacity", sizeFlag{v: 1 << 30}); got != "" {
		t.Errorf("a flag not given got a note: %q", got)
	}
	for num, want := range map[string]string{"8": "an", "80": "an", "800": "an", "11": "an", "18": "an", "11000": "an", "1": "a", "16": "a", "24": "a", "40": "a", "110": "a", "180": "a", "141": "a", "0.5": "a"} {
		if got := article(num); got != want {
			t.Errorf("article(%s) = %q, want %q", num, got, want)
		}
	}
}

// churnTrace writes a small generated trace (peak live well under 1 GiB).
func churnTrace(t *testing.T) string {
	t.Helper()
	tr := filepath.Join(t.TempDir(), "churn.jsonl")
	mustRun(t, "synth", "-workload", "churn", "-allocs", "200", "-seed", "3", "-o", tr)
	return tr
}

// advise and replay echo a decimal -capacity in their report, with the
// hint, and in the JSON (capacity_notes); they say that the capacity does
// not count the CUDA context unless -overhead is given.
func TestDecimalCapacityIsEchoedInTheReports(t *testing.T) {
	tr := churnTrace(t)
	hint := "-capacity 80GB = 74.51 GiB; an 80 GB card has 80 GiB (nvidia-smi shows 81920 MiB): did you mean 80GiB?"
	for _, args := range [][]string{{"advise", "-quiet"}, {"replay", "-quiet", "-no-search"}} {
		out := strings.Join(strings.Fields(mustRun(t, append(args, "-capacity", "80GB", tr)...)), " ")
		if !strings.Contains(out, hint) || !strings.Contains(out, "74.51 GiB counts only what PyTorch's caching allocator reserves: the CUDA context") {
			t.Errorf("%s -capacity 80GB:\n%s", args[0], out)
		}
		out = strings.Join(strings.Fields(mustRun(t, append(args, "-capacity", "80GiB", tr)...)), " ")
		if strings.Contains(out, "did you mean") {
			t.Errorf("%s -capacity 80GiB got a hint:\n%s", args[0], out)
		}
	}
	var doc struct {
		Comparison struct {
			Notes []string `json:"capacity_notes"`
		} `json:"comparison"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "advise", "-quiet", "-json", "-capacity", "80GB", tr)), &doc); err != nil || len(doc.Comparison.Notes) != 1 || doc.Comparison.Notes[0] != hint {
		t.Fatalf("advise -json capacity_notes %q (%v)", doc.Comparison.Notes, err)
	}
	out := strings.Join(strings.Fields(mustRun(t, "advise", "-quiet", "-capacity", "80GiB", "-overhead", "500MB", tr)), " ")
	if !strings.Contains(out, "-overhead 500MB = 476.84 MiB (decimal units; 500MiB is the binary size).") || !strings.Contains(out, "of 80.00 GiB, -overhead sets 476.84 MiB aside") {
		t.Fatalf("advise -overhead 500MB:\n%s", out)
	}
}

// replay -fail-on-oom exits 1 when a policy runs out of memory at
// -capacity (it did only at unlimited capacity), naming them and, when the
// live tensors alone pass the capacity, saying that none can fit; 0 when
// every policy fits. -require-fit keeps its exit status 3.
func TestReplayFailOnOOMExitsOneWhenAPolicyRunsOutAtCapacity(t *testing.T) {
	tr := churnTrace(t)
	var doc struct {
		PeakLive uint64 `json:"peak_live_bytes"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "replay", "-quiet", "-no-search", "-json", "-policies", "adaptive", tr)), &doc); err != nil || doc.PeakLive <= 1<<20 {
		t.Fatalf("peak live %d (%v): want above 1 MiB", doc.PeakLive, err)
	}
	out, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-policies", "adaptive,torch", "-capacity", "1MiB", "-fail-on-oom", tr)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "-fail-on-oom: at -capacity 1.00 MiB, 2 of 2 policies run out of memory (adaptive, torch)") ||
		!strings.Contains(err.Error(), "no policy can fit") || !strings.Contains(out, "torch") {
		t.Fatalf("-fail-on-oom at 1 MiB: %v (exit %d), report:\n%s", err, exitCode(err), out)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-policies", "adaptive,torch", "-capacity", "1MiB", tr); err != nil {
		t.Fatalf("without -fail-on-oom: %v", err)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-policies", "adaptive,torch", "-capacity", "64GiB", "-fail-on-oom", tr); err != nil {
		t.Fatalf("-fail-on-oom at 64 GiB, where every policy fits: %v", err)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-policies", "adaptive,torch", "-capacity", "1MiB", "-fail-on-oom", "-require-fit", "torch", tr); exitCode(err) != 3 {
		t.Fatalf("-fail-on-oom -require-fit torch at 1 MiB: %v (exit %d), want -require-fit's 3", err, exitCode(err))
	}
}

// settingsSnapshot writes a snapshot that recorded max_split_size_mb:128
// in its allocator_settings (or none when conf is "").
func settingsSnapshot(t *testing.T, conf string) string {
	t.Helper()
	s := &trace.TorchSnapshot{Traces: [][]trace.TorchTraceEntry{{
		{Action: "segment_alloc", Addr: 8 << 20, Size: 64 << 20, TimeUS: 1},
		{Action: "alloc", Addr: 8 << 20, Size: 64 << 20, TimeUS: 2},
		{Action: "free_completed", Addr: 8 << 20, Size: 64 << 20, TimeUS: 3},
		{Action: "alloc", Addr: 8 << 20, Size: 32 << 20, TimeUS: 4},
	}}}
	if conf != "" {
		s.AllocatorSettings = map[string]any{"PYTORCH_CUDA_ALLOC_CONF": conf}
	}
	path := filepath.Join(t.TempDir(), "settings.pickle")
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

// PYTORCH_CUDA_ALLOC_CONF in the environment is "as it is" (and replay's
// torch policy) when the snapshot recorded no settings, and the report
// says so; a snapshot's recorded settings win over it, and the report
// names the environment's line left aside; a bad line is a usage error
// naming the variable where it would be used, and ignored where
// -torch-conf or the snapshot's settings stand.
func TestPyTorchConfFromTheEnvironment(t *testing.T) {
	plain, recorded := settingsSnapshot(t, ""), settingsSnapshot(t, "max_split_size_mb:128")
	t.Setenv(confEnv, "expandable_segments:True")
	out := strings.Join(strings.Fields(mustRun(t, "advise", "-quiet", "-capacity", "1GiB", plain)), " ")
	for _, want := range []string{"as it is: expandable_segments:True, from PYTORCH_CUDA_ALLOC_CONF in the environment (the snapshot recorded no allocator_settings).", "expandable_segments:True (now)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
	var doc struct {
		From string `json:"torch_settings_from"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "replay", "-quiet", "-no-search", "-json", "-policies", "torch", plain)), &doc); err != nil || doc.From != "PYTORCH_CUDA_ALLOC_CONF in the environment" {
		t.Fatalf("replay's torch settings from %q (%v)", doc.From, err)
	}
	out = strings.Join(strings.Fields(mustRun(t, "advise", "-quiet", "-capacity", "1GiB", recorded)), " ")
	if !strings.Contains(out, "as it is: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128, as the snapshot recorded them (allocator_settings); PYTORCH_CUDA_ALLOC_CONF in the environment (expandable_segments:True) is not what the snapshot ran with: -torch-conf expandable_segments:True judges it.") {
		t.Fatalf("recorded settings with another environment line:\n%s", out)
	}

	t.Setenv(confEnv, "nosuch:1")
	if _, _, err := runCmd(t, "advise", "-quiet", plain); exitCode(err) != 2 || !strings.Contains(err.Error(), `PYTORCH_CUDA_ALLOC_CONF="nosuch:1" in the environment`) || !strings.Contains(err.Error(), "fix or unset it, or give -torch-conf") {
		t.Fatalf("a bad environment line: %v (exit %d), want a usage error naming it", err, exitCode(err))
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-policies", "torch", plain); exitCode(err) != 2 {
		t.Fatalf("replay with a bad environment line: %v (exit %d), want a usage error", err, exitCode(err))
	}
	for _, args := range [][]string{{"advise", "-quiet", recorded}, {"advise", "-quiet", "-torch-conf", "max_split_size_mb:256", plain}} {
		if _, _, err := runCmd(t, args...); err != nil {
			t.Fatalf("%v with a bad environment line it does not use: %v", args, err)
		}
	}
}
