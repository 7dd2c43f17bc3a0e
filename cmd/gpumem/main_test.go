package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/cuda"
	"github.com/gpumem/gpumem/internal/analysis/compare"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/fakecuda"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/units"
)

// sharedTraces holds the PyTorch snapshots shared between checkouts.
var sharedTraces = filepath.Join("..", "..", "..", "shared", "traces")

// TestMain runs the tests without the PYTORCH_CUDA_ALLOC_CONF of the shell
// that started them: replay and advise read it (setTorchSettings), and the
// tests expect the settings the traces recorded; a test that wants one sets
// it with t.Setenv.
func TestMain(m *testing.M) {
	os.Unsetenv(confEnv)
	os.Exit(m.Run())
}

// runCmd runs the command line args and returns its stdout and stderr.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// mustRun runs args and fails the test on an error.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := runCmd(t, args...)
	if err != nil {
		t.Fatalf("gpumem %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// replayJSON is the part of replay -json the tests read.
type replayJSON struct {
	Trace    string  `json:"trace"`
	Events   int     `json:"events"`
	PeakLive uint64  `json:"peak_live_bytes"`
	Recorded *uint64 `json:"recorded_reserved_bytes"`
	Policies []struct {
		Name         string  `json:"name"`
		PeakReserved uint64  `json:"peak_reserved_bytes"`
		MinCapacity  uint64  `json:"min_capacity_bytes"`
		Relocations  uint64  `json:"relocations"`
		BytesMoved   uint64  `json:"bytes_moved"`
		CopySeconds  float64 `json:"copy_seconds"`
		ReplaySecs   float64 `json:"replay_seconds"`
		FailedAllocs int     `json:"failed_allocs"`
		Replay       struct {
			Backend string `json:"backend"`
		} `json:"replay"`
	} `json:"policies"`
}

// decodeOne decodes out as exactly one JSON object, into v and as a map of
// its keys.
func decodeOne(t *testing.T, out string, v any) map[string]json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("replay -json output is not a JSON object: %v\n%s", err, out)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Fatalf("replay -json printed more than one value (next: %s, %v)", extra, err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatal(err)
	}
	return raw
}

// policyNames returns the names of the policies in r, in order.
func (r replayJSON) policyNames() []string {
	var names []string
	for _, p := range r.Policies {
		names = append(names, p.Name)
	}
	return names
}

func TestReplayWithoutFilePrintsEveryPolicy(t *testing.T) {
	out := mustRun(t, "replay", "-quiet")
	name, _ := trace.Default()
	if !strings.Contains(out, "trace "+name+" (embedded)") {
		t.Fatalf("replay output does not name the embedded trace %q:\n%s", name, out)
	}
	for _, p := range compare.Policies() {
		found := false
		for _, line := range strings.Split(out, "\n") {
			if fields := strings.Fields(line); len(fields) > 0 && fields[0] == p {
				found = true
			}
		}
		if !found {
			t.Errorf("the table has no row for policy %s:\n%s", p, out)
		}
	}
}

func TestReplayJSONIsOneObjectWithTheDocumentedKeys(t *testing.T) {
	out := mustRun(t, "replay", "-quiet", "-json")
	var r replayJSON
	raw := decodeOne(t, out, &r)
	for _, k := range []string{"trace", "events", "peak_live_bytes", "recorded_reserved_bytes", "policies"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("replay -json lacks key %q", k)
		}
	}
	var policies []map[string]json.RawMessage
	if err := json.Unmarshal(raw["policies"], &policies); err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		for _, k := range []string{"name", "peak_reserved_bytes", "min_capacity_bytes", "replay_seconds"} {
			if _, ok := p[k]; !ok {
				t.Errorf("policy %s lacks key %q", p["name"], k)
			}
		}
		// Relocation figures are a gpumem device's: absent from PyTorch's
		// rows (it never moves memory), present, even when 0, in gpumem's.
		_, torch := p["pytorch_alloc_conf"]
		for _, k := range []string{"relocations", "bytes_moved", "copy_seconds", "min_capacity_relocations"} {
			if _, ok := p[k]; ok == torch {
				t.Errorf("policy %s: key %q present %v, want %v", p["name"], k, ok, !torch)
			}
		}
	}
	// Without the search there are no smallest-capacity figures at all.
	var noSearch map[string]json.RawMessage
	if err := json.Unmarshal([]byte(mustRun(t, "replay", "-quiet", "-json", "-no-search", "-policies", "adaptive")), &noSearch); err != nil {
		t.Fatal(err)
	}
	var ps []map[string]json.RawMessage
	if err := json.Unmarshal(noSearch["policies"], &ps); err != nil || len(ps) != 1 {
		t.Fatal(err)
	}
	for _, k := range []string{"min_capacity_bytes", "min_device_bytes", "capacity_probes"} {
		if _, ok := ps[0][k]; ok {
			t.Errorf("-no-search: key %q present, want it absent (not measured)", k)
		}
	}
	if !slices.Equal(r.policyNames(), compare.Policies()) {
		t.Fatalf("policies %v, want %v", r.policyNames(), compare.Policies())
	}
	if r.Events == 0 || r.PeakLive == 0 || r.Recorded != nil || !strings.HasSuffix(r.Trace, "(embedded)") {
		t.Fatalf("replay -json = %+v: want the embedded trace's events and peak live bytes, no recorded figure", r)
	}
	for _, p := range r.Policies {
		if p.PeakReserved < r.PeakLive {
			t.Errorf("policy %s peaks at %d reserved, below the %d live bytes", p.Name, p.PeakReserved, r.PeakLive)
		}
		if p.FailedAllocs == 0 && p.MinCapacity < r.PeakLive {
			t.Errorf("policy %s: min capacity %d below the peak live bytes %d", p.Name, p.MinCapacity, r.PeakLive)
		}
	}
}

func TestUsageErrorsAreErrUsage(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"replay", "-no-such-flag"},
		{"replay", "-policies", "adaptive,no-such-policy", "-no-search"},
		{"replay", "-backend", "tpu"},
		{"replay", "-format", "xml"},
		{"replay", "-bandwidth", "0"},
		{"replay", "a.jsonl", "b.jsonl"},
		{"synth", "-workload", "no-such-workload", "-o", filepath.Join(t.TempDir(), "x.jsonl")},
		{"synth", "-workload", "churn"},
		{"convert", "only-a-snapshot.pickle"},
		{"info", "-verbose"},
	} {
		_, _, err := runCmd(t, args...)
		if !errors.Is(err, errUsage) || exitCode(err) != 2 {
			t.Errorf("gpumem %q = %v (exit %d), want a usage error (exit 2)", args, err, exitCode(err))
		}
	}
	if _, _, err := runCmd(t, "replay", "-policies", "nope", "-quiet"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("an unknown policy's error does not name it: %v", err)
	}
	if exitCode(nil) != 0 || exitCode(errors.New("replay failed")) != 1 {
		t.Fatal("exit codes: want 0 for success, 1 for other errors")
	}
}

func TestCorruptInputNamesTheProblem(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		file, content string
		want          []string
	}{
		{"bad.jsonl", "x{\n", []string{"bad.jsonl", "line 1"}},
		{"cut.jsonl", `{"format":"gpumem-trace","version":1}` + "\n" + `{"op":"alloc","id":1,` + "\n", []string{"cut.jsonl", "line 2"}},
		{"bad.pickle", "garbage", []string{"bad.pickle", "pickle"}},
	} {
		path := filepath.Join(dir, c.file)
		if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := runCmd(t, "replay", "-quiet", path)
		if err == nil || errors.Is(err, errUsage) || exitCode(err) != 1 {
			t.Errorf("replay of %s = %v, want an input error (exit 1)", c.file, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("replay of %s: error %q does not mention %q", c.file, err, w)
			}
		}
	}
	if _, _, err := runCmd(t, "replay", filepath.Join(dir, "missing.jsonl")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("replay of a missing file = %v, want not-exist", err)
	}
}

func TestSynthThenReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "churn.jsonl")
	out := mustRun(t, "synth", "-workload", "churn", "-allocs", "60", "-seed", "3", "-o", path)
	if !strings.HasPrefix(out, "wrote ") || !strings.Contains(out, path) {
		t.Fatalf("synth printed %q", out)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events := 0
	for _, err := range trace.Decode(f) {
		if err != nil {
			t.Fatalf("synth wrote an unreadable trace: %v", err)
		}
		events++
	}
	var r replayJSON
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-no-search", path), &r)
	if r.Trace != "churn.jsonl" || r.Events != events || r.PeakLive == 0 || len(r.Policies) != len(compare.Policies()) {
		t.Fatalf("replay of the synthesised trace = %+v, want %d events under every policy", r, events)
	}
	for _, p := range r.Policies {
		if p.FailedAllocs != 0 {
			t.Errorf("policy %s failed %d allocations at unlimited capacity", p.Name, p.FailedAllocs)
		}
	}
}

func TestConvertedSnapshotReplaysWithTheSamePeakLive(t *testing.T) {
	snap := filepath.Join(sharedTraces, "transformer-ctx128-forward.pickle")
	if _, err := os.Stat(snap); err != nil {
		t.Skipf("shared snapshot not available: %v", err)
	}
	out := filepath.Join(t.TempDir(), "forward.jsonl")
	msg := mustRun(t, "convert", snap, "-o", out)
	if !strings.HasPrefix(msg, "wrote ") || !strings.Contains(msg, out) {
		t.Fatalf("convert printed %q", msg)
	}
	var fromSnap, fromTrace replayJSON
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-no-search", "-policies", "adaptive", snap), &fromSnap)
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-no-search", "-policies", "adaptive", out), &fromTrace)
	if fromSnap.PeakLive == 0 || fromTrace.PeakLive != fromSnap.PeakLive || fromTrace.Events != fromSnap.Events {
		t.Fatalf("converted trace: %d events, peak live %d; snapshot: %d events, peak live %d",
			fromTrace.Events, fromTrace.PeakLive, fromSnap.Events, fromSnap.PeakLive)
	}
	if fromSnap.Recorded == nil || fromTrace.Recorded != nil {
		t.Fatalf("recorded reserved bytes: snapshot %v, trace %v; want the snapshot's only", fromSnap.Recorded, fromTrace.Recorded)
	}
}

func TestInfoListsTheBackends(t *testing.T) {
	t.Setenv(cuda.EnvLibrary, filepath.Join(t.TempDir(), "libcuda.so.1")) // no driver there
	out := mustRun(t, "info")
	for _, name := range []string{"host", "sim"} {
		if !strings.Contains(out, "\n"+name+" ") && !strings.HasPrefix(out, name+" ") {
			t.Errorf("info does not list %s:\n%s", name, out)
		}
	}
	if !strings.Contains(out, "host  available: alignment 32 B") || !strings.Contains(out, "sim   available") {
		t.Errorf("info lines for host and sim:\n%s", out)
	}
	if !strings.Contains(out, "cuda  not available: ") {
		t.Errorf("info without a driver does not say cuda is unavailable:\n%s", out)
	}
	// The host's capacity is the machine's memory it draws on, with its
	// source, not "unlimited".
	if l := hoststorage.MachineMemoryLimit(); l.Bytes != 0 && !strings.Contains(out, "capacity "+units.Bytes(l.Bytes).String()+" (the machine's memory: "+l.From+")") {
		t.Errorf("info does not print the host's memory limit %+v:\n%s", l, out)
	}
}

func TestReplayOnTheCudaBackend(t *testing.T) {
	t.Setenv(cuda.EnvLibrary, fakecuda.Build(t))
	path := filepath.Join(t.TempDir(), "capture.jsonl")
	mustRun(t, "synth", "-workload", "capture", "-allocs", "60", "-o", path)

	var onCuda, onSim replayJSON
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-backend", "cuda", path), &onCuda)
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", path), &onSim)
	if !slices.Equal(onCuda.policyNames(), compare.Policies()) {
		t.Fatalf("cuda replay policies %v, want %v", onCuda.policyNames(), compare.Policies())
	}
	if onCuda.Events != onSim.Events || onCuda.PeakLive != onSim.PeakLive {
		t.Fatalf("cuda replay: %d events, peak live %d; sim: %d, %d", onCuda.Events, onCuda.PeakLive, onSim.Events, onSim.PeakLive)
	}
	for _, p := range onCuda.Policies {
		want := "cuda"
		if strings.HasPrefix(p.Name, "torch") {
			want = "torch-model"
		}
		if p.Replay.Backend != want {
			t.Errorf("policy %s replayed on backend %q, want %q", p.Name, p.Replay.Backend, want)
		}
		if p.FailedAllocs != 0 || p.PeakReserved < onCuda.PeakLive || p.MinCapacity < onCuda.PeakLive {
			t.Errorf("cuda policy %s: %d failed allocations, peak reserved %d, min capacity %d; peak live %d",
				p.Name, p.FailedAllocs, p.PeakReserved, p.MinCapacity, onCuda.PeakLive)
		}
	}
	out := mustRun(t, "replay", "-quiet", "-backend", "cuda", "-no-search", "-policies", "adaptive,torch", path)
	if !strings.Contains(out, "adaptive") || !strings.Contains(out, "torch") {
		t.Fatalf("cuda replay table:\n%s", out)
	}
	info := mustRun(t, "info")
	if !strings.Contains(info, "cuda  available: Fake CUDA Device 0") || !strings.Contains(info, "1.00 GiB memory") {
		t.Fatalf("info with the fake driver:\n%s", info)
	}
}

func TestReplayOnCudaWithoutDriverFailsClearly(t *testing.T) {
	t.Setenv(cuda.EnvLibrary, filepath.Join(t.TempDir(), "libcuda.so.1"))
	_, _, err := runCmd(t, "replay", "-quiet", "-backend", "cuda")
	if err == nil || !strings.HasPrefix(err.Error(), "no CUDA driver found: ") || !errors.Is(err, cuda.ErrNoDriver) || exitCode(err) != 1 {
		t.Fatalf("replay -backend cuda without a driver = %v (exit %d), want \"no CUDA driver found: ...\" (exit 1)", err, exitCode(err))
	}
}

// compare.Options.Open opens every policy device, the breakdown's and the
// capacity search's included, with the policy's options and the Alignment asked for.
func TestCompareOpensPolicyDevicesThroughOptionsOpen(t *testing.T) {
	src, err := loadSource("", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	opened := 0
	open := func(o ...gpumem.Option) (*gpumem.Device, error) {
		opened++
		d, err := gpumem.Open(append(o, gpumem.WithSim())...)
		if err == nil && d.Properties().Alignment != 256 {
			t.Errorf("a policy device has alignment %d, want 256", d.Properties().Alignment)
		}
		return d, err
	}
	c, err := compare.Run(context.Background(), src, compare.Options{Policies: []string{compare.Adaptive}, Open: open, Alignment: 256})
	if err != nil {
		t.Fatal(err)
	}
	// One replay, one replay to its peak for the breakdown, the probes.
	if p := c.Policies[0]; opened != 2+p.CapacityProbes || p.CapacityProbes == 0 {
		t.Fatalf("Open called %d times for one replay, one breakdown replay and %d capacity probes", opened, p.CapacityProbes)
	}
}

// Bandwidths and sizes that are not finite, and capacities below 1 MiB
// (which used to mean unlimited silently), are usage errors.
func TestNonFiniteAndTinyFlagValuesAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"replay", "-bandwidth", "NaN"},
		{"replay", "-bandwidth", "Inf"},
		{"replay", "-bandwidth", "-Inf"},
		{"replay", "-bandwidth", "1e-300"},
		{"replay", "-bandwidth", "0.5"},
		{"replay", "-capacity", "NaN"},
		{"replay", "-capacity", "Inf"},
		{"replay", "-capacity", "infGiB"},
		{"replay", "-capacity", "0"},
		{"replay", "-capacity", "0.5"},
		{"replay", "-capacity", "1023KiB"},
		{"replay", "-max-snapshot", "NaN"},
		{"replay", "-max-snapshot", "0"},
		{"convert", "x.pickle", "-o", "y.jsonl", "-max-snapshot", "0"},
	} {
		_, _, err := runCmd(t, append(args, "-quiet")...)
		if !errors.Is(err, errUsage) || exitCode(err) != 2 {
			t.Errorf("gpumem %q = %v (exit %d), want a usage error (exit 2)", args, err, exitCode(err))
		}
	}
	if _, _, err := runCmd(t, "replay", "-capacity", "0"); err == nil || !strings.Contains(err.Error(), "below 1 MiB") {
		t.Errorf("-capacity 0: %v, want an error saying below 1 MiB", err)
	}
	for _, s := range []string{"NaN", "nan", "+Inf", "-inf", "InfMiB", "1e400"} {
		if v, err := parseSize(s); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", s, v)
		}
	}
	var r replayJSON
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-no-search", "-policies", "torch", "-capacity", "1MiB", "-bandwidth", "1"), &r)
}

// Only errUsage maps to exit status 2; any other error, whatever it says,
// is 1.
func TestExitCodeMapsOnlyErrUsageToTwo(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, 0},
		{errUsage, 2},
		{fmt.Errorf("wrapped: %w", errUsage), 2},
		{errors.New("usage: looks like one"), 1},
		{errors.New("panic: runtime error"), 1},
		{fmt.Errorf("%w", trace.ErrInvalidEvent), 1},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// -max-snapshot bounds the decompressed snapshot (exit 1, naming the
// bound); a capture close the device refuses is counted, and the replay
// reports (exit 0).
func TestMaxSnapshotAndCountedCaptureErrors(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "s.json")
	if err := os.WriteFile(snap, []byte(`{"device_traces": [[{"action": "alloc", "addr": 4096, "size": 512}]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-max-snapshot", "10B", snap)
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "larger than the limit of 10 bytes (raise -max-snapshot") {
		t.Fatalf("-max-snapshot 10B: %v", err)
	}
	mustRun(t, "replay", "-quiet", "-no-search", "-max-snapshot", "1KiB", snap)
	if _, _, err := runCmd(t, "convert", snap, "-o", filepath.Join(dir, "o.jsonl"), "-max-snapshot", "10"); err == nil || !strings.Contains(err.Error(), "larger than the limit of 10 bytes (raise -max-snapshot") {
		t.Fatalf("convert -max-snapshot 10: %v", err)
	}

	tr := filepath.Join(dir, "capture.jsonl")
	lines := []string{
		`{"op":"alloc","t":0,"id":1,"size":1048576,"stream":0}`,
		`{"op":"capture","t":1,"stream":0,"phase":"prepare","graph":0}`,
		`{"op":"capture","t":2,"stream":0,"phase":"begin","graph":0}`,
		`{"op":"alloc","t":3,"id":2,"size":1048576,"stream":0}`,
		`{"op":"capture","t":4,"stream":0,"phase":"end","graph":0}`,
		`{"op":"capture","t":5,"stream":0,"phase":"prepare","graph":1}`,
		`{"op":"capture","t":6,"stream":0,"phase":"begin","graph":1}`,
		`{"op":"capture","t":7,"stream":0,"phase":"close","graph":0}`,
	}
	if err := os.WriteFile(tr, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "replay", "-quiet", "-json", "-policies", "adaptive", tr)
	var r struct {
		Policies []struct {
			Replay struct {
				Events        int `json:"events"`
				CaptureErrors int `json:"capture_errors"`
				ImpliedFrees  int `json:"implied_frees"`
			} `json:"replay"`
		} `json:"policies"`
	}
	decodeOne(t, out, &r)
	if rp := r.Policies[0].Replay; rp.Events != len(lines) || rp.CaptureErrors != 1 {
		t.Fatalf("replay %+v, want %d events and 1 capture error", rp, len(lines))
	}
}

// 200 runs of info without a driver all give the reason the load failed
// (dlopen and dlerror on one OS thread): never an empty one after
// "load <path>:".
func TestInfoWithoutDriverAlwaysSaysWhy(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	t.Setenv(cuda.EnvLibrary, missing)
	prefix := "load " + missing + ": "
	for i := range 200 {
		out := mustRun(t, "info")
		_, rest, ok := strings.Cut(out, prefix)
		reason, _, _ := strings.Cut(rest, "\n")
		if !ok || strings.TrimSpace(reason) == "" {
			t.Fatalf("run %d: info without a driver gives no reason after %q:\n%s", i, prefix, out)
		}
	}
}
