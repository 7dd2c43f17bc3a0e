package trace

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// Frames as PyTorch records them (innermost first) for a release the
// program asked for and one the allocator made in malloc.
var (
	emptyCacheFrames = []TorchFrame{
		{Name: "torch::unwind::unwind()", Filename: "??"},
		{Name: "torch::CapturedTraceback::gather(bool, bool, bool)", Filename: "??"},
		{Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::emptyCache()", Filename: "??"},
		{Name: "THCPModule_emptyCache(_object*, _object*)", Filename: "??"},
		{Name: "empty_cache", Filename: "/torch/cuda/memory.py", Line: 192},
		{Name: "compress_layer", Filename: "/work/compress.py", Line: 40},
	}
	mallocFrames = []TorchFrame{
		{Name: "torch::unwind::unwind()", Filename: "??"},
		{Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", Filename: "??"},
		{Name: "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>)", Filename: "??"},
		{Name: "forward", Filename: "/work/model.py", Line: 12},
	}
)

// releaseTrace is a trace of one stream holding every kind of cache
// release, frames recorded for some and not for others (sizes in MiB,
// each allocation the size of its segment, as PyTorch makes segments for
// requests of 10 MiB and more). The reserve peaks at 80 MiB (entry 22).
//
//	 0–5   A (20) and B (40) allocated, B freed
//	 6     segment_free B, emptyCache frames: the program's (frames)
//	 7–10  C (40) allocated and freed
//	11     segment_free C, no frames, then a 40 MiB segment at 60 MiB
//	       reserved (100 > 80: could be a refusal) for a request C could
//	       have served: the program's (context)
//	12–15  D (40) allocated and freed
//	16     segment_free D, malloc frames, then E (50) at 60 reserved:
//	       110 > 80, the out-of-memory retry (frames)
//	17–20  E allocated and freed
//	21     segment_free E, no frames, then F (60) at 70 reserved: 130 > 80
//	       and E (50) cannot serve 60: the retry (context)
//	22–25  F allocated and freed
//	26     segment_free F, malloc frames, then 27 oom of 100 MiB with
//	       80 MiB free at 20 reserved: a failed request's path (frames)
//	28–31  G (20) allocated and freed
//	32     segment_free G, no frames, then 33 oom (90 MiB, 80 free): the
//	       same (context)
//	34–37  H (20) allocated and freed
//	38     segment_free H, malloc frames, then I (20) at 40 reserved, no
//	       refusal: the allocator's own (garbage collection)
//	39–40  I allocated, live at the dump with A
func releaseTrace() []TorchTraceEntry {
	const a, b, c, d, e, f, g, h, i = 0x10_0000_0000, 0x11_0000_0000, 0x12_0000_0000, 0x13_0000_0000, 0x14_0000_0000, 0x15_0000_0000, 0x16_0000_0000, 0x17_0000_0000, 0x18_0000_0000
	var out []TorchTraceEntry
	t := int64(0)
	add := func(action string, addr, mib uint64, frames []TorchFrame) {
		t++
		out = append(out, TorchTraceEntry{Action: action, Addr: addr, Size: mib * MiB, TimeUS: t, Frames: frames})
	}
	use := func(addr, mib uint64) { // segment_alloc, alloc, free_requested, free_completed
		add("segment_alloc", addr, mib, nil)
		add("alloc", addr, mib, nil)
		add("free_requested", addr, mib, nil)
		add("free_completed", addr, mib, nil)
	}
	add("segment_alloc", a, 20, nil)
	add("alloc", a, 20, nil)
	use(b, 40)
	add("segment_free", b, 40, emptyCacheFrames) // 6
	use(c, 40)
	add("segment_free", c, 40, nil) // 11
	use(d, 40)
	add("segment_free", d, 40, mallocFrames) // 16
	use(e, 50)
	add("segment_free", e, 50, nil) // 21
	use(f, 60)
	add("segment_free", f, 60, mallocFrames) // 26
	add("oom", 80*MiB, 100, mallocFrames)    // 27: WriteTorchSnapshot writes Addr as device_free
	use(g, 20)
	add("segment_free", g, 20, nil) // 32
	add("oom", 80*MiB, 90, nil)     // 33
	use(h, 20)
	add("segment_free", h, 20, mallocFrames) // 38
	add("segment_alloc", i, 20, nil)
	add("alloc", i, 20, nil)
	return out
}

func releaseSegments() []TorchSegment {
	live := func(addr uint64) TorchSegment {
		return TorchSegment{Address: addr, TotalSize: 20 * MiB, SegmentType: "large", Blocks: []TorchBlock{{Address: addr, Size: 20 * MiB, RequestedSize: 20 * MiB, State: "active_allocated"}}}
	}
	return []TorchSegment{live(0x10_0000_0000), live(0x18_0000_0000)}
}

// releaseSnapshotJSON is the same snapshot as JSON, the oom entries'
// free bytes under device_free as PyTorch writes them.
func releaseSnapshotJSON(t *testing.T) []byte {
	t.Helper()
	var entries []map[string]any
	for _, e := range releaseTrace() {
		m := map[string]any{"action": e.Action, "size": e.Size, "stream": 0, "time_us": e.TimeUS}
		if e.Action == "oom" {
			m["device_free"] = e.Addr
		} else {
			m["addr"] = e.Addr
		}
		var frames []map[string]any
		for _, f := range e.Frames {
			frames = append(frames, map[string]any{"name": f.Name, "filename": f.Filename, "line": f.Line})
		}
		if frames != nil {
			m["frames"] = frames
		}
		entries = append(entries, m)
	}
	var segs []map[string]any
	for _, s := range releaseSegments() {
		segs = append(segs, seg(s.Address, s.TotalSize, 0, map[string]any{"address": s.Address, "size": s.TotalSize, "requested_size": s.TotalSize, "state": "active_allocated"}))
	}
	data, err := json.Marshal(map[string]any{"segments": segs, "device_traces": [][]map[string]any{entries}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func releaseSnapshotPickle(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTorchSnapshot(&b, &TorchSnapshot{Segments: releaseSegments(), Traces: [][]TorchTraceEntry{releaseTrace()}}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Every kind of release, decided by frames where they say and by context
// where they do not, the same from a pickle (whose frames the reader
// otherwise elides) and from JSON: the program's runs and the failed
// requests' become cleanups, the served retries and the allocator's own do
// not, and the capacity is the oom entries' reserve plus free bytes,
// between PyTorch's peak and the tightest refusal.
func TestReleaseRunsAreToldApart(t *testing.T) {
	want := []ReleaseRun{
		{First: 6, Last: 6, Bytes: 40 * MiB, Kind: ReleaseProgram, ByFrames: true, ReservedBefore: 60 * MiB, Next: 40 * MiB},
		{First: 11, Last: 11, Bytes: 40 * MiB, Kind: ReleaseProgram, ReservedBefore: 60 * MiB, Next: 40 * MiB},
		{First: 16, Last: 16, Bytes: 40 * MiB, Kind: ReleaseRetry, ByFrames: true, ReservedBefore: 60 * MiB, Next: 50 * MiB},
		{First: 21, Last: 21, Bytes: 50 * MiB, Kind: ReleaseRetry, ReservedBefore: 70 * MiB, Next: 60 * MiB},
		{First: 26, Last: 26, Bytes: 60 * MiB, Kind: ReleaseFailed, ByFrames: true, ReservedBefore: 80 * MiB},
		{First: 32, Last: 32, Bytes: 20 * MiB, Kind: ReleaseFailed, ReservedBefore: 40 * MiB},
		{First: 38, Last: 38, Bytes: 20 * MiB, Kind: ReleaseAllocator, ByFrames: true, ReservedBefore: 40 * MiB, Next: 20 * MiB},
	}
	for _, in := range []struct {
		name string
		data []byte
	}{{"pickle", releaseSnapshotPickle(t)}, {"json", releaseSnapshotJSON(t)}} {
		t.Run(in.name, func(t *testing.T) {
			s := mustSnapshot(t, in.data, SnapshotOptions{})
			got := slices.Clone(s.Releases)
			for k := range got {
				if got[k].Kind.Cleanup() != (got[k].Cleanup >= 0) {
					t.Fatalf("run %+v: a cleanup kind without cleanup events, or the other way", got[k])
				}
				if got[k].Cleanup >= 0 {
					if e := s.Events[got[k].Cleanup]; e.Op != OpCleanup || s.EventEntries[got[k].Cleanup] != int32(got[k].First) {
						t.Fatalf("run %+v: event %d is %+v from entry %d", got[k], got[k].Cleanup, e, s.EventEntries[got[k].Cleanup])
					}
				}
				got[k].Cleanup = 0
			}
			if !slices.Equal(got, want) {
				t.Fatalf("runs\n got %+v\nwant %+v", got, want)
			}
			if s.Counts.Cleanups != 4 || s.PeakReserved != 80*MiB {
				t.Fatalf("%d cleanup events, peak %d MiB: want 4 (one stream), 80 MiB", s.Counts.Cleanups, s.PeakReserved/MiB)
			}
			wantOOM := []OOMEntry{{Entry: 27, Size: 100 * MiB, DeviceFree: 80 * MiB, HasDeviceFree: true, Reserved: 20 * MiB},
				{Entry: 33, Size: 90 * MiB, DeviceFree: 80 * MiB, HasDeviceFree: true, Reserved: 20 * MiB}}
			if !slices.Equal(s.OOMEntries, wantOOM) {
				t.Fatalf("oom entries %+v", s.OOMEntries)
			}
			wantCap := RecordedCapacity{Bytes: 100 * MiB, Low: 80 * MiB, High: 110*MiB - 1, FromEntry: 27, FromOOM: true}
			if s.Capacity != wantCap {
				t.Fatalf("capacity %+v want %+v", s.Capacity, wantCap)
			}
			// The frames a release's entry keeps are read again as any
			// other entry's, and the ordinals after it still match.
			fr, err := s.ReadFrames(bytes.NewReader(in.data), []int{6, 16, 27})
			if err != nil || !slices.Equal(fr[6], emptyCacheFrames) || !slices.Equal(fr[16], mallocFrames) || !slices.Equal(fr[27], mallocFrames) {
				t.Fatalf("frames %v (%v)", fr, err)
			}
		})
	}
}

// Without any frames the context decides alone: the served request keeps
// the run after a 40 MiB segment the program's, and the malloc runs that
// frames decided go by their context too (the gc run, followed by no
// refusal, the program's).
func TestReleaseRunsWithoutFramesGoByContext(t *testing.T) {
	entries := releaseTrace()
	for i := range entries {
		entries[i].Frames = nil
	}
	var b bytes.Buffer
	if err := WriteTorchSnapshot(&b, &TorchSnapshot{Segments: releaseSegments(), Traces: [][]TorchTraceEntry{entries}}); err != nil {
		t.Fatal(err)
	}
	s := mustSnapshot(t, b.Bytes(), SnapshotOptions{})
	var kinds []ReleaseKind
	for _, r := range s.Releases {
		if r.ByFrames {
			t.Fatalf("run %+v decided by frames", r)
		}
		kinds = append(kinds, r.Kind)
	}
	want := []ReleaseKind{ReleaseProgram, ReleaseProgram, ReleaseRetry, ReleaseRetry, ReleaseFailed, ReleaseFailed, ReleaseProgram}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v want %v", kinds, want)
	}
	if s.Counts.Cleanups != 5 || s.Capacity.Bytes != 100*MiB {
		t.Fatalf("%d cleanups, capacity %+v", s.Counts.Cleanups, s.Capacity)
	}
}

// A release run before any event has nothing a replay holds to release:
// no cleanup, and no stream numbered for it.
func TestReleaseBeforeAnyEventBecomesNoCleanup(t *testing.T) {
	entries := []map[string]any{
		ent("segment_free", 0x90_0000_0000, 100*MiB, 9, 1),
		ent("alloc", 0x10_0000_0000, 20*MiB, 3, 2), // in a segment held before the trace
	}
	s := mustSnapshot(t, snapshotJSON(t, []map[string]any{seg(0x10_0000_0000, 20*MiB, 3, map[string]any{"address": 0x10_0000_0000, "size": 20 * MiB, "state": "active_allocated"})}, entries), SnapshotOptions{})
	if len(s.Releases) != 1 || s.Releases[0].Kind != ReleaseProgram || s.Releases[0].Cleanup != -1 || s.Counts.Cleanups != 0 {
		t.Fatalf("releases %+v, %d cleanups", s.Releases, s.Counts.Cleanups)
	}
	if !slices.Equal(s.StreamHandles, []uint64{3}) {
		t.Fatalf("streams %v: want only the allocation's", s.StreamHandles)
	}
}

// The cleanups a program's release becomes go to every stream known then,
// and a trace whose releases are all cleanups says nothing of the
// capacity.
func TestProgramReleaseCleansEveryStream(t *testing.T) {
	entries := []map[string]any{
		ent("segment_alloc", 0x10_0000_0000, 20*MiB, 3, 1),
		ent("alloc", 0x10_0000_0000, 20*MiB, 3, 2),
		ent("segment_alloc", 0x20_0000_0000, 20*MiB, 4, 3),
		ent("alloc", 0x20_0000_0000, 20*MiB, 4, 4),
		ent("free_completed", 0x20_0000_0000, 20*MiB, 4, 5),
		ent("segment_free", 0x20_0000_0000, 20*MiB, 4, 6),
	}
	s := mustSnapshot(t, snapshotJSON(t, []map[string]any{seg(0x10_0000_0000, 20*MiB, 3, map[string]any{"address": 0x10_0000_0000, "size": 20 * MiB, "state": "active_allocated"})}, entries), SnapshotOptions{})
	var cleaned []int
	for _, e := range s.Events {
		if e.Op == OpCleanup {
			cleaned = append(cleaned, e.Stream)
		}
	}
	if !slices.Equal(cleaned, []int{0, 1}) || s.Capacity.Known() {
		t.Fatalf("cleanups of streams %v, capacity %+v", cleaned, s.Capacity)
	}
	var out strings.Builder
	enc := NewEncoder(&out)
	for _, e := range s.Events {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(out.String(), `"op":"cleanup"`) {
		t.Fatalf("encoded:\n%s", out.String())
	}
}

// servedBy follows get_free_block: the same stream and pool, large enough,
// and max_split_size's two refusals.
func TestServedByFollowsGetFreeBlock(t *testing.T) {
	rel := func(mib uint64, stream uint64) entry {
		return entry{kind: actSegmentSub, rawSize: mib * MiB, stream: stream}
	}
	req := func(bytes uint64, stream uint64) []entry {
		return []entry{{kind: actAlloc, rawSize: bytes, size: bytes, stream: stream}}
	}
	for _, c := range []struct {
		name     string
		run      []entry
		after    []entry
		maxSplit uint64
		want     bool
	}{
		{"large enough", []entry{rel(40, 0)}, req(30*MiB, 0), 0, true},
		{"too small", []entry{rel(20, 0)}, req(30*MiB, 0), 0, false},
		{"another stream", []entry{rel(40, 1)}, req(30*MiB, 0), 0, false},
		{"small request, small segment", []entry{rel(2, 0)}, req(4096, 0), 0, true},
		{"small request, large segment", []entry{rel(20, 0)}, req(4096, 0), 0, false},
		{"large request, small segment", []entry{rel(2, 0)}, req(3*MiB/2, 0), 0, false},
		{"oversize for a smaller request", []entry{rel(300, 0)}, req(30*MiB, 0), 256 * MiB, false},
		{"oversize within 20 MiB", []entry{rel(300, 0)}, req(290*MiB, 0), 256 * MiB, true},
		{"oversize 20 MiB past", []entry{rel(320, 0)}, req(290*MiB, 0), 256 * MiB, false},
		{"no request after", []entry{rel(40, 0)}, nil, 0, false},
	} {
		if got := servedBy(c.run, c.after, c.maxSplit); got != c.want {
			t.Errorf("%s: served %v, want %v", c.name, got, c.want)
		}
	}
}

// recordedCapacity: an oom entry's reserve plus free bytes, raised to
// PyTorch's peak, giving way to a refusal it contradicts; without one the
// tightest refusal; without evidence nothing.
func TestRecordedCapacityWeighsTheEvidence(t *testing.T) {
	retry := ReleaseRun{First: 3, Kind: ReleaseRetry, ReservedBefore: 60 * MiB, Next: 50 * MiB} // refused at 110
	program := ReleaseRun{First: 1, Kind: ReleaseProgram, ReservedBefore: 60 * MiB, Next: 50 * MiB}
	oom := func(entry int, reserved, free uint64) OOMEntry {
		return OOMEntry{Entry: entry, Size: 200 * MiB, Reserved: reserved, DeviceFree: free, HasDeviceFree: true}
	}
	for _, c := range []struct {
		name string
		runs []ReleaseRun
		ooms []OOMEntry
		want RecordedCapacity
	}{
		{"nothing", []ReleaseRun{program}, nil, RecordedCapacity{Low: 80 * MiB, FromEntry: -1}},
		{"a retry", []ReleaseRun{retry}, nil, RecordedCapacity{Bytes: 110*MiB - 1, Low: 80 * MiB, High: 110*MiB - 1, FromEntry: 3}},
		{"an oom entry", []ReleaseRun{retry}, []OOMEntry{oom(7, 20*MiB, 75*MiB)}, RecordedCapacity{Bytes: 95 * MiB, Low: 80 * MiB, High: 110*MiB - 1, FromEntry: 7, FromOOM: true}},
		{"the lowest of two", nil, []OOMEntry{oom(7, 20*MiB, 75*MiB), oom(9, 20*MiB, 70*MiB)}, RecordedCapacity{Bytes: 90 * MiB, Low: 80 * MiB, FromEntry: 9, FromOOM: true}},
		{"raised to the peak", nil, []OOMEntry{oom(7, 20*MiB, 10*MiB)}, RecordedCapacity{Bytes: 80 * MiB, Low: 80 * MiB, FromEntry: 7, FromOOM: true}},
		{"past the refusal", []ReleaseRun{retry}, []OOMEntry{oom(7, 20*MiB, 200*MiB)}, RecordedCapacity{Bytes: 110*MiB - 1, Low: 80 * MiB, High: 110*MiB - 1, FromEntry: 3}},
		{"no device_free", nil, []OOMEntry{{Entry: 5, Size: 70 * MiB, Reserved: 30 * MiB}}, RecordedCapacity{Bytes: 100*MiB - 1, Low: 80 * MiB, High: 100*MiB - 1, FromEntry: 5}},
		{"a refusal below the peak", nil, []OOMEntry{{Entry: 5, Size: 30 * MiB, Reserved: 30 * MiB}}, RecordedCapacity{Low: 80 * MiB, FromEntry: -1}},
	} {
		if got := recordedCapacity(c.runs, c.ooms, 80*MiB); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
