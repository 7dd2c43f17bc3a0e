package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/trace"
)

// twoDeviceSnapshot is a JSON snapshot with trace entries for devices 0
// (one allocation) and 1 (three).
const twoDeviceSnapshot = `{"segments": [], "device_traces": [
 [{"action": "alloc", "addr": 4096, "size": 1048576, "stream": 0, "time_us": 1},
  {"action": "free_completed", "addr": 4096, "size": 1048576, "stream": 0, "time_us": 2}],
 [{"action": "alloc", "addr": 8192, "size": 2097152, "stream": 0, "time_us": 1},
  {"action": "alloc", "addr": 16384, "size": 3145728, "stream": 0, "time_us": 2},
  {"action": "alloc", "addr": 32768, "size": 4194304, "stream": 0, "time_us": 3}]]}`

// A snapshot with traces for two devices was replayed for device 0 without
// a word: now it is refused with the list and the flag, and -device picks
// one, in replay, advise and convert.
func TestSeveralDevicesAreNeverDroppedSilently(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "two.json")
	if err := os.WriteFile(path, []byte(twoDeviceSnapshot), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		{"replay", "-quiet", "-no-search", path},
		{"advise", "-quiet", path},
		{"convert", path, "-o", filepath.Join(dir, "x.jsonl")},
	} {
		_, _, err := runCmd(t, cmd...)
		var several *trace.SeveralDevicesError
		if !errors.As(err, &several) || len(several.Devices) != 2 || !strings.Contains(err.Error(), "devices 0, 1") || !strings.Contains(err.Error(), "-device N") {
			t.Errorf("%s without -device: %v, want the devices listed and -device named", cmd[0], err)
		}
	}
	var r replayJSON
	decodeOne(t, mustRun(t, "replay", "-quiet", "-no-search", "-json", "-device", "1", path), &r)
	if r.PeakLive != 9<<20 {
		t.Fatalf("-device 1: peak live %d, want device 1's 9 MiB", r.PeakLive)
	}
	decodeOne(t, mustRun(t, "replay", "-quiet", "-no-search", "-json", "-device", "0", path), &r)
	if r.PeakLive != 1<<20 {
		t.Fatalf("-device 0: peak live %d, want device 0's 1 MiB", r.PeakLive)
	}
	out := filepath.Join(dir, "d1.jsonl")
	mustRun(t, "convert", "-device", "1", path, "-o", out)
	if b, err := os.ReadFile(out); err != nil || strings.Count(string(b), `"op":"alloc"`) != 3 {
		t.Fatalf("convert -device 1 wrote %q (%v), want device 1's three allocations", b, err)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-device", "5", path); err == nil || !strings.Contains(err.Error(), "device 5") {
		t.Fatalf("-device 5 of 2: %v", err)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-device", "-2", path); !errors.Is(err, errUsage) {
		t.Fatalf("-device -2: %v, want a usage error", err)
	}
	trace := filepath.Join(dir, "t.jsonl")
	mustRun(t, "synth", "-workload", "churn", "-allocs", "20", "-o", trace)
	if _, _, err := runCmd(t, "replay", "-quiet", "-device", "0", trace); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "gpumem trace") {
		t.Fatalf("-device on a gpumem trace: %v, want a usage error", err)
	}
}
