package trace

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFixture is a two-segment snapshot with a trace that allocates,
// frees and maps, with frames on one entry and addresses past 2^63.
func writeFixture() *TorchSnapshot {
	const a, b = 0x7f00_0000_0000, 0x8000_0000_0000_0000
	frames := []TorchFrame{{Name: "step", Filename: "train.go", Line: 42}, {Name: "main", Filename: "main.go", Line: 7}}
	return &TorchSnapshot{
		Segments: []TorchSegment{
			{Address: a, TotalSize: 2 * MiB, Stream: 0, SegmentType: "small", Blocks: []TorchBlock{
				{Address: a, Size: 512, RequestedSize: 500, State: "active_allocated", Frames: frames},
				{Address: a + 512, Size: 2*MiB - 512, State: "inactive"},
			}},
			{Address: b, TotalSize: 20 * MiB, Stream: 0x5555_0000, SegmentType: "large", Blocks: []TorchBlock{
				{Address: b, Size: 20 * MiB, State: "inactive"},
			}},
		},
		Traces: [][]TorchTraceEntry{{
			{Action: "segment_alloc", Addr: a, Size: 2 * MiB, TimeUS: 1},
			{Action: "alloc", Addr: a, Size: 500, TimeUS: 2, Frames: frames},
			{Action: "segment_alloc", Addr: b, Size: 20 * MiB, Stream: 0x5555_0000, TimeUS: 3},
			{Action: "alloc", Addr: b, Size: 3 * MiB, Stream: 0x5555_0000, TimeUS: 4},
			{Action: "free_requested", Addr: b, Size: 3 * MiB, Stream: 0x5555_0000, TimeUS: 5},
			{Action: "free_completed", Addr: b, Size: 3 * MiB, Stream: 0x5555_0000, TimeUS: 6},
			{Action: "oom", Addr: 1 << 20, Size: 64 * MiB, TimeUS: 7},
		}},
		AllocatorSettings: map[string]any{"expandable_segments": false, "max_split_size": int64(-1), "garbage_collection_threshold": 0.0,
			"roundup_power2_divisions": map[string]any{"1": 0}},
	}
}

// What WriteTorchSnapshot writes, ReadSnapshot reads back to the same
// events, segments and reserve.
func TestWrittenSnapshotReadsBack(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTorchSnapshot(&buf, writeFixture()); err != nil {
		t.Fatal(err)
	}
	s := mustSnapshot(t, buf.Bytes(), SnapshotOptions{})
	want := []Event{
		{Op: OpAlloc, T: 2, ID: 1, Size: 500, Stream: 0},
		{Op: OpAlloc, T: 4, ID: 2, Size: 3 * MiB, Stream: 1},
		{Op: OpFree, T: 6, ID: 2},
	}
	if len(s.Events) != len(want) {
		t.Fatalf("events %+v, want %+v", s.Events, want)
	}
	for i := range want {
		if s.Events[i] != want[i] {
			t.Fatalf("event %d: %+v, want %+v", i, s.Events[i], want[i])
		}
	}
	if s.FinalReserved != 22*MiB || s.ReservedAtStart != 0 || s.PeakReserved != 22*MiB || s.Counts.OOMs != 1 || s.Segments != 2 {
		t.Fatalf("reserved final %d start %d peak %d, %d OOMs, %d segments", s.FinalReserved, s.ReservedAtStart, s.PeakReserved, s.Counts.OOMs, s.Segments)
	}
	if s.StreamHandles[1] != 0x5555_0000 || s.AllocatorSettings["max_split_size"] != int64(-1) {
		t.Fatalf("stream handles %x, settings %v", s.StreamHandles, s.AllocatorSettings)
	}
}

// A restricted Python unpickler (find_class refuses every global) loads the
// pickle, and it has the schema memory_viz reads.
func TestWrittenSnapshotLoadsInPythonWithMemoryVizSchema(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: the schema check runs where it is")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "snap.pickle")
	var buf bytes.Buffer
	if err := WriteTorchSnapshot(&buf, writeFixture()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import pickle, sys
class R(pickle.Unpickler):
    def find_class(self, m, n): raise pickle.UnpicklingError("global %s.%s" % (m, n))
s = R(open(sys.argv[1], "rb")).load()
assert set(s) >= {"segments", "device_traces"}, s.keys()
for seg in s["segments"]:
    for k in ("device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream", "segment_type", "blocks"):
        assert k in seg, k
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    addr = seg["address"]
    for b in seg["blocks"]:
        assert b["address"] == addr and b["state"] in ("active_allocated", "inactive") and isinstance(b["frames"], list)
        addr += b["size"]
    assert seg["allocated_size"] == sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
actions = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"}
for tr in s["device_traces"]:
    for e in tr:
        assert e["action"] in actions, e
        where = "device_free" if e["action"] == "oom" else "addr"
        for k in (where, "size", "stream", "time_us", "frames"):
            assert k in e, k
        for f in e["frames"]:
            assert set(f) == {"name", "filename", "line"}
assert s["segments"][1]["address"] == 0x8000000000000000
assert s["device_traces"][0][1]["frames"][0] == {"name": "step", "filename": "train.go", "line": 42}
print("ok", len(s["segments"]), len(s["device_traces"][0]))
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", script, path).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ok 2 7") {
		t.Fatalf("python3: %v\n%s", err, out)
	}
}
