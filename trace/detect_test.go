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
// and its offset; an empty input (plain or gzipped) is an empty snapshot.
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
		if _, _, _, err := Sniff(bytes.NewReader(in)); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "empty") {
			t.Errorf("%q: got %v, want an empty-input ErrSnapshot", in, err)
		}
	}
	if _, _, _, err := Sniff(bytes.NewReader([]byte{0x1f, 0x8b, 1, 2, 3})); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("a broken gzip header: got %v", err)
	}
}
