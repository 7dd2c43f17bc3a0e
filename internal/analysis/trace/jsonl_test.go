package trace

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func decodeAll(t *testing.T, s string) ([]Event, error) {
	t.Helper()
	var out []Event
	for e, err := range Decode(strings.NewReader(s)) {
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
	return out, nil
}

var everyOp = []Event{
	{Op: OpWindow, T: 0, Stream: 0, Mode: ModePersistent},
	{Op: OpAlloc, T: 1, ID: 1, Size: 4096, Stream: 0},
	{Op: OpWindow, T: 1, Stream: 0, Mode: ModeAuto},
	{Op: OpAlloc, T: 2, ID: 2, Size: MaxSize, Stream: 3},
	{Op: OpCapture, T: 3, Stream: 1, Phase: PhasePrepare, Graph: 9},
	{Op: OpCapture, T: 4, Stream: 1, Phase: PhaseLaunch, Graph: 9},
	{Op: OpFree, T: 5, ID: 2},
	{Op: OpCleanup, T: 6, Stream: 3},
	{Op: OpFree, T: 6, ID: 1},
}

func TestJSONLRoundTripGivesIdenticalEvents(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.WriteHeader(Header{Source: "unit \"test\"", Streams: 4}); err != nil {
		t.Fatal(err)
	}
	for _, e := range everyOp {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := decodeAll(t, buf.String())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, everyOp) {
		t.Fatalf("round trip:\n got %v\nwant %v", got, everyOp)
	}
}

func TestEncoderWritesKeysInSpecOrder(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.WriteHeader(Header{Source: "s", Streams: 2}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Event{
		{Op: OpAlloc, T: 1, ID: 7, Size: 512, Stream: 1},
		{Op: OpFree, T: 2, ID: 7},
		{Op: OpCleanup, T: 3, Stream: 1},
		{Op: OpWindow, T: 4, Stream: 0, Mode: ModeDedicated},
		{Op: OpCapture, T: 5, Stream: 0, Phase: PhaseBegin, Graph: 2},
	} {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"format":"gpumem-trace","version":2,"source":"s","streams":2}
{"op":"alloc","t":1,"id":7,"size":512,"stream":1}
{"op":"free","t":2,"id":7}
{"op":"cleanup","t":3,"stream":1}
{"op":"window","t":4,"stream":0,"mode":"dedicated"}
{"op":"capture","t":5,"stream":0,"phase":"begin","graph":2}
`
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestDecodeIgnoresUnknownFieldsAndBlankLines(t *testing.T) {
	got, err := decodeAll(t, `{"format":"gpumem-trace","version":1,"source":"x","streams":1,"extra":[1,2]}

{"op":"alloc","t":1,"id":1,"size":10,"stream":0,"comment":"hello","nested":{"a":1}}
{"future":true,"op":"free","t":2,"id":1}
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{{Op: OpAlloc, T: 1, ID: 1, Size: 10}, {Op: OpFree, T: 2, ID: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v want %v", got, want)
	}
}

func TestDecodeRejectsUnknownOpNamingTheLine(t *testing.T) {
	_, err := decodeAll(t, `{"op":"alloc","t":1,"id":1,"size":10,"stream":0}
{"op":"free","t":2,"id":1}
{"op":"realloc","t":3,"id":1}
`)
	if !errors.Is(err, ErrUnknownOp) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "realloc") {
		t.Fatalf("got %v, want ErrUnknownOp naming line 3 and the op", err)
	}
}

func TestDecodeRejectsMalformedEventsNamingTheLine(t *testing.T) {
	cases := map[string]string{
		"missing size":     `{"op":"alloc","t":1,"id":1,"stream":0}`,
		"missing t":        `{"op":"free","id":1}`,
		"negative size":    `{"op":"alloc","t":1,"id":1,"size":-5,"stream":0}`,
		"size above 2^62":  `{"op":"alloc","t":1,"id":1,"size":4611686018427387905,"stream":0}`,
		"fractional id":    `{"op":"free","t":1,"id":1.5}`,
		"negative stream":  `{"op":"cleanup","t":1,"stream":-1}`,
		"stream 1024":      `{"op":"alloc","t":1,"id":1,"size":512,"stream":1024}`,
		"stream 1e9":       `{"op":"alloc","t":1,"id":1,"size":512,"stream":1000000000}`,
		"bad mode":         `{"op":"window","t":1,"stream":0,"mode":"sometimes"}`,
		"bad phase":        `{"op":"capture","t":1,"stream":0,"phase":"pause","graph":0}`,
		"negative graph":   `{"op":"capture","t":1,"stream":0,"phase":"end","graph":-1}`,
		"no op":            `{"t":1,"id":1}`,
		"not json":         `alloc 1 2 3`,
		"not an object":    `[1,2]`,
		"missing graph":    `{"op":"capture","t":1,"stream":0,"phase":"end"}`,
		"header not first": `{"format":"gpumem-trace","version":1}`,
	}
	for name, line := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := decodeAll(t, `{"op":"cleanup","t":0,"stream":0}`+"\n"+line+"\n")
			if !errors.Is(err, ErrInvalidEvent) && !errors.Is(err, ErrUnknownOp) {
				t.Fatalf("got %v, want ErrInvalidEvent", err)
			}
			if !strings.Contains(err.Error(), "line 2") {
				t.Fatalf("error %q does not name line 2", err)
			}
		})
	}
}

func TestDecodeRejectsDecreasingTime(t *testing.T) {
	_, err := decodeAll(t, `{"op":"cleanup","t":5,"stream":0}
{"op":"cleanup","t":4,"stream":0}`)
	if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), `field "t"`) {
		t.Fatalf("got %v", err)
	}
}

// A negative time is refused on every op, naming the line and the field;
// the int64 extremes made a replay print a negative span before.
func TestDecodeRejectsNegativeTimesNamingTheLineAndField(t *testing.T) {
	for _, line := range []string{
		`{"op":"alloc","t":-5,"id":1,"size":10,"stream":0}`,
		`{"op":"free","t":-1,"id":1}`,
		`{"op":"cleanup","t":-9223372036854775808,"stream":0}`,
		`{"op":"window","t":-2,"stream":0,"mode":"auto"}`,
		`{"op":"capture","t":-3,"stream":0,"phase":"end","graph":0}`,
	} {
		_, err := decodeAll(t, `{"op":"cleanup","t":0,"stream":0}`+"\n"+line+"\n")
		if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), `field "t"`) {
			t.Fatalf("%s: got %v, want ErrInvalidEvent naming line 2 and field \"t\"", line, err)
		}
	}
	events, err := decodeAll(t, `{"op":"cleanup","t":0,"stream":0}
{"op":"cleanup","t":9223372036854775807,"stream":0}`)
	if err != nil || len(events) != 2 {
		t.Fatalf("times 0 then the int64 maximum: %d events, %v", len(events), err)
	}
	if err := NewEncoder(&bytes.Buffer{}).Encode(Event{Op: OpFree, T: -1, ID: 1}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("Encode of a negative time: %v, want ErrInvalidEvent", err)
	}
}

func TestDecodeRejectsOtherFormatOrVersion(t *testing.T) {
	for _, h := range []string{`{"format":"other","version":1}`, `{"format":"gpumem-trace","version":3}`, `{"format":"gpumem-trace","version":0}`, `{"format":"gpumem-trace"}`} {
		if _, err := decodeAll(t, h+"\n"); !errors.Is(err, ErrBadHeader) {
			t.Fatalf("%s: got %v", h, err)
		}
	}
}

func TestDecodeRejectsOverlongLine(t *testing.T) {
	long := `{"op":"cleanup","t":0,"stream":0,"pad":"` + strings.Repeat("x", MaxLineBytes) + `"}`
	_, err := decodeAll(t, `{"op":"cleanup","t":0,"stream":0}`+"\n"+long)
	if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "line 2 ") || !strings.Contains(err.Error(), "1048576 bytes") || !strings.Contains(err.Error(), "MaxLineBytes") {
		t.Fatalf("got %v, want ErrInvalidEvent naming line 2 and the 1048576-byte limit", err)
	}
	if strings.Contains(err.Error(), "bufio") {
		t.Fatalf("error %q leaks the scanner's wording", err)
	}
}

func TestDecodeStopsWhenTheConsumerStops(t *testing.T) {
	n := 0
	for range Decode(strings.NewReader(strings.Repeat(`{"op":"cleanup","t":0,"stream":0}`+"\n", 10))) {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("got %d", n)
	}
}

func TestEncoderRefusesInvalidEventsAndWritesNothing(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	for _, e := range []Event{
		{},
		{Op: Op(99), T: 1},
		{Op: OpAlloc, T: 1, ID: 1, Size: MaxSize + 1},
		{Op: OpWindow, T: 1, Mode: "x"},
		{Op: OpCleanup, T: 1, Stream: -2},
	} {
		if err := enc.Encode(e); err == nil {
			t.Fatalf("%+v accepted", e)
		}
	}
	if err := enc.Encode(Event{Op: OpCleanup, T: 5}); err != nil {
		t.Fatal(err)
	}
	if err := enc.Encode(Event{Op: OpCleanup, T: 4}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("decreasing time: %v", err)
	}
	if err := enc.WriteHeader(Header{}); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("header after events: %v", err)
	}
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Fatalf("%d lines written, want 1", got)
	}
}

func TestParseOpAndString(t *testing.T) {
	for o := OpAlloc; o <= OpDefragment; o++ {
		p, err := ParseOp(o.String())
		if err != nil || p != o {
			t.Fatalf("%v: %v %v", o, p, err)
		}
	}
	if Op(0).String() != "op(0)" {
		t.Fatal(Op(0).String())
	}
}

// Version 2's additions round-trip: a failed allocation, a defragment with
// and without bounds, and the header's device; a version-1 trace still
// reads, with no device.
func TestVersion2EventsAndDeviceRoundTrip(t *testing.T) {
	dev := &Device{Backend: "host", Capacity: 2 << 30, MaxPage: 512 << 20, Alignment: 512, MaxMemory: 2 << 30, Granule: 2 << 20,
		Dynamic: "adaptive", Persistent: "enabled", BaseMode: "persistent", NoCompact: true}
	events := []Event{
		{Op: OpAlloc, T: 1, ID: 1, Size: 4096, Stream: 1},
		{Op: OpAllocFailed, T: 2, ID: 2, Size: 1 << 40, Stream: 1},
		{Op: OpDefragment, T: 3},
		{Op: OpDefragment, T: 3, Size: 64 << 20, MaxMoves: 12},
		{Op: OpFree, T: 4, ID: 1},
	}
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.WriteHeader(Header{Source: "s", Streams: 2, Device: dev}); err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	wantHeader := `{"format":"gpumem-trace","version":2,"source":"s","streams":2,"device":{"backend":"host","capacity":2147483648,"max_page":536870912,"alignment":512,"max_memory":2147483648,"granule":2097152,"dynamic":"adaptive","persistent":"enabled","base_mode":"persistent","relocation":true,"compaction":false}}`
	lines := strings.Split(buf.String(), "\n")
	if lines[0] != wantHeader || lines[2] != `{"op":"alloc_failed","t":2,"id":2,"size":1099511627776,"stream":1}` ||
		lines[3] != `{"op":"defragment","t":3}` || lines[4] != `{"op":"defragment","t":3,"max_bytes":67108864,"max_moves":12}` {
		t.Fatalf("written:\n%s", buf.String())
	}
	var h Header
	var got []Event
	for e, err := range DecodeWithHeader(bytes.NewReader(buf.Bytes()), &h) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if !slices.Equal(got, events) || h.Version != 2 || h.Source != "s" || h.Streams != 2 || h.Device == nil || *h.Device != *dev {
		t.Fatalf("read back %v, header %+v device %+v", got, h, h.Device)
	}
	h = Header{}
	for _, err := range DecodeWithHeader(strings.NewReader(`{"format":"gpumem-trace","version":1,"source":"old","streams":1}
{"op":"alloc","t":1,"id":1,"size":10,"stream":0}
`), &h) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if h.Version != 1 || h.Source != "old" || h.Device != nil {
		t.Fatalf("version-1 header read as %+v", h)
	}
}

// A trace of a newer version is refused saying so, before any event; a
// device with impossible figures and bad defragment bounds are refused
// naming the field.
func TestDecodeRefusesNewerVersionsAndBadDevices(t *testing.T) {
	_, err := decodeAll(t, `{"format":"gpumem-trace","version":3,"source":"future","streams":1}
{"op":"alloc","t":1,"id":1,"size":10,"stream":0}
`)
	if !errors.Is(err, ErrBadHeader) || !strings.Contains(err.Error(), "version 3 is newer") || !strings.Contains(err.Error(), "versions 1 to 2") || !strings.Contains(err.Error(), "update gpumem") {
		t.Fatalf("a version-3 trace: %v", err)
	}
	for line, want := range map[string]string{
		`{"format":"gpumem-trace","version":2,"device":{"max_page":0}}`:                             `"max_page"`,
		`{"format":"gpumem-trace","version":2,"device":{"max_page":4096,"alignment":768}}`:          `"alignment"`,
		`{"format":"gpumem-trace","version":2,"device":{"max_page":4096,"capacity":-1}}`:            `capacity`,
		`{"format":"gpumem-trace","version":2,"device":{"max_page":9223372036854775807}}`:           `"max_page"`,
		`{"format":"gpumem-trace","version":2}` + "\n" + `{"op":"defragment","t":1,"max_moves":-1}`: `"max_moves"`,
		`{"op":"defragment","t":1,"max_moves":4294967296}`:                                          `"max_moves"`,
		`{"op":"alloc_failed","t":1,"id":1,"stream":0}`:                                             `"size"`,
	} {
		_, err := decodeAll(t, line+"\n")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming %s", line, err, want)
		}
	}
	if err := NewEncoder(&bytes.Buffer{}).Encode(Event{Op: OpFree, T: 1, ID: 1, MaxMoves: 2}); !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "max_moves") {
		t.Fatalf("Encode of a free with max_moves: %v", err)
	}
	if err := NewEncoder(&bytes.Buffer{}).WriteHeader(Header{Device: &Device{MaxPage: 0}}); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("WriteHeader of a device without a page size: %v", err)
	}
}
