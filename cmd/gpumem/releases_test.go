package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// releaseSnapshot writes a snapshot (MiB, one stream) whose program empties
// the cache once (emptyCache frames), whose allocator then releases a
// cached segment to retry a refused 50 MiB segment (no frames: decided by
// context), and which ends with an oom entry, 30 MiB free at 70 reserved:
// a capacity of 100 MiB.
func releaseSnapshot(t *testing.T) string {
	t.Helper()
	const MiB = 1 << 20
	type m = map[string]any
	const a, b, d, e = 0x10_0000_0000, 0x11_0000_0000, 0x12_0000_0000, 0x13_0000_0000
	n := 0
	ent := func(action string, addr, size uint64) m {
		n++
		return m{"action": action, "addr": addr, "size": size, "stream": 0, "time_us": n}
	}
	release := ent("segment_free", b, 40*MiB)
	release["frames"] = []m{{"name": "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache()", "filename": "??", "line": 0}}
	entries := []m{
		ent("segment_alloc", a, 20*MiB), ent("alloc", a, 20*MiB),
		ent("segment_alloc", b, 40*MiB), ent("alloc", b, 40*MiB), ent("free_completed", b, 40*MiB), release,
		ent("segment_alloc", d, 40*MiB), ent("alloc", d, 40*MiB), ent("free_completed", d, 40*MiB), ent("segment_free", d, 40*MiB),
		ent("segment_alloc", e, 50*MiB), ent("alloc", e, 50*MiB),
		{"action": "oom", "size": 100 * MiB, "device_free": 30 * MiB, "stream": 0, "time_us": 20},
	}
	live := func(addr, size uint64) m {
		return m{"device": 0, "address": addr, "total_size": size, "stream": 0, "segment_type": "large",
			"blocks": []m{{"address": addr, "size": size, "requested_size": size, "state": "active_allocated"}}}
	}
	data, err := json.Marshal(m{"segments": []m{live(a, 20*MiB), live(e, 50*MiB)}, "device_traces": [][]m{entries}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "releases.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// convert writes the program's release as a cleanup op and says whose
// each release was, what it assumed and the capacity the JSONL cannot
// carry; replay models the release in every policy and the torch model's
// accuracy at that capacity.
func TestConvertAndReplayCarryTheProgramsReleases(t *testing.T) {
	snap := releaseSnapshot(t)
	out := filepath.Join(t.TempDir(), "releases.jsonl")
	msg := mustRun(t, "convert", snap, "-o", out)
	for _, w := range []string{
		"1 cleanups",
		"cache releases: 1 empty_cache (by its frames, 40.00 MiB): replayed as cleanups; 1 out-of-memory retry (by context, 40.00 MiB)",
		"assumed: 1 release run taken for the allocator's out-of-memory retry with no frames to say so",
		"the recording ran at a capacity of 100.00 MiB, from oom entry 12",
		"replay it with -capacity 104857600B to run as the recording did",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("convert's message lacks %q:\n%s", w, msg)
		}
	}
	jsonl, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(jsonl), `"op":"cleanup"`); n != 1 {
		t.Fatalf("%d cleanup ops in the trace, want 1:\n%s", n, jsonl)
	}
	var r struct {
		PyTorch struct {
			ModelCapacity uint64   `json:"model_capacity_bytes"`
			ModelPeak     uint64   `json:"model_peak_reserved_bytes"`
			ModelError    *float64 `json:"model_error"`
		} `json:"pytorch"`
		Policies []struct {
			Name   string `json:"name"`
			Replay struct {
				Cleanups int `json:"explicit_cleanups"`
			} `json:"replay"`
		} `json:"policies"`
	}
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-no-search", "-policies", "adaptive,torch", snap), &r)
	if r.PyTorch.ModelCapacity != 100<<20 || r.PyTorch.ModelPeak != 70<<20 || r.PyTorch.ModelError == nil || *r.PyTorch.ModelError != 0 {
		t.Fatalf("pytorch %+v", r.PyTorch)
	}
	for _, p := range r.Policies {
		if p.Replay.Cleanups != 1 {
			t.Errorf("%s replayed %d cleanups, want 1", p.Name, p.Replay.Cleanups)
		}
	}
}
