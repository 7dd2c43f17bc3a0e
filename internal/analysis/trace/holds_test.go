package trace

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A trace with held frees, releases, holds and passes: every field of the
// new events.
var heldEvents = []Event{
	{Op: OpAlloc, T: 1, ID: 1, Size: 5 << 20, Stream: 0},
	{Op: OpAlloc, T: 1, ID: 2, Size: 512, Stream: 1},
	{Op: OpFree, T: 2, ID: 1, Held: true},
	{Op: OpHold, T: 3, Stream: 1},
	{Op: OpFree, T: 3, ID: 2},
	{Op: OpHold, T: 4, Stream: 1},
	{Op: OpRelease, T: 5, ID: 1},
	{Op: OpPass, T: 6, Stream: 1},
	{Op: OpPass, T: 6, Stream: 1},
}

func TestHeldEventsRoundTripInSpecOrder(t *testing.T) {
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	for _, e := range heldEvents {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	want := `{"op":"alloc","t":1,"id":1,"size":5242880,"stream":0}
{"op":"alloc","t":1,"id":2,"size":512,"stream":1}
{"op":"free","t":2,"id":1,"held":true}
{"op":"hold","t":3,"stream":1}
{"op":"free","t":3,"id":2}
{"op":"hold","t":4,"stream":1}
{"op":"release","t":5,"id":1}
{"op":"pass","t":6,"stream":1}
{"op":"pass","t":6,"stream":1}
`
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
	got, err := decodeAll(t, buf.String())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, heldEvents) {
		t.Fatalf("round trip:\n got %v\nwant %v", got, heldEvents)
	}
	// "held":false is a plain free, and is written as one.
	got, err = decodeAll(t, `{"op":"alloc","t":1,"id":1,"size":5,"stream":0}
{"op":"free","t":2,"id":1,"held":false}`)
	if err != nil || !slices.Equal(got, []Event{{Op: OpAlloc, T: 1, ID: 1, Size: 5}, {Op: OpFree, T: 2, ID: 1}}) {
		t.Fatalf("held false: %v, %v", got, err)
	}
}

// A release must follow a held free of its ID, once; a pass an open hold
// of its stream. Decode names the line and the field; the Encoder refuses
// the same event and writes nothing.
func TestHeldEventsOutOfPlaceAreRefusedNamingLineAndField(t *testing.T) {
	const alloc = `{"op":"alloc","t":1,"id":7,"size":64,"stream":0}` + "\n"
	cases := []struct {
		name, trace, field, says string
		line                     int
	}{
		{"unknown buffer", `{"op":"release","t":1,"id":9}`, `field "id"`, "no free", 1},
		{"release before free", alloc + `{"op":"release","t":2,"id":7}`, `field "id"`, "before its free (allocated at line 1", 2},
		{"release of a plain free", alloc + `{"op":"free","t":2,"id":7}` + "\n" + `{"op":"release","t":3,"id":7}`, `field "id"`, "no free", 3},
		{"duplicate release", alloc + `{"op":"free","t":2,"id":7,"held":true}` + "\n" + `{"op":"release","t":3,"id":7}` + "\n" + `{"op":"release","t":4,"id":7}`, `field "id"`, "second release (the first is at line 3)", 4},
		{"alloc while held", alloc + `{"op":"free","t":2,"id":7,"held":true}` + "\n" + `{"op":"alloc","t":3,"id":7,"size":64,"stream":0}`, `field "id"`, "held free (line 2) has no release", 3},
		{"held twice", alloc + `{"op":"free","t":2,"id":7,"held":true}` + "\n" + `{"op":"free","t":3,"id":7,"held":true}`, `field "held"`, "by the free at line 2", 3},
		{"pass without hold", `{"op":"hold","t":1,"stream":1}` + "\n" + `{"op":"pass","t":2,"stream":0}`, `field "stream"`, "without an open hold", 2},
		{"second pass", `{"op":"hold","t":1,"stream":0}` + "\n" + `{"op":"pass","t":2,"stream":0}` + "\n" + `{"op":"pass","t":2,"stream":0}`, `field "stream"`, "without an open hold", 3},
		{"release without id", `{"op":"release","t":1}`, `"id"`, "without", 1},
		{"hold without stream", `{"op":"hold","t":1}`, `"stream"`, "without", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decodeAll(t, c.trace+"\n")
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("got %v, want ErrInvalidEvent", err)
			}
			for _, want := range []string{lineOf(c.line), c.field, c.says} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not say %q", err, want)
				}
			}
		})
	}
	// Held is a free's field only: Validate refuses it elsewhere (Decode
	// ignores fields an op does not have, as it always did).
	if err := (Event{Op: OpAlloc, T: 1, ID: 7, Size: 64, Held: true}).Validate(); !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), `field "held"`) {
		t.Fatalf("Validate of a held alloc: %v", err)
	}
	// The Encoder refuses what Decode would, and writes nothing for it.
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.Encode(Event{Op: OpAlloc, T: 1, ID: 7, Size: 64}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []Event{{Op: OpRelease, T: 2, ID: 7}, {Op: OpRelease, T: 2, ID: 8}, {Op: OpPass, T: 2}} {
		if err := enc.Encode(e); !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "event 1") {
			t.Fatalf("Encode(%+v): %v, want ErrInvalidEvent naming event 1", e, err)
		}
	}
	if got := strings.Count(buf.String(), "\n"); got != 1 {
		t.Fatalf("%d lines written, want 1", got)
	}
}

func lineOf(n int) string { return "line " + strconv.Itoa(n) + ":" }

// A PyTorch snapshot's free_requested is the free and its free_completed
// the release: completed by the very next entry it is a plain free there
// (as before), completed later a held free and a release. An alloc at a
// held free's address releases it first. The result encodes (E3).
func TestSnapshotFreeRequestedThenCompletedLaterIsAHeldFree(t *testing.T) {
	js := `{"device_traces": [[
  {"action": "alloc", "addr": 16777216, "size": 1048576, "stream": 0, "time_us": 1},
  {"action": "alloc", "addr": 18874368, "size": 2048, "stream": 0, "time_us": 2},
  {"action": "free_requested", "addr": 16777216, "size": 1048576, "stream": 0, "time_us": 3},
  {"action": "alloc", "addr": 20971520, "size": 4096, "stream": 0, "time_us": 4},
  {"action": "free_completed", "addr": 16777216, "size": 1048576, "stream": 0, "time_us": 5},
  {"action": "free_requested", "addr": 18874368, "size": 2048, "stream": 0, "time_us": 6},
  {"action": "free_completed", "addr": 18874368, "size": 2048, "stream": 0, "time_us": 7},
  {"action": "free_requested", "addr": 20971520, "size": 4096, "stream": 0, "time_us": 8},
  {"action": "alloc", "addr": 20971520, "size": 512, "stream": 0, "time_us": 9}]]}`
	s := mustSnapshot(t, []byte(js), SnapshotOptions{})
	want := []Event{
		{Op: OpAlloc, T: 1, ID: 1, Size: 1 << 20},
		{Op: OpAlloc, T: 2, ID: 2, Size: 2048},
		{Op: OpFree, T: 3, ID: 1, Held: true},
		{Op: OpAlloc, T: 4, ID: 3, Size: 4096},
		{Op: OpRelease, T: 5, ID: 1},
		{Op: OpFree, T: 7, ID: 2},
		{Op: OpFree, T: 8, ID: 3, Held: true},
		{Op: OpRelease, T: 9, ID: 3}, // an alloc at its address: PyTorch had completed the free
		{Op: OpAlloc, T: 9, ID: 4, Size: 512},
	}
	if !slices.Equal(s.Events, want) {
		t.Fatalf("events\n got %v\nwant %v", s.Events, want)
	}
	c := s.Counts
	if c.FreeRequests != 3 || c.HeldFrees != 2 || c.Frees != 2 || c.PendingAtEnd != 0 || c.ImpliedFrees != 0 {
		t.Fatalf("counts %+v: want 3 free requests, 2 held, 2 frees completed, none pending", c)
	}
	if s.PeakLive != 1<<20+2048 || s.FinalLive != 512 {
		t.Fatalf("live peak %d final %d; want the held free's bytes gone at its free_requested", s.PeakLive, s.FinalLive)
	}
	encodes(t, s.Events)
}

// encodes fails the test unless the Encoder takes every event (E1, E3).
func encodes(t *testing.T, events []Event) {
	t.Helper()
	enc := NewEncoder(io.Discard)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
}
