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

// twoDeviceSnapshot is a JSON snapshot with trace entries for devices 0
// (one allocation) and 1 (three).
const twoDeviceSnapshot = `{"segments": [], "device_traces": [
 [{"action": "alloc", "addr": 4096, "size": 1048576, "stream": 0, "time_us": 1},
  {"action": "free_completed", "addr": 4096, "size": 1048576, "stream": 0, "time_us": 2}],
 [{"action": "alloc", "addr": 8192, "size": 2097152, "stream": 0, "time_us": 1},
  {"action": "alloc", "addr": 16384, "size": 3145728, "stream": 0, "time_us": 2},
  {"action": "alloc", "addr": 32768, "size": 4194304, "stream": 0, "time_us": 3}]]}`

// devicesReport is the part of replay's and advise's JSON on several
// devices the tests read.
type devicesReport struct {
	Trace   string `json:"trace"`
	Devices []struct {
		Device          int             `json:"device"`
		Segments        int             `json:"segments"`
		ReservedAtDump  uint64          `json:"reserved_at_dump_bytes"`
		LiveAtDump      uint64          `json:"live_at_dump_bytes"`
		TraceEntries    int             `json:"trace_entries"`
		NothingToReplay string          `json:"nothing_to_replay"`
		Report          json.RawMessage `json:"report"`
	} `json:"devices"`
}

// formatFixture is a fixture of trace/testdata/formats_snapshot.py.
func formatFixture(name string) string {
	return filepath.Join("..", "..", "internal", "analysis", "trace", "testdata", name)
}

// A snapshot with data for two devices is replayed device by device and
// each is reported, in replay and advise, text and JSON; -device N still
// replays one; convert and diff, which hold one device's events, ask for
// -device with the devices listed, and so do -html and -snapshot-out.
func TestSeveralDevicesAreEachReplayedAndReported(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "two.json")
	if err := os.WriteFile(path, []byte(twoDeviceSnapshot), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"replay", "advise"} {
		args := []string{cmd, "-quiet", path}
		if cmd == "replay" {
			args = append(args, "-no-search")
		}
		out := mustRun(t, args...)
		for _, want := range []string{"two.json holds data for 2 devices (0, 1): each is replayed on its own, one report per device (-device N replays one)",
			"\n=== device 0: no segments at the dump, 2 trace entries ===\ntrace two.json (device 0):",
			"\n=== device 1: no segments at the dump, 3 trace entries ===\ntrace two.json (device 1):"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s text: want %q in\n%s", cmd, want, out)
			}
		}
		var r devicesReport
		decodeOne(t, mustRun(t, append(args, "-json")...), &r)
		if r.Trace != "two.json" || len(r.Devices) != 2 || r.Devices[0].Device != 0 || r.Devices[1].Device != 1 || r.Devices[1].TraceEntries != 3 {
			t.Fatalf("%s JSON: %+v", cmd, r)
		}
		for i, wantLive := range []uint64{1 << 20, 9 << 20} {
			var rep replayJSON
			if cmd == "advise" { // advise's report holds the comparison
				var a struct {
					Comparison replayJSON `json:"comparison"`
				}
				if err := json.Unmarshal(r.Devices[i].Report, &a); err != nil {
					t.Fatal(err)
				}
				rep = a.Comparison
			} else if err := json.Unmarshal(r.Devices[i].Report, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.PeakLive != wantLive || rep.Trace != "two.json (device "+string(rune('0'+i))+")" {
				t.Errorf("%s JSON device %d: %s peak live %d, want %d", cmd, i, rep.Trace, rep.PeakLive, wantLive)
			}
		}
	}
	var r replayJSON
	decodeOne(t, mustRun(t, "replay", "-quiet", "-no-search", "-json", "-device", "1", path), &r)
	if r.PeakLive != 9<<20 || r.Trace != "two.json (device 1)" {
		t.Fatalf("-device 1: %s peak live %d, want device 1's 9 MiB", r.Trace, r.PeakLive)
	}
	decodeOne(t, mustRun(t, "replay", "-quiet", "-no-search", "-json", "-device", "0", path), &r)
	if r.PeakLive != 1<<20 || r.Trace != "two.json (device 0)" {
		t.Fatalf("-device 0: %s peak live %d, want device 0's 1 MiB", r.Trace, r.PeakLive)
	}
	for _, args := range [][]string{
		{"convert", path, "-o", filepath.Join(dir, "x.jsonl")},
		{"diff", "-quiet", "-no-search", "-b-torch-conf", "expandable_segments:True", path},
	} {
		_, _, err := runCmd(t, args...)
		var several *trace.SeveralDevicesError
		if !errors.As(err, &several) || !errors.Is(err, errUsage) || len(several.Devices) != 2 ||
			!strings.Contains(err.Error(), "holds data for devices 0, 1: choose one with -device N\n  device 0: no segments at the dump, 2 trace entries\n  device 1:") ||
			strings.Contains(err.Error(), "bad") {
			t.Errorf("%s without -device: %v, want the devices listed and -device named (exit 2)", args[0], err)
		}
	}
	for _, args := range [][]string{
		{"replay", "-quiet", "-html", filepath.Join(dir, "r.html"), path},
		{"replay", "-quiet", "-snapshot-out", filepath.Join(dir, "r.pickle"), path},
		{"advise", "-quiet", "-html", filepath.Join(dir, "a.html"), path},
	} {
		if _, _, err := runCmd(t, args...); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "writes one device's replay") || !strings.Contains(err.Error(), "devices 0, 1: choose one with -device N") {
			t.Errorf("%v: %v, want a usage error asking for -device", args, err)
		}
	}
	out := filepath.Join(dir, "d1.jsonl")
	mustRun(t, "convert", "-device", "1", path, "-o", out)
	if b, err := os.ReadFile(out); err != nil || strings.Count(string(b), `"op":"alloc"`) != 3 {
		t.Fatalf("convert -device 1 wrote %q (%v), want device 1's three allocations", b, err)
	}
	_, _, err := runCmd(t, "replay", "-quiet", "-device", "5", path)
	var none *trace.NoDeviceDataError
	if !errors.As(err, &none) || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "device 5 has no data in the snapshot (no segments, no trace entries); data for devices 0, 1: choose one with -device N") {
		t.Fatalf("-device 5 of 2: %v", err)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-device", "-2", path); !errors.Is(err, errUsage) {
		t.Fatalf("-device -2: %v, want a usage error", err)
	}
	tr := filepath.Join(dir, "t.jsonl")
	mustRun(t, "synth", "-workload", "churn", "-allocs", "20", "-o", tr)
	if _, _, err := runCmd(t, "replay", "-quiet", "-device", "0", tr); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "gpumem trace") {
		t.Fatalf("-device on a gpumem trace: %v, want a usage error", err)
	}
}

// Each way a real file spreads its data over devices: one device with data
// is replayed without asking, whichever it is and whatever device 0 holds
// (an empty trace, a lone snapshot marker); segments without a trace are
// replayed as what was live at the dump; several devices are each
// reported; a device with only cached memory says so, never "bad".
func TestDevicesAreReplayedByTheirData(t *testing.T) {
	const d1Live = 8<<20 + 3<<20 + 1000000
	for _, tc := range []struct {
		fixture string
		trace   string
		live    uint64
	}{
		{"segments-list.pickle", "segments-list.pickle (device 1)", d1Live},
		{"device1-empty-traces.pickle", "device1-empty-traces.pickle (device 1)", d1Live},
		{"marker-device0.pickle", "marker-device0.pickle (device 1)", d1Live + 1<<20},
		{"pytorch20.pickle", "pytorch20.pickle", 1500000 + 500 + 7<<20},
	} {
		var r replayJSON
		decodeOne(t, mustRun(t, "replay", "-quiet", "-no-search", "-json", formatFixture(tc.fixture)), &r)
		if r.Trace != tc.trace || r.PeakLive != tc.live {
			t.Errorf("%s: %q peak live %d, want %q %d", tc.fixture, r.Trace, r.PeakLive, tc.trace, tc.live)
		}
	}
	for fixture, devices := range map[string][]int{"segments-two-devices.pickle": {0, 1}, "three-devices.pickle": {0, 1, 2}} {
		var r devicesReport
		decodeOne(t, mustRun(t, "replay", "-quiet", "-no-search", "-json", formatFixture(fixture)), &r)
		if len(r.Devices) != len(devices) {
			t.Fatalf("%s: %d devices reported, want %v", fixture, len(r.Devices), devices)
		}
		for i, d := range r.Devices {
			if d.Device != devices[i] || len(d.Report) == 0 {
				t.Errorf("%s: device %d reported as %d (report %d bytes)", fixture, devices[i], d.Device, len(d.Report))
			}
		}
	}
	_, _, err := runCmd(t, "replay", "-quiet", formatFixture("cached-only.pickle"))
	if !errors.Is(err, compare.ErrEmptyTrace) || exitCode(err) != 1 ||
		!strings.Contains(err.Error(), "no allocation in its trace and no live block at the dump: nothing to replay; PyTorch held 20.00 MiB in 1 segment at the dump, all of it cached and free") {
		t.Fatalf("cached memory only: %v", err)
	}
	// Device 0 with only cached memory beside device 1 with a trace: both
	// listed, device 0 with the reason instead of a report.
	dir := t.TempDir()
	path := filepath.Join(dir, "cached0.json")
	if err := os.WriteFile(path, []byte(`{"segments": [{"device": 0, "address": 4096, "total_size": 2097152, "blocks": [{"address": 4096, "size": 2097152, "state": "inactive"}]}],
		"device_traces": [[], [{"action": "alloc", "addr": 8192, "size": 1048576, "stream": 0, "time_us": 1}]]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, "replay", "-quiet", "-no-search", path)
	if !strings.Contains(out, "=== device 0: 0 B live and 2.00 MiB reserved in 1 segment at the dump, no trace entries ===\ndevice 0: no allocation in its trace and no live block at the dump: nothing to replay; PyTorch held 2.00 MiB in 1\n  segment at the dump") ||
		!strings.Contains(out, "=== device 1: no segments at the dump, 1 trace entry ===\ntrace cached0.json (device 1)") {
		t.Fatalf("cached device 0 beside device 1:\n%s", out)
	}
	var r devicesReport
	decodeOne(t, mustRun(t, "replay", "-quiet", "-no-search", "-json", path), &r)
	if len(r.Devices) != 2 || r.Devices[0].NothingToReplay == "" || r.Devices[0].Report != nil || r.Devices[0].ReservedAtDump != 2<<20 || r.Devices[1].Report == nil {
		t.Fatalf("JSON: %+v", r)
	}
}

// The shared snapshots each format and device situation comes from: the
// 2.0 snapshot and the list replay, the list's data on device 1 and the
// GNN's three devices each reported.
func TestSharedSnapshotsOfEveryShapeReplay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		devices int
	}{
		{"opt-1.3b-offloaded-inference-pytorch2.0.pickle", 1},
		{"diffusion-device1-segments-list.pkl", 1},
		{"gcn-three-devices-expandable-oom.pickle", 3},
	} {
		path := filepath.Join(sharedTraces, tc.name)
		if _, err := os.Stat(path); err != nil {
			t.Logf("skipping %s: %v", tc.name, err)
			continue
		}
		out := mustRun(t, "replay", "-quiet", "-no-search", "-policies", "torch", "-json", path)
		if tc.devices == 1 {
			var r replayJSON
			decodeOne(t, out, &r)
			if r.Events == 0 || r.PeakLive == 0 {
				t.Errorf("%s: %+v", tc.name, r)
			}
			continue
		}
		var r devicesReport
		decodeOne(t, out, &r)
		if len(r.Devices) != tc.devices {
			t.Errorf("%s: %d devices reported, want %d", tc.name, len(r.Devices), tc.devices)
		}
	}
}
