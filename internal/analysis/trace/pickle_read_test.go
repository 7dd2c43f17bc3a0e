package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// pk assembles protocol-4 pickle bodies for the tests below.
type pk []byte

func (p pk) str(s string) pk { return append(append(p, 0x8c, byte(len(s))), s...) }
func (p pk) op(b ...byte) pk { return append(p, b...) }
func (p pk) int1(v byte) pk  { return append(p, 'K', v) }
func (p pk) get(i uint32) pk { return binary.LittleEndian.AppendUint32(append(p, 'j'), i) }
func (p pk) done() []byte    { return append(append([]byte{0x80, 4}, p...), '.') }

// frameDict appends {"name": name, "line": 7}, memoized (MEMOIZE) at the
// next memo index.
func (p pk) frameDict(name string) pk {
	return p.op('}', 0x94, '(').str("name").str(name).str("line").int1(7).op('u')
}

// TestCutPickleSaysTruncatedAtByteN: every cut of a pickle is an ErrPickle
// naming the byte where the input ends, whether the reader hands the input
// over at once or a byte at a time (the window then refills at every byte).
func TestCutPickleSaysTruncatedAtByteN(t *testing.T) {
	for _, name := range []string{"synthetic-p2.pickle", "synthetic-p4.pickle", "synthetic-p5.pickle"} {
		data := readFixture(t, name)
		for n := 1; n < len(data); n++ {
			want := fmt.Sprintf("truncated at byte %d", n)
			_, err := ReadSnapshot(bytes.NewReader(data[:n]), SnapshotOptions{})
			if !errors.Is(err, ErrPickle) || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s cut at %d: %v, want ErrPickle saying %q", name, n, err, want)
			}
			_, err = ReadSnapshot(iotest.OneByteReader(bytes.NewReader(data[:n])), SnapshotOptions{})
			if !errors.Is(err, ErrPickle) || !strings.Contains(err.Error(), want) {
				t.Fatalf("%s cut at %d, read a byte at a time: %v, want ErrPickle saying %q", name, n, err, want)
			}
		}
		// In memory (the unpickler's other input) the same holds.
		if _, err := unpickle(data[:len(data)-1]); !errors.Is(err, ErrPickle) || !strings.Contains(err.Error(), fmt.Sprintf("truncated at byte %d", len(data)-1)) {
			t.Fatalf("%s in memory: %v", name, err)
		}
	}
}

// TestStreamedReadingEqualsWholeReading: the window's refills, slides and
// growth change nothing, whatever sizes the reader hands over.
func TestStreamedReadingEqualsWholeReading(t *testing.T) {
	for _, name := range syntheticFixtures {
		data := readFixture(t, name)
		want := mustSnapshot(t, data, device0)
		for how, r := range map[string]func() *Snapshot{
			"one byte": func() *Snapshot {
				s, err := ReadSnapshot(iotest.OneByteReader(bytes.NewReader(data)), device0)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			"half": func() *Snapshot {
				s, err := ReadSnapshot(iotest.HalfReader(bytes.NewReader(data)), device0)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		} {
			if got := r(); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s read %s differs", name, how)
			}
		}
	}
	// A string longer than the window grows it; the bytes come through.
	long := strings.Repeat("x", 3*window+5)
	p := pk{}.op('X')
	p = binary.LittleEndian.AppendUint32(p, uint32(len(long)))
	p = append(p, long...)
	v, err := unpickleFrom(iotest.HalfReader(bytes.NewReader(p.done())), 0, 1<<30, newHeldBudget(1<<30, heldPerInputByte), errInputLimit, nil)
	if err != nil || v != long {
		t.Fatalf("long string: %v (%T)", err, v)
	}
}

func TestStreamedPickleRespectsMaxBytes(t *testing.T) {
	data := readFixture(t, "synthetic-p4.pickle")
	if _, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{ChooseDevice: true, MaxBytes: int64(len(data))}); err != nil {
		t.Fatalf("at MaxBytes: %v", err)
	}
	_, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{MaxBytes: int64(len(data)) - 1})
	if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("one byte over MaxBytes: %v", err)
	}
	// Bytes after STOP count too, as when the input was read whole.
	_, err = ReadSnapshot(bytes.NewReader(append(data, make([]byte, 10)...)), SnapshotOptions{MaxBytes: int64(len(data)) + 5})
	if !errors.Is(err, ErrSnapshot) {
		t.Fatalf("trailing bytes over MaxBytes: %v", err)
	}
	// A length beyond what the limit lets the input hold is refused before
	// anything is read or allocated for it (U1).
	huge := pk{}.op('X', 0xff, 0xff, 0xff, 0x7f).done()
	if _, err := ReadSnapshot(bytes.NewReader(huge), SnapshotOptions{MaxBytes: 1 << 20}); !errors.Is(err, ErrPickle) {
		t.Fatalf("huge length: %v", err)
	}
}

// snapshotWithFrames is {device_traces: [[alloc, free_completed]],
// segments: [one segment, one block], probe: <frame dict "b">} where every
// entry, segment and block carries a frames list: built with APPENDS of
// memo references and inline frame dicts, with APPEND, with LIST from a
// mark, and as a memo reference to an earlier frames list.
func snapshotWithFrames() []byte {
	p := pk{}.op('}', 0x94)                                   // 0: top
	p = p.str("device_traces").op(0x94, ']', 0x94, ']', 0x94) // 1 "device_traces", 2 outer, 3 trace
	// alloc entry: frames = [a, b, a] built inline and referenced.
	p = p.op('}', 0x94, '(') // 4: entry
	p = p.str("action").op(0x94).str("alloc").str("addr").op(0x94).op('J', 0, 1, 0, 0).str("size").op(0x94).op('M', 0, 2)
	p = p.str("frames").op(0x94, ']', 0x94, '(') // 8 "frames", 9 the list
	p = p.frameDict("a")                         // 10
	p = p.frameDict("b")                         // 11
	p = p.get(10).op('e', 'u', 'a')
	// free entry: frames = memo reference to the first list, keys by memo.
	p = p.op('}', '(').get(5).str("free_completed").get(6).op('J', 0, 1, 0, 0).get(8).get(9).op('u', 'a')
	// alloc entry 2: frames by MARK GET… APPENDS only (the fast path), then APPEND.
	p = p.op('}', '(').get(5).str("alloc").get(6).op('J', 0, 2, 0, 0).get(7).op('M', 0, 4).get(8).op(']', '(').get(10).get(11).get(10).op('e').get(11).op('a', 'u', 'a')
	p = p.op('a', 's')                 // outer = [trace]; top["device_traces"] = outer
	p = p.str("segments").op(']', '(') // segments list
	p = p.op('}', '(').str("device").int1(0).str("address").op('J', 0, 0, 0, 1).str("total_size").op('J', 0, 0, 0x20, 0)
	p = p.str("stream").int1(0).str("segment_type").str("large")
	p = p.get(8).op('(').get(10).op('l') // frames = LIST from a mark
	p = p.str("blocks").op(']', '(', '}', '(').str("address").op('J', 0, 0, 0, 1).str("size").op('M', 0, 2).str("state").str("inactive").get(8).op(']', 0x94, '(').get(11).op('e', 'u', 'e')
	p = p.op('u', 'e', 's')
	p = p.str("probe").get(11).op('s')
	return p.done()
}

func TestFramesListsAreCountedNotKept(t *testing.T) {
	data := snapshotWithFrames()
	root, err := unpickle(data)
	if err != nil {
		t.Fatal(err)
	}
	top := root.(*pyDict)
	tracesV, _ := top.get("device_traces")
	traces, ok := asList(tracesV)
	if !ok || len(traces) != 1 {
		t.Fatalf("device_traces %s", describe(tracesV))
	}
	entries, _ := asList(traces[0])
	if len(entries) != 3 {
		t.Fatalf("trace %s", describe(traces[0]))
	}
	for i, want := range []string{"list of 3 stack frames, not kept", "list of 3 stack frames, not kept", "list of 4 stack frames, not kept"} {
		fv, _ := entries[i].(*pyDict).get("frames")
		if got := describe(fv); got != want {
			t.Errorf("entry %d frames: %s, want %s", i, got, want)
		}
		if _, ok := asList(fv); ok {
			t.Errorf("entry %d: asList accepted an elided frames list", i)
		}
	}
	// The first two entries share one list through the memo, as in Python.
	f0, _ := entries[0].(*pyDict).get("frames")
	f1, _ := entries[1].(*pyDict).get("frames")
	if f0 != f1 {
		t.Error("the memo reference to a frames list is not the same list")
	}
	// A frame dict built inside an elided list still resolves from the memo.
	probe, _ := top.get("probe")
	if d, ok := probe.(*pyDict); !ok {
		t.Fatalf("probe %s", describe(probe))
	} else if name, _ := d.get("name"); name != "b" {
		t.Fatalf("probe name %v", name)
	}
	segsV, _ := top.get("segments")
	segs, _ := asList(segsV)
	seg := segs[0].(*pyDict)
	if fv, _ := seg.get("frames"); describe(fv) != "list of 1 stack frames, not kept" {
		t.Errorf("segment frames (LIST from a mark): %s", describe(fv))
	}
	blocksV, _ := seg.get("blocks")
	blocks, _ := asList(blocksV)
	if fv, _ := blocks[0].(*pyDict).get("frames"); describe(fv) != "list of 1 stack frames, not kept" {
		t.Errorf("block frames: %s", describe(fv))
	}

	// And the snapshot converts: nothing the converter reads was elided.
	s := mustSnapshot(t, data, SnapshotOptions{})
	if s.Counts.Allocs != 2 || s.Counts.Frees != 1 || s.Segments != 1 {
		t.Fatalf("counts %+v segments %d", s.Counts, s.Segments)
	}
	// Read a byte at a time (the fast path gives up at every window end).
	s2, err := ReadSnapshot(iotest.OneByteReader(bytes.NewReader(data)), SnapshotOptions{})
	if err != nil || !reflect.DeepEqual(s, s2) {
		t.Fatalf("read a byte at a time: %v", err)
	}
}

// An elided list where the converter reads a list is refused by name, never
// read as an empty list.
func TestElidedListWhereAListIsReadIsRefused(t *testing.T) {
	// {"frames": [{"action": "alloc", …}], "device_traces": <that list>}
	p := pk{}.op('}', '(').str("frames").op(']', 0x94, '(', '}', '(').str("action").str("alloc").str("addr").int1(1).str("size").int1(2).op('u', 'e')
	p = p.str("device_traces").get(0).op('u')
	_, err := ReadSnapshot(bytes.NewReader(p.done()), SnapshotOptions{})
	if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "stack frames, not kept") {
		t.Fatalf("got %v", err)
	}
}

// The fast path for MARK GET… APPENDS reports a memo miss as the ordinary
// path does.
func TestFramesFastPathMemoMiss(t *testing.T) {
	p := pk{}.op('}', '(').str("frames").op(']', 0x94, '(').get(0).get(99).op('e', 'u')
	_, err := unpickle(p.done())
	if !errors.Is(err, ErrPickle) || !strings.Contains(err.Error(), "memo key 99 not found") {
		t.Fatalf("got %v", err)
	}
}

// U3: the memo is dense for sequential indices, a map beside it for the
// rest; a huge index costs one entry, and MEMOIZE numbers as Python does
// (len(memo)).
func TestMemoSparseIndices(t *testing.T) {
	p := pk{}.op('N', 'r', 0xff, 0xff, 0xff, 0xff, '0') // memo[2^32-1] = None
	p = p.int1(5).op('q', 3, '0')                       // memo[3] = 5
	p = p.int1(6).op(0x94, '0')                         // MEMOIZE: len(memo) = 2 → memo[2] = 6
	p = p.int1(7).op('q', 0, '0')                       // memo[0] = 7 (dense)
	p = p.int1(8).op(0x94, '0')                         // len(memo) = 4 → memo[4] = 8
	p = p.op('(').get(0xffffffff).get(3).get(2).get(0).get(4).op('t')
	v, err := unpickle(p.done())
	if err != nil {
		t.Fatal(err)
	}
	want := pyTuple{nil, int64(5), int64(6), int64(7), int64(8)}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("got %#v", v)
	}
	// A memo index never set is an error, dense or not.
	if _, err := unpickle(pk{}.op('N', 0x94).get(1).done()); !errors.Is(err, ErrPickle) {
		t.Fatalf("miss: %v", err)
	}
}
