package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The content decides what a file is, gzipped or not, and the reader Sniff
// returns yields the whole decompressed content.
func TestSniffTellsTracesFromSnapshotsByContent(t *testing.T) {
	trace := readFile(t, "testdata/default.jsonl")
	jsonSnap := readFile(t, "testdata/synthetic.json")
	pickle := readFile(t, "testdata/synthetic-p4.pickle")
	pretty := []byte("{\n  \"segments\": [],\n  \"device_traces\": [[]]\n}\n")
	headerless := []byte("\n\n  {\"op\":\"free\",\"t\":1,\"id\":1}")
	for _, c := range []struct {
		name    string
		in      []byte
		want    InputKind
		content []byte
	}{
		{"jsonl", trace, InputJSONL, trace},
		{"gzipped jsonl", gzipBytes(t, trace), InputJSONL, trace},
		{"one event, no header, no newline", headerless, InputJSONL, headerless},
		{"json snapshot", jsonSnap, InputSnapshot, jsonSnap},
		{"pretty-printed json snapshot", pretty, InputSnapshot, pretty},
		{"pickle", pickle, InputSnapshot, pickle},
		{"gzipped pickle", gzipBytes(t, pickle), InputSnapshot, pickle},
	} {
		kind, content, gz, err := Sniff(bytes.NewReader(c.in))
		if err != nil || kind != c.want {
			t.Errorf("%s: %v, %v; want %v", c.name, kind, err, c.want)
			continue
		}
		if gz != strings.HasPrefix(c.name, "gzipped") {
			t.Errorf("%s: gzipped = %v", c.name, gz)
		}
		got, err := io.ReadAll(content)
		if err != nil || !bytes.Equal(got, c.content) {
			t.Errorf("%s: content %d bytes (%v), want the %d bytes of the input", c.name, len(got), err, len(c.content))
		}
	}
}

// A JSON snapshot whose single line is longer than a trace line may be is
// still a snapshot: Sniff never reads more than one line's worth.
func TestSniffCallsALongSingleLineJSONASnapshot(t *testing.T) {
	long := []byte(`{"segments": [` + strings.Repeat(`{"device": 0}, `, MaxLineBytes/15+10) + `{}], "op": 1}`)
	kind, _, _, err := Sniff(bytes.NewReader(long))
	if err != nil || kind != InputSnapshot {
		t.Fatalf("%v, %v; want a snapshot", kind, err)
	}
}

// Text that is neither format is refused with the formats listed, the byte
// and its offset; so is an empty input (plain or gzipped), which could have
// been meant as either, its (empty) content returned; a gzip stream that
// cannot be read is an ErrCorruptGzip, which names neither format.
func TestSniffRefusesOtherContentNamingTheFormatsItReads(t *testing.T) {
	for _, in := range [][]byte{[]byte("hello, world\n"), gzipBytes(t, []byte("  hello")), []byte("\x00\x00\x00")} {
		_, content, _, err := Sniff(bytes.NewReader(in))
		if !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), "PyTorch memory snapshot") || !strings.Contains(err.Error(), "JSONL") || !strings.Contains(err.Error(), "offset") {
			t.Errorf("%q: got %v, want ErrUnknownFormat listing the formats", in, err)
		}
		if content == nil {
			t.Errorf("%q: no content returned with ErrUnknownFormat", in)
		}
	}
	for _, in := range [][]byte{nil, []byte(" \n\t"), gzipBytes(t, nil)} {
		_, content, _, err := Sniff(bytes.NewReader(in))
		if !errors.Is(err, ErrUnknownFormat) || errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "empty input") || content == nil {
			t.Errorf("%q: got %v (content %v), want an empty-input ErrUnknownFormat with its content", in, err, content)
		}
	}
	broken := [][]byte{{0x1f, 0x8b, 1, 2, 3}, gzipBytes(t, []byte("{\"op\":\"free\"}"))[:14]}
	for _, in := range broken {
		_, _, _, err := Sniff(bytes.NewReader(in))
		if !errors.Is(err, ErrCorruptGzip) || errors.Is(err, ErrSnapshot) || strings.Contains(err.Error(), "snapshot") {
			t.Errorf("% x: got %v, want ErrCorruptGzip naming no format", in, err)
		}
	}
}

// R4: the first line's top-level keys decide, not whether the line is valid
// JSON. A trace whose header or first event holds a NaN, or an unknown
// field nested deeper than encoding/json's 10,000 levels, or a header line
// longer than Sniff reads, is a trace (the trace decoder then names the
// line); before, each was read as a JSON snapshot and refused as a bad
// PyTorch snapshot. "op" or "format" nested in a value, or as a value, is
// not a key of the line, and a snapshot stays a snapshot.
func TestSniffDecidesByTheFirstLinesTopLevelKeys(t *testing.T) {
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	events := "{\"op\":\"alloc\",\"t\":1,\"id\":1,\"size\":8,\"stream\":0}\n"
	for _, c := range []struct {
		name string
		in   string
		want InputKind
	}{
		{"header with NaN", `{"format":"gpumem-trace","version":2,"x":NaN}` + "\n" + events, InputJSONL},
		{"header with deep nesting", `{"format":"gpumem-trace","version":2,"x":` + deep + "}\n" + events, InputJSONL},
		{"deep nesting before the key", `{"x":` + deep + `,"format":"gpumem-trace","version":2}` + "\n" + events, InputJSONL},
		{"first event with NaN", `{"op":"alloc","t":NaN,"id":1,"size":8,"stream":0}` + "\n", InputJSONL},
		{"key with white space", `{ "op" : "free", "t": 1, "id": 1}`, InputJSONL},
		{"escaped quote before the key", `{"x":"a\"b","op":"free"}`, InputJSONL},
		{"header longer than Sniff reads", `{"format":"gpumem-trace","x":"` + strings.Repeat("a", sniffBytes) + `"}` + "\n", InputJSONL},
		{"op nested in a value", `{"segments":[{"op":"alloc"}],"device_traces":[]}`, InputSnapshot},
		{"op as a value", `{"segments":"op","device_traces":[]}`, InputSnapshot},
		{"format in a nested object", `{"a":{"format":"gpumem-trace"},"b":1}`, InputSnapshot},
		{"snapshot with NaN", `{"segments":[NaN],"device_traces":[]}`, InputSnapshot},
	} {
		for _, gz := range []bool{false, true} {
			in := []byte(c.in)
			if gz {
				in = gzipBytes(t, in)
			}
			kind, _, _, err := Sniff(bytes.NewReader(in))
			if err != nil || kind != c.want {
				t.Errorf("%s (gzipped %v): %v, %v; want %v", c.name, gz, kind, err, c.want)
			}
		}
	}
}

// A gzipped trace past its bound is a TooLargeError of Kind InputJSONL: its
// message speaks of a trace, and it matches no snapshot sentinel (R4: the
// CLI said "invalid trace event: after line N: bad PyTorch snapshot: input
// larger than the limit").
func TestTraceTooLargeErrorSpeaksOfATrace(t *testing.T) {
	err := error(&TooLargeError{Limit: 1 << 30, Kind: InputJSONL})
	if msg := err.Error(); msg != "gzipped gpumem trace larger than the limit of 1073741824 bytes once decompressed" || errors.Is(err, ErrSnapshot) {
		t.Fatalf("%q (matches ErrSnapshot: %v)", msg, errors.Is(err, ErrSnapshot))
	}
	if snap := error(&TooLargeError{Limit: 1 << 30}); !errors.Is(snap, ErrSnapshot) || !strings.Contains(snap.Error(), "PyTorch snapshot: input larger") || strings.Contains(snap.Error(), "bad") {
		t.Fatalf("a snapshot's: %v", snap)
	}
}
