package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// snapshotJSON writes a snapshot in the schema torch.cuda.memory._snapshot
// returns (JSON is read like a pickle): the given segments and one device
// trace.
func snapshotJSON(t *testing.T, segments []map[string]any, entries []map[string]any) []byte {
	t.Helper()
	if entries == nil {
		entries = []map[string]any{}
	}
	data, err := json.Marshal(map[string]any{"segments": segments, "device_traces": [][]map[string]any{entries}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func seg(addr, size uint64, stream int, blocks ...map[string]any) map[string]any {
	if blocks == nil {
		blocks = []map[string]any{{"address": addr, "size": size, "state": "inactive"}}
	}
	typ := "large"
	if size == 2*MiB {
		typ = "small"
	}
	return map[string]any{"device": 0, "address": addr, "total_size": size, "stream": stream, "segment_type": typ, "blocks": blocks}
}

func ent(action string, addr, size uint64, stream int, t int64) map[string]any {
	return map[string]any{"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t}
}

// A window that opens with an empty_cache (a run of segment_free entries
// before the first alloc) reports PyTorch's reserve from its first
// allocation on: the reserve before it belonged to the previous experiment.
func TestWindowOpeningWithEmptyCacheReportsItsOwnReserve(t *testing.T) {
	const a, c = 0x10_0000_0000, 0x20_0000_0000
	var entries []map[string]any
	for i := range uint64(5) {
		entries = append(entries, ent("segment_free", 0x90_0000_0000+i<<32, 100*MiB, 0, int64(i)))
	}
	entries = append(entries,
		ent("segment_alloc", a, 20*MiB, 0, 10),
		ent("alloc", a, 16*MiB, 0, 11),
		ent("segment_alloc", c, 20*MiB, 0, 12),
		ent("alloc", c, 18*MiB, 0, 13),
		ent("free_requested", c, 18*MiB, 0, 14),
		ent("free_completed", c, 18*MiB, 0, 15),
		ent("segment_free", c, 20*MiB, 0, 16),
	)
	live := map[string]any{"address": a, "size": 16 * MiB, "requested_size": 16 * MiB, "state": "active_allocated"}
	free := map[string]any{"address": a + 16*MiB, "size": 4 * MiB, "state": "inactive"}
	s := mustSnapshot(t, snapshotJSON(t, []map[string]any{seg(a, 20*MiB, 0, live, free)}, entries), SnapshotOptions{})

	if s.ReservedAtStart != 500*MiB || s.PeakReserved != 500*MiB {
		t.Fatalf("trace start %d, trace peak %d: want 500 MiB both", s.ReservedAtStart, s.PeakReserved)
	}
	if s.FirstAlloc != 6 || s.ReservedAtFirstAlloc != 20*MiB || s.WindowPeakReserved != 40*MiB || s.FinalReserved != 20*MiB {
		t.Fatalf("first alloc %d, reserved there %d, window peak %d, dump %d: want 6, 20 MiB, 40 MiB, 20 MiB",
			s.FirstAlloc, s.ReservedAtFirstAlloc, s.WindowPeakReserved, s.FinalReserved)
	}
	if s.UnexplainedSegments != 0 || s.UnexplainedReserved != 0 || s.LiveAtFirstAlloc != 0 {
		t.Fatalf("unexplained %d segments %d B, live at first alloc %d: want none", s.UnexplainedSegments, s.UnexplainedReserved, s.LiveAtFirstAlloc)
	}
}

// A snapshot with no trace entries: the window is the dump; the segments'
// active blocks are the live allocations, and the segments none of them
// lies in are reserve nothing explains.
func TestSnapshotWithoutTraceNamesItsUnexplainedReserve(t *testing.T) {
	const s1, s2, s3 = 0x10_0000_0000, 0x20_0000_0000, 0x30_0000_0000
	live := map[string]any{"address": s1, "size": 4 * MiB, "requested_size": 4_000_000, "state": "active_allocated"}
	rest := map[string]any{"address": s1 + 4*MiB, "size": 16 * MiB, "state": "inactive"}
	s := mustSnapshot(t, snapshotJSON(t, []map[string]any{seg(s1, 20*MiB, 0, live, rest), seg(s2, 100*MiB, 0), seg(s3, 2*MiB, 0)}, nil), SnapshotOptions{})
	if len(s.Events) != 1 || s.Events[0].Size != 4_000_000 {
		t.Fatalf("events %+v: want the one live block", s.Events)
	}
	if s.FirstAlloc != -1 || s.ReservedAtFirstAlloc != 122*MiB || s.WindowPeakReserved != 122*MiB || s.LiveAtFirstAlloc != 4_000_000 {
		t.Fatalf("first alloc %d, reserved %d, window peak %d, live %d", s.FirstAlloc, s.ReservedAtFirstAlloc, s.WindowPeakReserved, s.LiveAtFirstAlloc)
	}
	if s.UnexplainedSegments != 2 || s.UnexplainedReserved != 102*MiB {
		t.Fatalf("unexplained %d segments, %d B: want 2 segments, 102 MiB", s.UnexplainedSegments, s.UnexplainedReserved)
	}
}

// Several streams: a segment of another stream held through the window and
// never used is unexplained; the leading frees of either stream's cache are
// outside the window.
func TestWindowFiguresWithSeveralStreams(t *testing.T) {
	const a, b, idle, gone = 0x10_0000_0000, 0x20_0000_0000, 0x30_0000_0000, 0x40_0000_0000
	const s0, s1 = 7, 0x5555_0000
	entries := []map[string]any{
		ent("segment_free", gone, 60*MiB, s1, 1),
		ent("segment_free", gone+64*MiB, 60*MiB, s0, 2),
		ent("alloc", a, 12*MiB, s0, 3),
		ent("segment_alloc", b, 20*MiB, s1, 4),
		ent("alloc", b, 6*MiB, s1, 5),
		ent("free_completed", b, 6*MiB, s1, 6),
	}
	la := map[string]any{"address": a, "size": 12 * MiB, "state": "active_allocated"}
	ra := map[string]any{"address": a + 12*MiB, "size": 8 * MiB, "state": "inactive"}
	segs := []map[string]any{seg(a, 20*MiB, s0, la, ra), seg(b, 20*MiB, s1), seg(idle, 40*MiB, s1)}
	s := mustSnapshot(t, snapshotJSON(t, segs, entries), SnapshotOptions{})
	if s.Streams != 2 || s.StreamHandles[0] != s0 || s.StreamHandles[1] != s1 {
		t.Fatalf("streams %d %x", s.Streams, s.StreamHandles)
	}
	// Held before the trace: a (20), idle (40) and the two freed (120).
	if s.ReservedAtStart != 180*MiB || s.FirstAlloc != 2 || s.ReservedAtFirstAlloc != 60*MiB || s.WindowPeakReserved != 80*MiB {
		t.Fatalf("start %d, first alloc %d, reserved there %d, window peak %d", s.ReservedAtStart, s.FirstAlloc, s.ReservedAtFirstAlloc, s.WindowPeakReserved)
	}
	if s.UnexplainedSegments != 1 || s.UnexplainedReserved != 40*MiB {
		t.Fatalf("unexplained %d segments, %d B: want the idle 40 MiB segment", s.UnexplainedSegments, s.UnexplainedReserved)
	}
}

// On a trace that does not open with an empty_cache the window's peak is
// the trace's.
func TestWindowPeakIsTheTracePeakWithoutLeadingFrees(t *testing.T) {
	s := mustSnapshot(t, readFixture(t, "synthetic.json"), device0)
	if s.WindowPeakReserved != s.PeakReserved {
		t.Fatalf("window peak %d, trace peak %d", s.WindowPeakReserved, s.PeakReserved)
	}
	if s.FirstAlloc < 0 || s.ReservedAtFirstAlloc > s.WindowPeakReserved {
		t.Fatalf("first alloc %d, reserved there %d", s.FirstAlloc, s.ReservedAtFirstAlloc)
	}
}

// Entries for two devices and no choice: refused with both listed, never
// device 0 alone; a trace on one device only needs no choice.
func TestSeveralDeviceTracesNeedAChoice(t *testing.T) {
	two := `{"device_traces": [[{"action": "alloc", "addr": 1, "size": 512}], [], [{"action": "alloc", "addr": 2, "size": 512}]]}`
	_, err := ReadSnapshot(strings.NewReader(two), SnapshotOptions{})
	var several *SeveralDevicesError
	if !errors.As(err, &several) || !errors.Is(err, ErrSeveralDevices) || errors.Is(err, ErrSnapshot) || len(several.Devices) != 2 || several.Devices[0].Device != 0 || several.Devices[1].Device != 2 {
		t.Fatalf("got %v, want a SeveralDevicesError listing devices 0 and 2", err)
	}
	s, err := ReadSnapshot(strings.NewReader(two), SnapshotOptions{ChooseDevice: true, Device: 2})
	if err != nil || s.Device != 2 || s.Counts.Allocs != 1 {
		t.Fatalf("device 2 chosen: %+v, %v", s, err)
	}
	one := `{"device_traces": [[], [{"action": "alloc", "addr": 2, "size": 512}]]}`
	if s, err := ReadSnapshot(strings.NewReader(one), SnapshotOptions{}); err != nil || s.Device != 1 {
		t.Fatalf("one non-empty device: %v, %v", s, err)
	}
}

// Every event names the entry it came from: the prelude none, an implied
// free and the alloc after it the same entry, entries that emit nothing
// (free_requested, segment_alloc) no event.
func TestEventsNameTheirTraceEntries(t *testing.T) {
	js := `{"segments": [{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0, "blocks": [{"address": 4096, "size": 512, "state": "active_allocated"}]}],
 "device_traces": [[
  {"action": "segment_alloc", "addr": 8192, "size": 2097152, "stream": 0},
  {"action": "alloc", "addr": 8192, "size": 512, "stream": 0},
  {"action": "alloc", "addr": 8192, "size": 1024, "stream": 0},
  {"action": "free_requested", "addr": 8192, "size": 1024, "stream": 0},
  {"action": "free_completed", "addr": 8192, "size": 1024, "stream": 0}]]}`
	s, err := ReadSnapshot(strings.NewReader(js), SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []int32{-1, 1, 2, 2, 4} // prelude alloc; alloc; implied free + alloc; free
	if len(s.EventEntries) != len(s.Events) || fmt.Sprint(s.EventEntries) != fmt.Sprint(want) {
		t.Fatalf("EventEntries %v for %d events, want %v", s.EventEntries, len(s.Events), want)
	}
}
