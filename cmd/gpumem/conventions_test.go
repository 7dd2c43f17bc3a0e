package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/compare"
	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// Every command has its own help: "gpumem help CMD" and "gpumem CMD -h"
// print what it does and its flags, exit 0.
func TestEveryCommandHasItsOwnHelp(t *testing.T) {
	for cmd, want := range map[string]string{
		"replay": "-require-fit", "convert": "-no-prelude", "synth": "-workload", "info": "Lists the backends",
	} {
		out := mustRun(t, "help", cmd)
		if !strings.HasPrefix(out, "usage: gpumem "+cmd) || !strings.Contains(out, want) {
			t.Errorf("gpumem help %s printed %q, want its usage with %s", cmd, out, want)
		}
		// -h prints to the same stream as help COMMAND: standard output.
		hOut, errOut, err := runCmd(t, cmd, "-h")
		if err != nil || hOut != out || errOut != "" {
			t.Errorf("gpumem %s -h = %v, printed %q on stdout and %q on stderr; want help's %q on stdout", cmd, err, hOut, errOut, out)
		}
	}
	if _, _, err := runCmd(t, "help", "nosuch"); exitCode(err) != 2 {
		t.Errorf("help nosuch: %v, want a usage error", err)
	}
}

// Sizes take decimal and binary units in any case; bandwidths take rates.
func TestSizesAndRatesTakeConventionalUnits(t *testing.T) {
	for s, want := range map[string]uint64{
		"80GB": 80e9, "80gb": 80e9, "80G": 80e9, "80GiB": 80 << 30, "80gib": 80 << 30, "80Gi": 80 << 30,
		"1.5MiB": 3 << 19, "512": 512, "512B": 512, "2kB": 2000, "2KiB": 2048, "1TB": 1e12, "1tib": 1 << 40,
	} {
		if got, err := parseSize(s); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for s, want := range map[string]float64{"2TB/s": 2e12, "900GB/s": 9e11, "1TiB/s": 1 << 40, "2e12": 2e12, "3.35tb/s": 3.35e12, "1000": 1000} {
		if got, err := parseRate(s); err != nil || got != want {
			t.Errorf("parseRate(%q) = %g, %v; want %g", s, got, err, want)
		}
	}
	for _, s := range []string{"2XB/s", "fast", "GB/s", ""} {
		if _, err := parseRate(s); err == nil {
			t.Errorf("parseRate(%q) accepted", s)
		}
	}
}

// verdictJSON is the part of replay -json a verdict test reads.
type verdictJSON struct {
	Capacity uint64 `json:"capacity_bytes"`
	Overhead uint64 `json:"overhead_bytes"`
	Policies []struct {
		Name        string           `json:"name"`
		MinCapacity uint64           `json:"min_capacity_bytes"`
		Verdict     *compare.Verdict `json:"verdict"`
	} `json:"policies"`
}

// -capacity gives every policy a verdict in the JSON, the capacity with it;
// a capacity below a policy's smallest names the event where it runs out;
// -require-fit turns the named policy's verdict into the exit status.
func TestCapacityGivesAVerdictPerPolicy(t *testing.T) {
	var unlimited verdictJSON
	if err := json.Unmarshal([]byte(mustRun(t, "replay", "-quiet", "-json", "-policies", "adaptive,torch")), &unlimited); err != nil {
		t.Fatal(err)
	}
	adaptiveMin := unlimited.Policies[0].MinCapacity
	if unlimited.Capacity != 0 || unlimited.Policies[0].Verdict != nil || adaptiveMin == 0 {
		t.Fatalf("without -capacity: capacity %d, verdict %+v, min %d", unlimited.Capacity, unlimited.Policies[0].Verdict, adaptiveMin)
	}
	below := adaptiveMin - 1<<20
	out := mustRun(t, "replay", "-quiet", "-json", "-no-search", "-policies", "adaptive,torch", "-capacity", (&sizeFlag{v: below}).String())
	var r verdictJSON
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Capacity != below || len(r.Policies) != 2 {
		t.Fatalf("capacity %d (want %d), %d policies", r.Capacity, below, len(r.Policies))
	}
	for _, p := range r.Policies {
		if p.Verdict == nil {
			t.Fatalf("%s: no verdict", p.Name)
		}
	}
	v := r.Policies[0].Verdict
	if v.Fits || v.OutOfMemory == nil || v.OutOfMemory.Request == 0 || v.OutOfMemory.Device == 0 || v.OutOfMemory.Live == 0 {
		t.Fatalf("adaptive at 1 MiB below its smallest capacity: %+v %+v", v, v.OutOfMemory)
	}
	text := mustRun(t, "replay", "-quiet", "-no-search", "-policies", "adaptive", "-capacity", (&sizeFlag{v: below}).String())
	if !strings.Contains(text, "out of memory at event") || !strings.Contains(text, "requested with") {
		t.Fatalf("text report does not name the event:\n%s", text)
	}
	_, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-policies", "adaptive", "-capacity", (&sizeFlag{v: below}).String(), "-require-fit", "adaptive")
	if !errors.Is(err, errNoFit) || exitCode(err) != 3 {
		t.Fatalf("-require-fit below the smallest capacity: %v (exit %d), want exit 3", err, exitCode(err))
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-policies", "adaptive", "-capacity", (&sizeFlag{v: adaptiveMin}).String(), "-require-fit", "adaptive"); err != nil {
		t.Fatalf("-require-fit at the smallest capacity: %v", err)
	}
	var o verdictJSON
	if err := json.Unmarshal([]byte(mustRun(t, "replay", "-quiet", "-json", "-no-search", "-policies", "adaptive", "-capacity", "64GiB", "-overhead", "1GiB")), &o); err != nil {
		t.Fatal(err)
	}
	if o.Capacity != 64<<30 || o.Overhead != 1<<30 || o.Policies[0].Verdict.Capacity != 63<<30 || !o.Policies[0].Verdict.Fits {
		t.Fatalf("-overhead: %+v %+v", o, o.Policies[0].Verdict)
	}
	for _, args := range [][]string{
		{"replay", "-overhead", "1GiB"},
		{"replay", "-capacity", "1GiB", "-overhead", "1GiB"},
		{"replay", "-require-fit", "adaptive"},
		{"replay", "-capacity", "1GiB", "-require-fit", "nosuch"},
	} {
		if _, _, err := runCmd(t, append(args, "-quiet")...); exitCode(err) != 2 {
			t.Errorf("gpumem %q = %v, want a usage error", args, err)
		}
	}
}

// -o - writes to standard output, the closing message to standard error.
func TestDashOutputWritesStandardOutput(t *testing.T) {
	out, errOut, err := runCmd(t, "synth", "-workload", "churn", "-allocs", "20", "-o", "-")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for e, err := range trace.Decode(strings.NewReader(out)) {
		if err != nil {
			t.Fatal(err)
		}
		_ = e
		n++
	}
	if n == 0 || !strings.Contains(errOut, "to standard output") {
		t.Fatalf("%d events on stdout; stderr %q", n, errOut)
	}
	if _, err := os.Stat("-"); err == nil {
		t.Fatal("a file named - was written")
	}
}

// An empty trace is refused with exit status 1 and a message.
func TestEmptyTraceIsRefused(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, []byte(`{"format":"gpumem-trace","version":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(snap, []byte(`{"segments": [], "device_traces": [[]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"replay", "-quiet", empty}, {"replay", "-quiet", snap}, {"convert", snap, "-o", filepath.Join(dir, "x.jsonl")}} {
		_, _, err := runCmd(t, args...)
		if !errors.Is(err, compare.ErrEmptyTrace) || exitCode(err) != 1 || !strings.Contains(err.Error(), "no ") {
			t.Errorf("gpumem %q = %v (exit %d), want an empty-trace error (exit 1)", args, err, exitCode(err))
		}
	}
}
