package history

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestEncoderWritesOneLinePerEventAndRefusesWithoutWriting(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.WriteHeader(Header{Source: "test", Streams: 1}); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(Event{Op: OpAlloc, T: 5, ID: 1, Size: 4096}); err != nil {
		t.Fatal(err)
	}
	n := buf.Len()
	for _, bad := range []struct {
		e    Event
		want error
	}{
		{Event{Op: OpAlloc, T: 4, ID: 2, Size: 1}, ErrInvalidEvent}, // time runs backwards
		{Event{Op: OpRelease, T: 6, ID: 1}, ErrInvalidEvent},        // release of a live buffer
		{Event{Op: OpPass, T: 6}, ErrInvalidEvent},                  // pass without a hold
		{Event{Op: Op(99), T: 6}, ErrUnknownOp},                     // no such op
		{Event{Op: OpAlloc, T: 6, ID: 3, Size: MaxSize + 1}, ErrInvalidEvent},
	} {
		if err := enc.Encode(bad.e); !errors.Is(err, bad.want) {
			t.Errorf("Encode(%+v) = %v, want %v", bad.e, err, bad.want)
		}
	}
	if buf.Len() != n {
		t.Fatalf("refused events wrote %q", buf.String()[n:])
	}
	if err := enc.Encode(Event{Op: OpFree, T: 7, ID: 1, Held: true}); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(Event{Op: OpRelease, T: 8, ID: 1}); err != nil {
		t.Fatal(err)
	}
	want := `{"format":"gpumem-trace","version":2,"source":"test","streams":1}
{"op":"alloc","t":5,"id":1,"size":4096,"stream":0}
{"op":"free","t":7,"id":1,"held":true}
{"op":"release","t":8,"id":1}
`
	if buf.String() != want {
		t.Fatalf("wrote\n%s\nwant\n%s", buf.String(), want)
	}
	if err := enc.WriteHeader(Header{}); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("a header after events: %v, want ErrBadHeader", err)
	}
}

func TestWriteTorchSnapshotRefusesAnUnwritableSetting(t *testing.T) {
	var buf bytes.Buffer
	err := WriteTorchSnapshot(&buf, &TorchSnapshot{AllocatorSettings: map[string]any{"x": []int{1}}})
	if !errors.Is(err, ErrUnwritable) {
		t.Fatalf("WriteTorchSnapshot with a []int setting = %v, want ErrUnwritable", err)
	}
	buf.Reset()
	if err := WriteTorchSnapshot(&buf, &TorchSnapshot{WrittenBy: "gpumem", Traces: [][]TorchTraceEntry{{{Action: "alloc", Addr: 1 << 20, Size: 512}}}}); err != nil {
		t.Fatal(err)
	}
	// Protocol 2, and no GLOBAL ('c') or STACK_GLOBAL ('\x93') opcode
	// anywhere a restricted unpickler would trip on (a coarse check: the
	// tool's reader and CPython's unpickler check it fully in trace's
	// tests).
	b := buf.Bytes()
	if len(b) < 2 || b[0] != 0x80 || b[1] != 2 || b[len(b)-1] != '.' {
		t.Fatalf("not a protocol-2 pickle: % x … % x", b[:min(4, len(b))], b[max(0, len(b)-2):])
	}
	if !strings.Contains(string(b), WrittenByKey) {
		t.Fatalf("no %q key in the pickle", WrittenByKey)
	}
}
