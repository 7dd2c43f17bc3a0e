package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// oomSnapshot is a recording that ran out of memory (MiB): A (20) live
// throughout; D (40) allocated and freed; a 50 MiB request refused at
// 60 reserved, so malloc released D and retried (E's segment, frames of
// malloc when withFrames); E freed; then a 100 MiB request failed: malloc
// released E and an oom entry says 100 MiB was free at 20 reserved. The
// capacity was 120 MiB: the retry's refusal puts it below 110, so 109.
// PyTorch's peak is 70 MiB; a model that keeps D (no capacity) reserves
// 110.
func oomSnapshot(t *testing.T, withFrames bool) *trace.Snapshot {
	t.Helper()
	const MiB = 1 << 20
	type m = map[string]any
	var malloc []m
	if withFrames {
		malloc = []m{{"name": "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", "filename": "??", "line": 0}}
	}
	const a, d, e = 0x10_0000_0000, 0x11_0000_0000, 0x12_0000_0000
	n := 0
	ent := func(action string, addr, size uint64, frames []m) m {
		n++
		x := m{"action": action, "addr": addr, "size": size, "stream": 0, "time_us": n}
		if frames != nil {
			x["frames"] = frames
		}
		return x
	}
	entries := []m{
		ent("segment_alloc", a, 20*MiB, nil), ent("alloc", a, 20*MiB, nil),
		ent("segment_alloc", d, 40*MiB, nil), ent("alloc", d, 40*MiB, nil), ent("free_completed", d, 40*MiB, nil),
		ent("segment_free", d, 40*MiB, malloc), ent("segment_alloc", e, 50*MiB, nil), ent("alloc", e, 50*MiB, nil),
		ent("free_completed", e, 50*MiB, nil), ent("segment_free", e, 50*MiB, malloc),
		{"action": "oom", "size": 100 * MiB, "device_free": 100 * MiB, "stream": 0, "time_us": 20},
	}
	segs := []m{{"device": 0, "address": a, "total_size": 20 * MiB, "stream": 0, "segment_type": "large",
		"blocks": []m{{"address": a, "size": 20 * MiB, "requested_size": 20 * MiB, "state": "active_allocated"}}}}
	data, err := json.Marshal(m{"segments": segs, "device_traces": [][]m{entries}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := trace.ReadSnapshot(bytes.NewReader(data), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The model's accuracy replays at the capacity the recording shows: there
// its own out-of-memory path releases D as PyTorch's did, and it reserves
// PyTorch's peak; the torch row, at unlimited capacity, keeps D. The report
// says whose each release was, what was assumed where no frames said, and
// where the capacity comes from.
func TestModelReplaysAtTheRecordedCapacity(t *testing.T) {
	const MiB = 1 << 20
	for _, frames := range []bool{true, false} {
		src, err := FromSnapshot("oom.json", oomSnapshot(t, frames))
		if err != nil {
			t.Fatal(err)
		}
		c, err := Run(context.Background(), src, Options{Policies: []string{Torch}, SkipCapacity: true})
		if err != nil {
			t.Fatal(err)
		}
		p := c.PyTorch
		if p.RecordedCapacity == nil || p.RecordedCapacity.Bytes != 110*MiB-1 || p.RecordedCapacity.AtLeast != 70*MiB || p.RecordedCapacity.Below != 110*MiB || p.RecordedCapacity.Entry != 5 {
			t.Fatalf("frames %v: recorded capacity %+v", frames, p.RecordedCapacity)
		}
		if p.ModelCapacity != 110*MiB-1 || p.ModelPeakReserved != 70*MiB || p.ModelError == nil || *p.ModelError != 0 || p.ModelFailedAllocs != 0 {
			t.Fatalf("frames %v: model at %d: peak %d, error %v, %d failed", frames, p.ModelCapacity, p.ModelPeakReserved, p.ModelError, p.ModelFailedAllocs)
		}
		if c.Policies[0].PeakReserved != 110*MiB {
			t.Fatalf("frames %v: torch row at unlimited capacity %d MiB, want 110 (D kept)", frames, c.Policies[0].PeakReserved/MiB)
		}
		byFrames := 0
		if frames {
			byFrames = 1
		}
		want := []ReleaseSummary{
			{Kind: "out-of-memory retry", Runs: 1, ByFrames: byFrames, Bytes: 40 * MiB, FirstEntry: 5, Replayed: "none: the model's own out-of-memory path at the recorded capacity"},
			{Kind: "out-of-memory", Runs: 1, ByFrames: byFrames, Bytes: 50 * MiB, FirstEntry: 9, Replayed: "cleanup events"},
		}
		if !slices.Equal(p.Releases, want) {
			t.Fatalf("frames %v: releases %+v", frames, p.Releases)
		}
		if (len(p.ReleaseAssumptions) == 2) == frames {
			t.Fatalf("frames %v: assumptions %q", frames, p.ReleaseAssumptions)
		}
		var text strings.Builder
		if err := c.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		flat := strings.Join(strings.Fields(text.String()), " ")
		for _, w := range []string{
			"the recording ran at a capacity of 110.00 MiB, from the out-of-memory retry at entries 5–5: a 50.00 MiB segment refused at 60.00 MiB reserved; at least 70.00 MiB (PyTorch's peak), below 110.00 MiB",
			"the recorded addresses, the recorded capacity) reserves 70.00 MiB at its peak: +0.00 %",
			"1 out-of-memory (",
		} {
			if !strings.Contains(flat, w) {
				t.Errorf("frames %v: text lacks %q:\n%s", frames, w, text.String())
			}
		}
		if !frames && !strings.Contains(flat, "assumed: 1 release run taken for the allocator's out-of-memory retry with no frames to say so") {
			t.Errorf("no assumption said:\n%s", text.String())
		}
		var js bytes.Buffer
		if err := json.NewEncoder(&js).Encode(c); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{`"recorded_capacity":{"bytes":115343359`, `"model_capacity_bytes":115343359`, `"releases":[{"kind":"out-of-memory retry"`} {
			if !strings.Contains(js.String(), k) {
				t.Errorf("JSON lacks %s:\n%s", k, js.String())
			}
		}
	}
}

// conventionEvents is the smallest trace whose smallest capacity depends
// on the addresses the torch model invents (trace/torch's
// conventionTrace): 80 MiB with them rising, 60 falling.
func conventionEvents() []trace.Event {
	const MiB = 1 << 20
	return []trace.Event{
		{Op: trace.OpAlloc, ID: 1, Size: 40 * MiB},
		{Op: trace.OpAlloc, ID: 2, Size: 20 * MiB},
		{Op: trace.OpFree, ID: 1},
		{Op: trace.OpAlloc, ID: 3, Size: 20 * MiB},
		{Op: trace.OpFree, ID: 2},
		{Op: trace.OpAlloc, ID: 4, Size: 20 * MiB},
		{Op: trace.OpFree, ID: 3},
		{Op: trace.OpAlloc, ID: 5, Size: 40 * MiB},
	}
}

// Where the model invents addresses, the report gives the smallest
// capacity under both conventions and says how far apart they are; advise,
// whose grid would search twice per setting, does not.
func TestSmallestCapacityUnderBothAddressConventions(t *testing.T) {
	const MiB = 1 << 20
	src := Source{Name: "ties.jsonl", Events: conventionEvents()}
	c, err := Run(context.Background(), src, Options{Policies: []string{Torch}})
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policies[0]
	want := AddressDependence{Synthetic: 3, Rising: 80 * MiB, Falling: 60 * MiB, Change: -0.25}
	if p.MinCapacity != 80*MiB || p.Addresses == nil || *p.Addresses != want || !p.Addresses.Depends() {
		t.Fatalf("smallest capacity %d, addresses %+v; want %+v", p.MinCapacity, p.Addresses, want)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if w := "its smallest capacity depends on the addresses it invents for 3 segments no recording places (PyTorch takes the lowest of equal-size free blocks): 80.00 MiB with them rising (the convention), 60.00 MiB falling (-25.0 %)"; !strings.Contains(strings.Join(strings.Fields(text.String()), " "), w) {
		t.Fatalf("text lacks %q:\n%s", w, text.String())
	}
	a, err := Advise(context.Background(), src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range a.Comparison.Policies {
		if p.Addresses != nil {
			t.Fatalf("advise's %s searched under both conventions", p.Name)
		}
	}
}
