package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"reflect"
	"strings"

	"github.com/gpumem/gpumem/history"
)

// MaxLineBytes bounds one JSONL line. A native event is under 150 bytes; the
// bound only stops a corrupt file from being read into memory whole.
const MaxLineBytes = 1 << 20

// wireEvent is one JSONL line as decoded; pointers tell a missing field from
// a zero one. Unknown fields are ignored by encoding/json.
type wireEvent struct {
	Op     *string `json:"op"`
	T      *int64  `json:"t"`
	ID     *uint64 `json:"id"`
	Size   *uint64 `json:"size"`
	Stream *int    `json:"stream"`
	Mode   *string `json:"mode"`
	Phase  *string `json:"phase"`
	Graph  *int    `json:"graph"`
	Held   *bool   `json:"held"`
	// A defragment's bounds.
	MaxBytes *uint64 `json:"max_bytes"`
	MaxMoves *int64  `json:"max_moves"`

	Format  *string     `json:"format"`
	Version *int        `json:"version"`
	Source  *string     `json:"source"`
	Streams *int        `json:"streams"`
	Device  *wireDevice `json:"device"`
}

// wireDevice is a header's device as decoded; the booleans are pointers
// because relocation and compaction are on unless a header says not.
type wireDevice struct {
	Backend    string `json:"backend"`
	Capacity   uint64 `json:"capacity"`
	MaxPage    uint64 `json:"max_page"`
	Alignment  uint64 `json:"alignment"`
	MaxMemory  uint64 `json:"max_memory"`
	Granule    uint64 `json:"granule"`
	Dynamic    string `json:"dynamic"`
	Persistent string `json:"persistent"`
	BaseMode   string `json:"base_mode"`
	Relocation *bool  `json:"relocation"`
	Compaction *bool  `json:"compaction"`
}

// Decode streams the events of a JSONL trace (design §13.1). An optional header
// line is checked (format gpumem-trace, version MinVersion to Version) and
// skipped; blank lines are skipped; unknown fields are ignored. The first
// malformed line ends the sequence with an error naming its 1-based line
// number and wrapping [ErrUnknownOp], [ErrInvalidEvent] or [ErrBadHeader];
// a read error ends it with that error wrapped. Times must not decrease; a
// release must name an ID freed with "held":true and not released since, a
// pass a stream with an open hold, and an ID awaiting its release may not
// be allocated or freed held again.
func Decode(r io.Reader) iter.Seq2[Event, error] { return DecodeWithHeader(r, nil) }

// DecodeWithHeader is Decode that also stores the trace's header in *h
// (when h is not nil) before it yields the first event, so a replay can
// run the trace as the device that recorded it ran (Header.Device). A
// trace without a header leaves *h zero (Format "").
func DecodeWithHeader(r io.Reader, h *Header) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64*1024), MaxLineBytes)
		line := 0
		first := true
		var lastT int64
		haveT := false
		holds := history.NewHoldChecker("line")
		for sc.Scan() {
			line++
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 {
				continue
			}
			var w wireEvent
			if err := json.Unmarshal(b, &w); err != nil {
				yield(Event{}, fmt.Errorf("%w: line %d: %s", ErrInvalidEvent, line, jsonProblem(err)))
				return
			}
			if first {
				first = false
				if w.Op == nil && w.Format != nil {
					hd, err := w.header()
					if err != nil {
						yield(Event{}, fmt.Errorf("%w: line %d: %w", ErrBadHeader, line, err))
						return
					}
					if h != nil {
						*h = hd
					}
					continue
				}
			}
			e, err := w.event()
			if err == nil && haveT && e.T < lastT {
				err = fmt.Errorf("%w: field \"t\" is %d, before the previous line's %d (times must not decrease)", ErrInvalidEvent, e.T, lastT)
			}
			if err == nil {
				err = holds.Check(e, line)
			}
			if err != nil {
				yield(Event{}, fmt.Errorf("line %d: %w", line, err))
				return
			}
			lastT, haveT = e.T, true
			if !yield(e, nil) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			if errors.Is(err, bufio.ErrTooLong) {
				err = fmt.Errorf("%w: line %d is longer than %d bytes (MaxLineBytes; a native event is under 150): not a gpumem trace, or corrupt", ErrInvalidEvent, line+1, MaxLineBytes)
			} else {
				err = fmt.Errorf("%w: after line %d: %w", ErrInvalidEvent, line, err)
			}
			yield(Event{}, err)
		}
	}
}

// header checks a header line: the format, a version this package reads
// (a newer one is refused by name, so a user knows to update), and the
// device's figures.
func (w *wireEvent) header() (Header, error) {
	if *w.Format != Format {
		return Header{}, fmt.Errorf("format %q (want %q): not a gpumem trace header", *w.Format, Format)
	}
	if w.Version == nil {
		return Header{}, fmt.Errorf("format %q without a version (want %d to %d)", Format, MinVersion, Version)
	}
	switch v := *w.Version; {
	case v > Version:
		return Header{}, fmt.Errorf("format %q version %d is newer than this gpumem reads (versions %d to %d): update gpumem to replay it", Format, v, MinVersion, Version)
	case v < MinVersion:
		return Header{}, fmt.Errorf("format %q version %d (want %d to %d)", Format, v, MinVersion, Version)
	}
	h := Header{Format: Format, Version: *w.Version}
	if w.Source != nil {
		h.Source = *w.Source
	}
	if w.Streams != nil {
		h.Streams = *w.Streams
	}
	if wd := w.Device; wd != nil {
		d := &Device{Backend: wd.Backend, Capacity: wd.Capacity, MaxPage: wd.MaxPage, Alignment: wd.Alignment, MaxMemory: wd.MaxMemory,
			Granule: wd.Granule, Dynamic: wd.Dynamic, Persistent: wd.Persistent, BaseMode: wd.BaseMode,
			NoRelocate: wd.Relocation != nil && !*wd.Relocation, NoCompact: wd.Compaction != nil && !*wd.Compaction}
		if err := d.Validate(); err != nil {
			return Header{}, err
		}
		h.Device = d
	}
	return h, nil
}

// event checks that the fields its op requires are present and valid.
func (w *wireEvent) event() (Event, error) {
	if w.Op == nil {
		return Event{}, fmt.Errorf("%w: no op", ErrInvalidEvent)
	}
	op, err := ParseOp(*w.Op)
	if err != nil {
		return Event{}, err
	}
	e := Event{Op: op}
	need := func(name string, ok bool) error {
		if !ok {
			return fmt.Errorf("%w: %s without %q", ErrInvalidEvent, op, name)
		}
		return nil
	}
	if err := need("t", w.T != nil); err != nil {
		return Event{}, err
	}
	e.T = *w.T
	switch op {
	case OpAlloc, OpAllocFailed:
		if err := errorsJoinFirst(need("id", w.ID != nil), need("size", w.Size != nil), need("stream", w.Stream != nil)); err != nil {
			return Event{}, err
		}
		e.ID, e.Size, e.Stream = *w.ID, *w.Size, *w.Stream
	case OpDefragment:
		if w.MaxBytes != nil {
			e.Size = *w.MaxBytes
		}
		if m := w.MaxMoves; m != nil {
			if *m < 0 || *m > math.MaxInt32 {
				return Event{}, fmt.Errorf("%w: field \"max_moves\" is %d, want 0 (no bound) to %d", ErrInvalidEvent, *m, math.MaxInt32)
			}
			e.MaxMoves = int32(*m)
		}
	case OpFree:
		if err := need("id", w.ID != nil); err != nil {
			return Event{}, err
		}
		e.ID = *w.ID
		if w.Held != nil {
			e.Held = *w.Held
		}
	case OpRelease:
		if err := need("id", w.ID != nil); err != nil {
			return Event{}, err
		}
		e.ID = *w.ID
	case OpCleanup, OpHold, OpPass:
		if err := need("stream", w.Stream != nil); err != nil {
			return Event{}, err
		}
		e.Stream = *w.Stream
	case OpWindow:
		if err := errorsJoinFirst(need("stream", w.Stream != nil), need("mode", w.Mode != nil)); err != nil {
			return Event{}, err
		}
		e.Stream, e.Mode = *w.Stream, *w.Mode
	case OpCapture:
		if err := errorsJoinFirst(need("stream", w.Stream != nil), need("phase", w.Phase != nil), need("graph", w.Graph != nil)); err != nil {
			return Event{}, err
		}
		e.Stream, e.Phase, e.Graph = *w.Stream, *w.Phase, *w.Graph
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

func errorsJoinFirst(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// jsonProblem says what is wrong with a line in the trace's own terms: the
// field and the kind of value it wants, not the decoder's Go types.
func jsonProblem(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		want := "a string"
		switch typeErr.Type.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			want = "a non-negative integer"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			want = "an integer"
		case reflect.Bool:
			want = "true or false"
		}
		if typeErr.Field == "" {
			return fmt.Sprintf("a line must be a JSON object, not %s", typeErr.Value)
		}
		return fmt.Sprintf("field %q is %s, want %s", typeErr.Field, article(typeErr.Value), want)
	}
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fmt.Sprintf("not valid JSON at column %d: %v", syntaxErr.Offset, err)
	}
	return err.Error()
}

// article prefixes a JSON value kind ("string", "number -1") with "a".
func article(v string) string {
	if v != "" && strings.ContainsRune("aeiou", rune(v[0])) {
		return "an " + v
	}
	return "a " + v
}
