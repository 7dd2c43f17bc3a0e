package trace

import (
	"bytes"
	"slices"
	"testing"
)

func FuzzDecodeJSONL(f *testing.F) {
	f.Add([]byte(`{"format":"gpumem-trace","version":1,"source":"x","streams":1}
{"op":"alloc","t":1,"id":1,"size":10,"stream":0}
{"op":"free","t":2,"id":1}
`))
	f.Add([]byte(`{"op":"window","t":0,"stream":0,"mode":"persistent"}
{"op":"capture","t":1,"stream":2,"phase":"launch","graph":3,"x":[1]}
{"op":"cleanup","t":1,"stream":2}`))
	f.Add([]byte(`{"op":"alloc","t":1,"id":1,"size":10,"stream":0}
{"op":"free","t":2,"id":1,"held":true}
{"op":"hold","t":2,"stream":1}
{"op":"release","t":3,"id":1}
{"op":"pass","t":4,"stream":1}
`))
	f.Add([]byte(`{"op":"nope","t":0}`))
	f.Add([]byte("{\"op\":\"alloc\",\"t\":1,\"id\":1,\"size\":-1,\"stream\":0}\n\n"))
	f.Add(readFixture(f, "default.jsonl")[:2000])
	f.Fuzz(func(t *testing.T, data []byte) {
		// Memory: decoding allocates a bounded line buffer and a bounded
		// amount per line, so within a multiple of the input.
		if allocated := allocatedBy(func() {
			for range Decode(bytes.NewReader(data)) {
			}
		}); allocated > jsonlAllocBound(len(data)) {
			t.Fatalf("decoding %d bytes allocated %d bytes, more than the bound %d", len(data), allocated, jsonlAllocBound(len(data)))
		}
		var events []Event
		for e, err := range Decode(bytes.NewReader(data)) {
			if err != nil {
				break
			}
			if err := e.Validate(); err != nil {
				t.Fatalf("Decode yielded an invalid event %v: %v", e, err)
			}
			events = append(events, e)
		}
		// What decodes re-encodes, and decodes back to the same events.
		var buf bytes.Buffer
		enc := NewEncoder(&buf)
		for _, e := range events {
			if err := enc.Encode(e); err != nil {
				t.Fatalf("re-encoding %v: %v", e, err)
			}
		}
		var again []Event
		for e, err := range Decode(&buf) {
			if err != nil {
				t.Fatalf("decoding re-encoded events: %v", err)
			}
			again = append(again, e)
		}
		if !slices.Equal(events, again) {
			t.Fatalf("round trip changed events")
		}
	})
}

func FuzzReadSnapshot(f *testing.F) {
	for _, name := range append(slices.Clone(syntheticFixtures), formatFixtures...) {
		f.Add(readFixture(f, name))
	}
	f.Add(pickleOf('}', 0x8c, 13, 'd', 'e', 'v', 'i', 'c', 'e', '_', 't', 'r', 'a', 'c', 'e', 's', ']', 's'))
	f.Add(append([]byte{0x80, 2, 'c'}, "os\nsystem\n"...))
	f.Add([]byte(`{"device_traces": [[{"action": "alloc", "addr": 5, "size": 7}, {"action": "free_completed", "addr": 6, "size": 512}]]}`))
	// A stack of 256 Ki empty dicts: 80 bytes held per input byte, refused
	// by the held-bytes limit (20 MiB allocated before it).
	f.Add(pickleOf(bytes.Repeat([]byte("}"), 256<<10)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var snaps []*Snapshot
		var err error
		// Memory: whatever the input, what reading it (every device with
		// data) allocates stays within the held-bytes limit's bound for
		// its size (limits.go), with room for growth and the fixed
		// buffers.
		if allocated := allocatedBy(func() {
			snaps, err = ReadSnapshotDevices(bytes.NewReader(data), SnapshotOptions{MaxBytes: 1 << 20})
		}); allocated > snapshotAllocBound(len(data)) {
			t.Fatalf("reading %d bytes allocated %d bytes, more than the bound %d (error: %v)", len(data), allocated, snapshotAllocBound(len(data)), err)
		}
		if err != nil {
			return
		}
		for _, s := range snaps {
			checkFuzzedSnapshot(t, data, s)
		}
	})
}

// checkFuzzedSnapshot checks one device's conversion of a fuzzed input:
// its frames read again within the bound, and its events a valid native
// trace with the figures it reports.
func checkFuzzedSnapshot(t *testing.T, data []byte, s *Snapshot) {
	t.Helper()
	var err error
	// Reading the frames of every entry again is bounded the same way,
	// and gives only entries of the trace, each as long as recorded.
	all := make([]int, s.Counts.Entries)
	for i := range all {
		all[i] = i
	}
	var frames map[int][]TorchFrame
	if allocated := allocatedBy(func() {
		frames, err = s.ReadFrames(bytes.NewReader(data), all)
	}); allocated > snapshotAllocBound(len(data)) {
		t.Fatalf("reading the frames of %d bytes allocated %d bytes, more than the bound %d (error: %v)", len(data), allocated, snapshotAllocBound(len(data)), err)
	}
	if err != nil {
		t.Fatalf("the frames of a snapshot just read: %v", err)
	}
	for i, fs := range frames {
		if i < 0 || i >= s.Counts.Entries || len(fs) != int(s.frames[i].n) {
			t.Fatalf("entry %d: %d frames, %d recorded", i, len(fs), s.frames[i].n)
		}
	}
	// A successful conversion is a valid native trace: valid events,
	// times non-decreasing, unique IDs, frees of live IDs only, dense
	// streams, and the live-bytes figures it reports.
	live := map[uint64]uint64{}
	seen := map[uint64]bool{}
	var cur, peak uint64
	var prev int64
	for i, e := range s.Events {
		if err := e.Validate(); err != nil {
			t.Fatalf("event %d invalid: %v", i, err)
		}
		if e.T < prev {
			t.Fatalf("event %d: time %d after %d", i, e.T, prev)
		}
		prev = e.T
		switch e.Op {
		case OpAlloc:
			if seen[e.ID] || e.Stream >= s.Streams {
				t.Fatalf("event %d: id %d reused or stream %d ≥ %d", i, e.ID, e.Stream, s.Streams)
			}
			seen[e.ID] = true
			live[e.ID] = e.Size
			cur += e.Size
			peak = max(peak, cur)
		case OpFree:
			sz, ok := live[e.ID]
			if !ok {
				t.Fatalf("event %d frees id %d which is not live", i, e.ID)
			}
			delete(live, e.ID)
			cur -= sz
		case OpCleanup:
			if e.Stream >= s.Streams {
				t.Fatalf("event %d: cleanup of stream %d ≥ %d", i, e.Stream, s.Streams)
			}
		default:
			t.Fatalf("event %d: op %v from a snapshot", i, e.Op)
		}
	}
	// Every release run that became cleanups points at its first, and
	// the cleanups are those.
	cleanups := 0
	for _, r := range s.Releases {
		if r.Cleanup < 0 {
			continue
		}
		if !r.Kind.Cleanup() || r.Cleanup >= len(s.Events) || s.Events[r.Cleanup].Op != OpCleanup {
			t.Fatalf("release run %+v: cleanup event %d is not one", r, r.Cleanup)
		}
		for j := r.Cleanup; j < len(s.Events) && s.Events[j].Op == OpCleanup && s.EventEntries[j] == int32(r.First); j++ {
			cleanups++
		}
	}
	if cleanups != s.Counts.Cleanups {
		t.Fatalf("%d cleanup events of release runs, %d counted", cleanups, s.Counts.Cleanups)
	}
	if c := s.Capacity; c.Known() && (c.Bytes < c.Low || (c.High != 0 && c.Bytes > c.High)) {
		t.Fatalf("recorded capacity %+v outside its bounds", c)
	}
	if peak != s.PeakLive || cur != s.FinalLive {
		t.Fatalf("live peak %d final %d, reported %d %d", peak, cur, s.PeakLive, s.FinalLive)
	}
	if s.PeakReserved < s.ReservedAtStart || s.PeakReserved > MaxSize {
		t.Fatalf("peak reserved %d below start %d or above 2^62", s.PeakReserved, s.ReservedAtStart)
	}
	for i, p := range s.Reserved {
		if p.Bytes > s.PeakReserved {
			t.Fatalf("reserved point %d: %d bytes above the peak %d", i, p.Bytes, s.PeakReserved)
		}
	}
}

// snapshotAllocBound is the most that reading an n-byte snapshot may
// allocate under a limit of 1 MiB: three times the held-bytes budget (the
// floor of 1 MiB plus the JSON allowance, the larger, per byte: room for
// slices growing and the copies encoding/json makes) plus 1 MiB of fixed
// buffers (the read window, bufio, gzip).
func snapshotAllocBound(n int) uint64 {
	return uint64(3*(minHeldFloor+jsonHeldPerInputByte*n) + 1<<20)
}

// jsonlAllocBound is the most that decoding an n-byte JSONL trace may
// allocate: the line buffer grown to MaxLineBytes by doubling, and 64 bytes
// per input byte for the lines' values.
func jsonlAllocBound(n int) uint64 {
	return uint64(2*MaxLineBytes + 64<<10 + 64*n)
}
