package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const MiB = 1 << 20

// sharedTraces is where the real PyTorch snapshots live, relative to the
// package directory (the test's working directory).
var sharedTraces = filepath.Join("..", "..", "..", "..", "shared", "traces")

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustSnapshot(t testing.TB, data []byte, opts SnapshotOptions) *Snapshot {
	t.Helper()
	s, err := ReadSnapshot(bytes.NewReader(data), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var syntheticFixtures = []string{"synthetic-p2.pickle", "synthetic-p4.pickle", "synthetic-p5.pickle", "synthetic.json", "synthetic-p4.pickle.gz"}

// device0 reads device 0 of the synthetic fixture, which also holds a
// segment of device 1 (data for two devices: ReadSnapshot would ask).
var device0 = SnapshotOptions{ChooseDevice: true, Device: 0}

// TestSnapshotReaderConvertsSyntheticSnapshot pins design §12.8 #67 on the
// fixture written by testdata/synthetic_snapshot.py (see the comments
// there for what each entry exercises).
func TestSnapshotReaderConvertsSyntheticSnapshot(t *testing.T) {
	want := []Event{
		// Prelude at the first entry's time, in address order. 0x1000000 is
		// first seen as a free_requested (rule b) and is still active in
		// `segments`, so the block's requested_size (1000) wins over the
		// free's rounded 1024; the next two are active blocks never seen in
		// the trace (both spellings of awaiting free count as active); the
		// last is first seen as a free_completed with a known size (rule b).
		{Op: OpAlloc, T: 100, ID: 1, Size: 1000, Stream: 0},
		{Op: OpAlloc, T: 100, ID: 2, Size: 512, Stream: 0},
		{Op: OpAlloc, T: 100, ID: 3, Size: 300, Stream: 0},
		{Op: OpAlloc, T: 100, ID: 4, Size: 8192, Stream: 1},
		{Op: OpAlloc, T: 101, ID: 5, Size: 2000000, Stream: 1}, // requested_size preferred
		{Op: OpAlloc, T: 102, ID: 6, Size: 1536, Stream: 2},    // raw stream 3 → dense 2
		{Op: OpFree, T: 103, ID: 5},                            // alloc at a live address implies a free
		{Op: OpAlloc, T: 103, ID: 7, Size: 4096, Stream: 1},
		{Op: OpFree, T: 105, ID: 6},                         // free_completed, not free_requested
		{Op: OpFree, T: 107, ID: 4},                         // the prelude block from rule (b)
		{Op: OpAlloc, T: 110, ID: 8, Size: 2048, Stream: 0}, // no time_us: index 11, raised to 110
		{Op: OpFree, T: 112, ID: 1, Held: true},             // free_requested never completed: held at the dump
		// A segment_free without frames, followed by nothing: the
		// program's empty_cache, a cleanup of every stream known then.
		{Op: OpCleanup, T: 120, Stream: 0}, {Op: OpCleanup, T: 120, Stream: 1}, {Op: OpCleanup, T: 120, Stream: 2},
	}
	wantCounts := SnapshotCounts{
		Entries: 14, Allocs: 4, Frees: 2, IgnoredFrees: 1, FreeRequests: 2, HeldFrees: 1, ImpliedFrees: 1,
		Prelude: 4, PreludeFromSegments: 2, PreludeFromFrees: 2, PreludeBytes: 1000 + 512 + 300 + 8192,
		PendingAtEnd: 1, SegmentEvents: 2, Cleanups: 3, OOMs: 1, Snapshots: 1, Skipped: map[string]int{"annotate": 1},
		SkippedTotal: 1, MissingTimes: 1, ClampedTimes: 1,
	}
	var first *Snapshot
	for _, name := range syntheticFixtures {
		t.Run(name, func(t *testing.T) {
			s := mustSnapshot(t, readFixture(t, name), device0)
			if !slices.Equal(s.Events, want) {
				t.Fatalf("events\n got %v\nwant %v", s.Events, want)
			}
			if !reflect.DeepEqual(s.Counts, wantCounts) {
				t.Fatalf("counts\n got %+v\nwant %+v", s.Counts, wantCounts)
			}
			if s.Streams != 3 || !slices.Equal(s.StreamHandles, []uint64{5, 7, 3}) {
				t.Fatalf("streams %d %v, want dense 0,1,2 for raw 5,7,3", s.Streams, s.StreamHandles)
			}
			// Reserved: segments of device 0 hold 22 MiB at the end; the trace
			// nets +20 − 2 MiB, so 4 MiB before it, 24 MiB at the peak.
			if s.FinalReserved != 22*MiB || s.ReservedAtStart != 4*MiB || s.PeakReserved != 24*MiB || s.ReservedInconsistent {
				t.Fatalf("reserved final %d start %d peak %d", s.FinalReserved, s.ReservedAtStart, s.PeakReserved)
			}
			wantStart := []StartSegment{{Address: 0x1000000, Size: 2 * MiB, Stream: 0, Small: true}, {Address: 0x3000000, Size: 2 * MiB, Stream: 0, Small: true}}
			if !slices.Equal(s.StartSegments, wantStart) {
				t.Fatalf("start segments %+v want %+v", s.StartSegments, wantStart)
			}
			wantPoints := []ReservedPoint{{Entry: 0, Event: 4, T: 100, Bytes: 24 * MiB}, {Entry: 13, Event: 15, T: 120, Bytes: 22 * MiB}}
			if !slices.Equal(s.Reserved, wantPoints) {
				t.Fatalf("reserved timeline %v want %v", s.Reserved, wantPoints)
			}
			if s.PeakLive != 1000+512+300+8192+2000000+1536 || s.FinalLive != 512+300+4096+2048 {
				t.Fatalf("live peak %d final %d", s.PeakLive, s.FinalLive)
			}
			encodes(t, s.Events)
			// Where each entry's frames lie is the input's own (a pickle's
			// frames lists are numbered, a JSON snapshot's are not):
			// frames_test.go reads them.
			s.frames = nil
			if first == nil {
				first = s
			} else if !reflect.DeepEqual(first, s) {
				t.Fatal("differs from the protocol-2 reading")
			}
		})
	}
}

func TestSnapshotWithoutPreludeIgnoresEveryUnseenFree(t *testing.T) {
	s := mustSnapshot(t, readFixture(t, "synthetic-p4.pickle"), SnapshotOptions{ChooseDevice: true, NoPrelude: true})
	if s.Counts.Prelude != 0 || s.Counts.IgnoredFrees != 2 || s.Counts.PendingAtEnd != 0 || s.Counts.UnmatchedFreeRequests != 1 {
		t.Fatalf("counts %+v", s.Counts)
	}
	if s.Events[0] != (Event{Op: OpAlloc, T: 101, ID: 1, Size: 2000000, Stream: 0}) {
		t.Fatalf("first event %v", s.Events[0])
	}
}

func TestSnapshotChosenDeviceUsesItsOwnSegments(t *testing.T) {
	s := mustSnapshot(t, readFixture(t, "synthetic-p4.pickle"), SnapshotOptions{ChooseDevice: true, Device: 1})
	if s.Device != 1 || len(s.Events) != 1 || s.Events[0].Size != 512 || s.FinalReserved != 2*MiB || s.Segments != 1 {
		t.Fatalf("device 1: %+v", s)
	}
	_, err := ReadSnapshot(bytes.NewReader(readFixture(t, "synthetic-p4.pickle")), SnapshotOptions{ChooseDevice: true, Device: 2})
	var none *NoDeviceDataError
	if !errors.As(err, &none) || !errors.Is(err, ErrNoDeviceData) || len(none.Devices) != 2 || !strings.Contains(err.Error(), "device 2 has no data") {
		t.Fatalf("device 2: %v, want a NoDeviceDataError listing devices 0 and 1", err)
	}
}

func TestSnapshotReaderSurvivesEveryTruncation(t *testing.T) {
	for _, name := range []string{"synthetic-p2.pickle", "synthetic-p5.pickle", "synthetic.json", "synthetic-p4.pickle.gz"} {
		data := readFixture(t, name)
		for n := range len(data) {
			if _, err := ReadSnapshot(bytes.NewReader(data[:n]), SnapshotOptions{}); err == nil {
				t.Fatalf("%s truncated to %d bytes was accepted", name, n)
			}
		}
	}
}

// pickleOf hand-assembles a protocol-4 pickle: PROTO 4, body, STOP.
func pickleOf(body ...byte) []byte {
	return append(append([]byte{0x80, 4}, body...), '.')
}

func TestUnpicklerRefusesGlobalsAndObjectConstruction(t *testing.T) {
	refused := map[string][]byte{
		"GLOBAL":       append([]byte{0x80, 2, 'c'}, "os\nsystem\n"...),
		"STACK_GLOBAL": pickleOf(0x8c, 2, 'o', 's', 0x8c, 6, 's', 'y', 's', 't', 'e', 'm', 0x93),
		"REDUCE":       pickleOf('N', ')', 'R'),
		"BUILD":        pickleOf('}', '}', 'b'),
		"INST":         append([]byte{'(', 'i'}, "collections\nOrderedDict\n"...),
		"OBJ":          pickleOf('(', 'N', 'o'),
		"NEWOBJ":       pickleOf('N', ')', 0x81),
		"NEWOBJ_EX":    pickleOf('N', ')', '}', 0x92),
		"EXT1":         pickleOf(0x82, 1),
		"EXT2":         pickleOf(0x83, 1, 0),
		"EXT4":         pickleOf(0x84, 1, 0, 0, 0),
		"PERSID":       append([]byte{'P'}, "x\n."...),
		"BINPERSID":    pickleOf('N', 'Q'),
	}
	for name, p := range refused {
		t.Run(name, func(t *testing.T) {
			_, err := ReadSnapshot(bytes.NewReader(p), SnapshotOptions{})
			if !errors.Is(err, ErrPickleGlobal) || !strings.Contains(err.Error(), name) {
				t.Fatalf("got %v, want ErrPickleGlobal naming %s", err, name)
			}
		})
	}
}

func TestUnpicklerRejectsCorruptInput(t *testing.T) {
	cases := map[string][]byte{
		"protocol 6":             {0x80, 6, 'N', '.'},
		"no STOP":                {0x80, 4, 'N'},
		"stack underflow":        pickleOf('a'),
		"STOP on empty stack":    {0x80, 4, '.'},
		"huge BINUNICODE8":       pickleOf(0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f),
		"huge FRAME":             pickleOf(0x95, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0),
		"negative LONG4":         pickleOf(0x8b, 0xff, 0xff, 0xff, 0xff),
		"memo miss":              pickleOf('h', 3),
		"append to dict":         pickleOf('}', 'N', 'a'),
		"setitem on list":        pickleOf(']', 'N', 'N', 's'),
		"odd SETITEMS":           pickleOf('}', '(', 'N', 'u'),
		"TUPLE without mark":     pickleOf('N', 't'),
		"TUPLE3 across mark":     pickleOf('N', 'N', '(', 'N', 0x87),
		"invalid utf-8":          pickleOf(0x8c, 1, 0xff),
		"unknown opcode":         pickleOf(0xfe),
		"out-of-band buffer":     pickleOf(0x97),
		"top level an integer":   pickleOf('K', 7),
		"list of integers":       pickleOf(']', 'K', 7, 'a'),
		"no device_traces":       pickleOf('}'),
		"empty":                  {},
		"bad text int":           {'I', 'x', '\n', '.'},
		"gzip garbage":           {0x1f, 0x8b, 1, 2, 3},
		"json garbage":           []byte(`{"device_traces": [`),
		"device_traces not list": []byte(`{"device_traces": 3}`),
		"entry not a dict":       []byte(`{"device_traces": [[1]]}`),
		"entry without action":   []byte(`{"device_traces": [[{"addr": 1}]]}`),
		"alloc without addr":     []byte(`{"device_traces": [[{"action": "alloc", "size": 5}]]}`),
		"alloc without size":     []byte(`{"device_traces": [[{"action": "alloc", "addr": 5}]]}`),
		"negative size":          []byte(`{"device_traces": [[{"action": "alloc", "addr": 5, "size": -1}]]}`),
		"size above 2^62":        []byte(`{"device_traces": [[{"action": "alloc", "addr": 5, "size": 4611686018427387905}]]}`),
		"negative addr":          []byte(`{"device_traces": [[{"action": "free_completed", "addr": -5}]]}`),
		"string time":            []byte(`{"device_traces": [[{"action": "alloc", "addr": 5, "size": 1, "time_us": "now"}]]}`),
		"negative time":          []byte(`{"device_traces": [[{"action": "alloc", "addr": 5, "size": 1, "time_us": -1}]]}`),
		"float stream":           []byte(`{"device_traces": [[{"action": "alloc", "addr": 5, "size": 1, "stream": 1.5}]]}`),
		"segments not list":      []byte(`{"device_traces": [], "segments": {}}`),
		"block address missing":  []byte(`{"device_traces": [], "segments": [{"total_size": 1, "blocks": [{"state": "active_allocated", "size": 1}]}]}`),
		"live bytes overflow":    []byte(`{"device_traces": [[` + strings.Repeat(`{"action": "alloc", "addr": 1, "size": 4611686018427387904},{"action": "alloc", "addr": 2, "size": 4611686018427387904},`, 1) + `{"action": "alloc", "addr": 3, "size": 4611686018427387904}]]}`),
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ReadSnapshot(bytes.NewReader(p), SnapshotOptions{})
			if !errors.Is(err, ErrPickle) && !errors.Is(err, ErrSnapshot) && !errors.Is(err, ErrNotSnapshot) {
				t.Fatalf("got %v, want ErrPickle, ErrSnapshot or ErrNotSnapshot", err)
			}
		})
	}
}

func TestSnapshotErrorsNameTheEntryIndex(t *testing.T) {
	_, err := ReadSnapshot(strings.NewReader(`{"device_traces": [[{"action": "snapshot"}, {"action": "alloc", "addr": 5, "size": -1}]]}`), SnapshotOptions{})
	if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "entry 1") {
		t.Fatalf("got %v", err)
	}
}

func TestSnapshotMaxBytesBoundsTheInput(t *testing.T) {
	data := readFixture(t, "synthetic-p4.pickle.gz")
	if _, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{MaxBytes: 1000}); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("decompressed above MaxBytes: %v", err)
	}
	if _, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{MaxBytes: 100}); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("compressed above MaxBytes: %v", err)
	}
}

func TestUnpicklerDecodesPlainValues(t *testing.T) {
	cases := []struct {
		name string
		body []byte
		want any
	}{
		{"BININT negative", []byte{'J', 0xfe, 0xff, 0xff, 0xff}, int64(-2)},
		{"BININT2", []byte{'M', 0x34, 0x12}, int64(0x1234)},
		{"LONG1 zero length", []byte{0x8a, 0}, int64(0)},
		{"LONG1 negative", []byte{0x8a, 2, 0x00, 0xff}, int64(-256)},
		{"LONG1 uint64", []byte{0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0}, new(big.Int).Lsh(big.NewInt(1), 63)},
		{"LONG4", []byte{0x8b, 1, 0, 0, 0, 5}, int64(5)},
		{"BINFLOAT", []byte{'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}, 1.5},
		{"SHORT_BINBYTES", []byte{'C', 2, 'h', 'i'}, []byte("hi")},
		{"BINUNICODE8", []byte{0x8d, 2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i'}, "hi"},
		{"TUPLE1", []byte{'N', 0x85}, pyTuple{nil}},
		{"NEWTRUE", []byte{0x88}, true},
		{"text INT bool", []byte{'I', '0', '1', '\n'}, true},
		{"text LONG", []byte{'L', '1', '2', 'L', '\n'}, int64(12)},
		{"DUP and TUPLE2", []byte{'K', 7, '2', 0x86}, pyTuple{int64(7), int64(7)}},
		{"LIST from mark", []byte{'(', 'K', 1, 'K', 2, 'l'}, &pyList{items: []any{int64(1), int64(2)}, depth: 1}},
		{"memo shares a list", []byte{']', 0x94, '0', 'h', 0, 'K', 3, 'a', 'h', 0, 0x86}, pyTuple{&pyList{items: []any{int64(3)}, depth: 1}, &pyList{items: []any{int64(3)}, depth: 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := unpickle(pickleOf(c.body...))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v want %#v", got, c.want)
			}
		})
	}
}

func TestUnpicklerMemoSharesMutations(t *testing.T) {
	// [] MEMOIZE; BINGET 0 then APPEND 3 through the copy: both are one list.
	v, err := unpickle(pickleOf(']', 0x94, 'h', 0, 'K', 3, 'a', 0x86))
	if err != nil {
		t.Fatal(err)
	}
	tup := v.(pyTuple)
	if tup[0].(*pyList) != tup[1].(*pyList) || len(tup[0].(*pyList).items) != 1 {
		t.Fatalf("memo did not share the list: %#v", v)
	}
}

// openShared opens a real PyTorch snapshot, skipping when the shared traces
// are not checked out next to the module.
func openShared(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(sharedTraces, name))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("shared PyTorch traces not present at %s (they live outside the repository)", sharedTraces)
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// sharedFigures were computed independently with Python's pickle module
// (pickle.load, then a direct count: active unseen blocks of `segments` by
// requested_size, plus alloc minus free_completed; segment totals minus the
// net of segment_* entries).
var sharedFigures = []struct {
	name                           string
	events, allocs, frees, prelude int
	peakLive, finalLive            uint64
	startReserved, peakReserved    uint64
}{
	{"transformer-ctx128-forward.pickle", 3537, 2058, 1155, 324, 19352504320, 19352504320, 13763608576, 19667091456},
	{"transformer-ctx128-fullstep.pickle", 12989, 6771, 5894, 324, 54802667524, 54597857284, 13763608576, 61111009280},
	{"unet-snapshot.pickle", 3892, 1935, 1926, 31, 108258676, 48748928, 25165824, 134217728},
}

func TestSharedSnapshotsConvertToTheFiguresPythonComputes(t *testing.T) {
	for _, f := range sharedFigures {
		t.Run(f.name, func(t *testing.T) {
			s := mustSnapshot(t, openShared(t, f.name), SnapshotOptions{})
			c := s.Counts
			if len(s.Events) != f.events || c.Allocs != f.allocs || c.Frees != f.frees || c.Prelude != f.prelude {
				t.Fatalf("events %d allocs %d frees %d prelude %d", len(s.Events), c.Allocs, c.Frees, c.Prelude)
			}
			if s.PeakLive != f.peakLive || s.FinalLive != f.finalLive {
				t.Fatalf("live peak %d final %d", s.PeakLive, s.FinalLive)
			}
			if s.ReservedAtStart != f.startReserved || s.PeakReserved != f.peakReserved {
				t.Fatalf("reserved start %d peak %d", s.ReservedAtStart, s.PeakReserved)
			}
			var startBytes uint64
			for _, seg := range s.StartSegments {
				startBytes += seg.Size
			}
			if startBytes != s.ReservedAtStart {
				t.Fatalf("start segments hold %d, reserved at start %d", startBytes, s.ReservedAtStart)
			}
			var prev int64
			for i, e := range s.Events {
				if err := e.Validate(); err != nil || e.T < prev {
					t.Fatalf("event %d %v: %v", i, e, err)
				}
				prev = e.T
			}
			encodes(t, s.Events)
		})
	}
}

// TestFullstepPeakLiveAgreesWithDirectCount computes the peak live bytes of
// transformer-ctx128-fullstep two independent ways: the converter's
// PeakLive, and a direct walk over the decoded pickle counting alloc and
// free_completed by address plus the prelude blocks.
func TestFullstepPeakLiveAgreesWithDirectCount(t *testing.T) {
	data := openShared(t, "transformer-ctx128-fullstep.pickle")
	s := mustSnapshot(t, data, SnapshotOptions{})

	root, err := unpickle(data)
	if err != nil {
		t.Fatal(err)
	}
	top := root.(*pyDict)
	tracesV, _ := top.get("device_traces")
	traces, _ := asList(tracesV)
	entries, _ := asList(traces[0])
	field := func(d *pyDict, k string) any { v, _ := d.get(k); return v }
	seen := map[int64]bool{}
	for _, ev := range entries {
		d := ev.(*pyDict)
		switch field(d, "action") {
		case "alloc", "free_requested", "free_completed":
			seen[field(d, "addr").(int64)] = true
		}
	}
	var cur uint64
	segs, _ := asList(field(top, "segments"))
	for _, sv := range segs {
		blocks, _ := asList(field(sv.(*pyDict), "blocks"))
		for _, bv := range blocks {
			b := bv.(*pyDict)
			state := field(b, "state").(string)
			if (state == "active_allocated" || state == "active_awaiting_free" || state == "active_pending_free") && !seen[field(b, "address").(int64)] {
				cur += uint64(field(b, "requested_size").(int64))
			}
		}
	}
	peak := cur
	live := map[int64]uint64{}
	for _, ev := range entries {
		d := ev.(*pyDict)
		addr, _ := field(d, "addr").(int64)
		switch field(d, "action") {
		case "alloc":
			cur -= live[addr]
			live[addr] = uint64(field(d, "size").(int64))
			cur += live[addr]
			peak = max(peak, cur)
		case "free_completed":
			cur -= live[addr]
			delete(live, addr)
		}
	}
	if peak != s.PeakLive {
		t.Fatalf("direct count %d, converter %d", peak, s.PeakLive)
	}
	if peak != sharedFigures[1].peakLive {
		t.Fatalf("direct count %d, Python %d", peak, sharedFigures[1].peakLive)
	}
}

// entryWithAddr is a protocol-4 pickle of {device_traces: [[{action:
// alloc, size: 512, addr: <addr>}]]} where addr is the given opcodes.
func entryWithAddr(addr []byte) []byte {
	su := func(s string) []byte { return append([]byte{0x8c, byte(len(s))}, s...) }
	var b []byte
	b = append(b, 0x80, 4, '}')
	b = append(b, su("device_traces")...)
	b = append(b, ']', ']', '}')
	b = append(b, su("action")...)
	b = append(b, su("alloc")...)
	b = append(b, 's')
	b = append(b, su("size")...)
	b = append(b, 'M', 0, 2, 's')
	b = append(b, su("addr")...)
	b = append(b, addr...)
	b = append(b, 's', 'a', 'a', 's', '.')
	return b
}

// Values nested deeper than MaxNesting are refused while decoding: a tuple
// nested two million levels deep once overflowed the stack when an error
// message printed it.
func TestDeepNestingIsRefusedWithAClearError(t *testing.T) {
	deep := map[string][]byte{
		"tuple": entryWithAddr(append([]byte{')'}, bytes.Repeat([]byte{0x85}, 2_000_000)...)),
		"list":  entryWithAddr(append(bytes.Repeat([]byte{'('}, 5000), bytes.Repeat([]byte{'l'}, 5000)...)),
	}
	// Dicts: {"k": {"k": … {}}}, each level MARK "k" GET(previous) DICT.
	dict := []byte{'}', 0x94, '0'}
	for i := range uint32(2000) {
		dict = append(dict, '(', 0x8c, 1, 'k', 'j', byte(i), byte(i>>8), 0, 0, 'd', 0x94, '0')
	}
	deep["dict"] = entryWithAddr(append(dict, 'j', 0xd0, 0x07, 0, 0))
	// A list extended with itself 2000 times.
	deep["appends"] = entryWithAddr(append([]byte{']', 0x94}, bytes.Repeat([]byte{'h', 0, 'a'}, 2000)...))
	for name, p := range deep {
		t.Run(name, func(t *testing.T) {
			_, err := ReadSnapshot(bytes.NewReader(p), SnapshotOptions{})
			if !errors.Is(err, ErrPickle) || !strings.Contains(err.Error(), "nesting deeper than 1000") {
				t.Fatalf("got %v, want ErrPickle about nesting", err)
			}
		})
	}
	// The tuple, the entry dict, two lists and the top dict: 5 levels.
	ok := entryWithAddr(append([]byte{')'}, bytes.Repeat([]byte{0x85}, MaxNesting-5)...))
	if _, err := ReadSnapshot(bytes.NewReader(ok), SnapshotOptions{}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "entry 0: addr tuple of 1 is not an address") {
		t.Fatalf("nesting of exactly MaxNesting: %v", err)
	}
	j := `{"device_traces": ` + strings.Repeat("[", MaxNesting+1) + strings.Repeat("]", MaxNesting+1) + `}`
	if _, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "nesting deeper than 1000") {
		t.Fatalf("deep JSON: %v", err)
	}
}

// A 64-level DAG of tuples (each level the pair (T, T) of the one below)
// has 2^64 paths: an error must describe it without walking it.
func TestSharedValuesAreDescribedWithoutBeingWalked(t *testing.T) {
	dag := []byte{')', 0x94, '0'}
	for k := range 64 {
		dag = append(dag, 'h', byte(k), 'h', byte(k), 0x86, 0x94, '0')
	}
	dag = append(dag, 'h', 64)
	_, err := ReadSnapshot(bytes.NewReader(entryWithAddr(dag)), SnapshotOptions{})
	if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "entry 0: addr tuple of 2 is not an address") {
		t.Fatalf("got %v", err)
	}
}

func TestDescribeNeverPrintsContainers(t *testing.T) {
	long := strings.Repeat("é", 100)
	for _, c := range []struct {
		v    any
		want string
	}{
		{nil, "None"},
		{true, "true"},
		{int64(-5), "-5"},
		{1.5, "1.5"},
		{"addr", `"addr"`},
		{long, `"` + strings.Repeat("é", 20) + `"… (string of 200 bytes)`},
		{[]byte("xyz"), "bytes of 3"},
		{new(big.Int).Lsh(big.NewInt(1), 100), "integer of 101 bits"},
		{&pyList{items: []any{pyTuple{}, int64(1)}}, "list of 2"},
		{pyTuple{&pyList{}}, "tuple of 1"},
		{&pyDict{keys: []any{"a"}, vals: []any{nil}}, "dict of 1"},
		{struct{}{}, "struct {}"},
	} {
		if got := describe(c.v); got != c.want {
			t.Errorf("describe(%T) = %q, want %q", c.v, got, c.want)
		}
	}
}

// Integer literals longer than 40 digits are refused (decimal conversion
// is quadratic: megabytes of digits took seconds).
func TestLongIntegerLiteralsAreRefused(t *testing.T) {
	digits := strings.Repeat("7", 4_000_000)
	for _, op := range []byte{'I', 'L'} {
		p := append(append([]byte{op}, digits...), '\n', '.')
		if _, err := ReadSnapshot(bytes.NewReader(p), SnapshotOptions{}); !errors.Is(err, ErrPickle) || !strings.Contains(err.Error(), "integer of 4000000 digits") {
			t.Fatalf("text %c: %v", op, err)
		}
	}
	prefix := `{"device_traces": [[{"action": "alloc", "addr": `
	j := prefix + digits + `, "size": 1}]]}`
	if _, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), fmt.Sprintf("byte offset %d has more than 40 digits", len(prefix))) {
		t.Fatalf("json: %v", err)
	}
	// 40 digits decode (as a big integer: not an address).
	forty := strings.Repeat("9", 40)
	v, err := unpickle(pickleOf(append(append([]byte{'L'}, forty...), 'L', '\n')...))
	if b, ok := v.(*big.Int); err != nil || !ok || b.String() != forty {
		t.Fatalf("40-digit LONG: %v %v", v, err)
	}
	j = `{"device_traces": [[{"action": "alloc", "addr": ` + forty + `, "size": 1}]]}`
	if _, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "entry 0: addr integer of 133 bits is not an address") {
		t.Fatalf("40-digit json addr: %v", err)
	}
	// Digits inside strings are not numbers.
	j = `{"device_traces": [[{"action": "` + digits[:100] + `\"` + digits[:100] + `"}]]}`
	if _, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{}); err != nil {
		t.Fatalf("digits in a string: %v", err)
	}
}

// More distinct stream handles than MaxStreams are refused naming the entry.
func TestSnapshotStreamHandlesAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"device_traces": [[`)
	for i := range MaxStreams + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"action": "alloc", "addr": %d, "size": 512, "stream": %d}`, 4096*(i+1), 1_000_000+i)
	}
	b.WriteString(`]]}`)
	_, err := ReadSnapshot(strings.NewReader(b.String()), SnapshotOptions{})
	if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), fmt.Sprintf("entry %d:", MaxStreams)) {
		t.Fatalf("got %v, want ErrSnapshot naming entry %d", err, MaxStreams)
	}
	// MaxStreams of them convert.
	s := b.String()
	s = s[:strings.LastIndex(s, `,{"action"`)] + `]]}`
	snap, err := ReadSnapshot(strings.NewReader(s), SnapshotOptions{})
	if err != nil || snap.Streams != MaxStreams {
		t.Fatalf("MaxStreams handles: %v", err)
	}
}

// Segment totals that add past 2^62 are refused naming the segment, never
// wrapped.
func TestSegmentTotalsNeverWrap(t *testing.T) {
	seg := `{"device": 0, "total_size": 4611686018427387904, "blocks": []}`
	j := `{"device_traces": [], "segments": [{"device": 0, "total_size": 1048576}, ` + strings.Repeat(seg+",", 4) + seg + `]}`
	if _, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "segment 1:") {
		t.Fatalf("got %v", err)
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// A gzip bomb of zeros is refused at its first byte, before the rest is
// decompressed; the default bound is 1 GiB and MaxBytes raises it.
func TestGzipBombIsRefusedAtTheFirstByte(t *testing.T) {
	// 1 GiB of zeros: one gzip member of 1 MiB zeros, 1024 times over.
	var member bytes.Buffer
	zw := gzip.NewWriter(&member)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	z := bytes.Repeat(member.Bytes(), 1024)
	cr := &countingReader{r: bytes.NewReader(z)}
	_, err := ReadSnapshot(cr, SnapshotOptions{})
	if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "starts with byte 0x00") {
		t.Fatalf("got %v", err)
	}
	if cr.n > 256<<10 {
		t.Fatalf("read %d of %d compressed bytes before refusing", cr.n, len(z))
	}
	if DefaultMaxSnapshotBytes != 1<<30 {
		t.Fatalf("DefaultMaxSnapshotBytes = %d", DefaultMaxSnapshotBytes)
	}
	// Leading white space is JSON's, and counts against MaxBytes.
	j := strings.Repeat(" ", 100) + `{"device_traces": []}`
	if _, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{}); err != nil {
		t.Fatalf("JSON after white space: %v", err)
	}
	if _, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{MaxBytes: 50}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "larger than the limit of 50 bytes") {
		t.Fatalf("JSON above MaxBytes: %v", err)
	}
	if _, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{MaxBytes: int64(len(j))}); err != nil {
		t.Fatalf("JSON at MaxBytes: %v", err)
	}
}

// PyTorch's reserved bytes before the trace and at its peak are worked out
// without wrapping and refused above 2^62; up to 2^62 every point of the
// timeline is exact. (The timeline used to add start and the running net in
// int64: a point past 2^63 wrapped negative and was clamped to 0, below a
// PeakReserved that was right only by the wrap.)
func TestReservedTimelineNeverWraps(t *testing.T) {
	seg := func(action string, addr int, size uint64) string {
		return fmt.Sprintf(`{"action": %q, "addr": %d, "size": %d}`, action, addr, size)
	}
	snap := func(total uint64, entries ...string) string {
		return `{"device_traces": [[` + strings.Join(entries, ", ") +
			fmt.Sprintf(`]], "segments": [{"device": 0, "address": 9, "total_size": %d}]}`, total)
	}
	const e62 = uint64(1) << 62
	for _, tc := range []struct {
		name, json, want string
	}{
		{"peak above 2^63", snap(e62-1,
			seg("segment_alloc", 1, e62), seg("segment_alloc", 2, e62-1),
			seg("segment_free", 1, e62), seg("segment_free", 2, e62-1)),
			"entry 1: reserved bytes reach 13835058055282163710"},
		{"peak just above 2^62", snap(1, seg("segment_alloc", 1, e62), seg("segment_free", 1, e62)),
			"entry 0: reserved bytes reach 4611686018427387905"},
		{"start above 2^62", snap(e62-1, seg("segment_free", 1, e62), seg("segment_free", 2, e62)),
			"reserved bytes before the trace exceed 2^62"},
	} {
		if _, err := ReadSnapshot(strings.NewReader(tc.json), SnapshotOptions{}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want ErrSnapshot containing %q", tc.name, err, tc.want)
		}
	}
	// At the bound every figure is exact.
	s, err := ReadSnapshot(strings.NewReader(snap(e62/2,
		seg("segment_alloc", 1, e62/2), seg("segment_free", 1, e62/2))), SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.ReservedAtStart != e62/2 || s.PeakReserved != e62 || len(s.Reserved) != 2 ||
		s.Reserved[0].Bytes != e62 || s.Reserved[1].Bytes != e62/2 || s.ReservedInconsistent {
		t.Fatalf("start %d peak %d points %+v inconsistent %v", s.ReservedAtStart, s.PeakReserved, s.Reserved, s.ReservedInconsistent)
	}
}
