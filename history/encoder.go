package history

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// Encoder writes native events as JSONL, keys in the order of design §13.1
// ("op" first, then the op's fields as listed there). It is not safe for
// concurrent use.
type Encoder struct {
	w     io.Writer
	buf   []byte
	lastT int64
	n     int
	holds *HoldChecker
}

// NewEncoder returns an Encoder writing to w. Each call writes one line with
// one Write call.
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w, holds: NewHoldChecker("event")} }

// WriteHeader writes the header line, with the device when h.Device is
// set. Format and Version are filled in when empty; another format or
// version than this package writes (Version), or a device whose figures
// are impossible, is refused with [ErrBadHeader]. It must come before the
// first event.
func (enc *Encoder) WriteHeader(h Header) error {
	if enc.n > 0 {
		return fmt.Errorf("%w: header after %d events", ErrBadHeader, enc.n)
	}
	if h.Format == "" {
		h.Format = Format
	}
	if h.Version == 0 {
		h.Version = Version
	}
	if h.Format != Format || h.Version != Version {
		return fmt.Errorf("%w: format %q version %d", ErrBadHeader, h.Format, h.Version)
	}
	b := enc.buf[:0]
	b = append(b, `{"format":`...)
	b = appendString(b, h.Format)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(h.Version), 10)
	b = append(b, `,"source":`...)
	b = appendString(b, h.Source)
	b = append(b, `,"streams":`...)
	b = strconv.AppendInt(b, int64(h.Streams), 10)
	if d := h.Device; d != nil {
		if err := d.Validate(); err != nil {
			return err
		}
		b = append(b, `,"device":{"backend":`...)
		b = appendString(b, d.Backend)
		for _, f := range []struct {
			key string
			v   uint64
		}{{"capacity", d.Capacity}, {"max_page", d.MaxPage}, {"alignment", d.Alignment}, {"max_memory", d.MaxMemory}, {"granule", d.Granule}} {
			b = append(b, `,"`...)
			b = append(b, f.key...)
			b = append(b, `":`...)
			b = strconv.AppendUint(b, f.v, 10)
		}
		b = append(b, `,"dynamic":`...)
		b = appendString(b, d.Dynamic)
		b = append(b, `,"persistent":`...)
		b = appendString(b, d.Persistent)
		if d.BaseMode != "" {
			b = append(b, `,"base_mode":`...)
			b = appendString(b, d.BaseMode)
		}
		b = append(b, `,"relocation":`...)
		b = strconv.AppendBool(b, !d.NoRelocate)
		b = append(b, `,"compaction":`...)
		b = strconv.AppendBool(b, !d.NoCompact)
		b = append(b, '}')
	}
	b = append(b, "}\n"...)
	enc.buf = b
	_, err := enc.w.Write(b)
	return err
}

// Encode writes one event. An invalid event (see [Event.Validate]), a time
// before the previous event's, or a release or pass that a reader would
// refuse after the events written before it is refused and nothing is
// written.
func (enc *Encoder) Encode(e Event) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("event %d: %w", enc.n, err)
	}
	if enc.n > 0 && e.T < enc.lastT {
		return fmt.Errorf("%w: event %d: time %d before previous %d", ErrInvalidEvent, enc.n, e.T, enc.lastT)
	}
	if err := enc.holds.Check(e, enc.n); err != nil {
		return fmt.Errorf("event %d: %w", enc.n, err)
	}
	b := enc.buf[:0]
	b = append(b, `{"op":"`...)
	b = append(b, e.Op.String()...)
	b = append(b, `","t":`...)
	b = strconv.AppendInt(b, e.T, 10)
	switch e.Op {
	case OpAlloc, OpAllocFailed:
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, e.ID, 10)
		b = append(b, `,"size":`...)
		b = strconv.AppendUint(b, e.Size, 10)
		b = append(b, `,"stream":`...)
		b = strconv.AppendInt(b, int64(e.Stream), 10)
	case OpDefragment:
		if e.Size != 0 {
			b = append(b, `,"max_bytes":`...)
			b = strconv.AppendUint(b, e.Size, 10)
		}
		if e.MaxMoves != 0 {
			b = append(b, `,"max_moves":`...)
			b = strconv.AppendInt(b, int64(e.MaxMoves), 10)
		}
	case OpFree:
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, e.ID, 10)
		if e.Held {
			b = append(b, `,"held":true`...)
		}
	case OpRelease:
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, e.ID, 10)
	case OpCleanup, OpHold, OpPass:
		b = append(b, `,"stream":`...)
		b = strconv.AppendInt(b, int64(e.Stream), 10)
	case OpWindow:
		b = append(b, `,"stream":`...)
		b = strconv.AppendInt(b, int64(e.Stream), 10)
		b = append(b, `,"mode":`...)
		b = appendString(b, e.Mode)
	case OpCapture:
		b = append(b, `,"stream":`...)
		b = strconv.AppendInt(b, int64(e.Stream), 10)
		b = append(b, `,"phase":`...)
		b = appendString(b, e.Phase)
		b = append(b, `,"graph":`...)
		b = strconv.AppendInt(b, int64(e.Graph), 10)
	}
	b = append(b, "}\n"...)
	enc.buf = b
	if _, err := enc.w.Write(b); err != nil {
		return err
	}
	enc.lastT = e.T
	enc.n++
	return nil
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil { // cannot happen for a string
		panic("history: " + err.Error())
	}
	return append(b, q...)
}
