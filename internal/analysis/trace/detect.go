package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// InputKind is what an input file holds, judged by its content, never by
// its name: a gzipped ".jsonl", a ".JSONL", or a snapshot saved as
// "trace.txt" are each read as what they are.
type InputKind int

const (
	// InputJSONL is a native gpumem trace (design §13.1): its first
	// non-blank line opens a JSON object with an "op" or a "format" key at
	// its top level, whatever else the line holds. The key decides, not
	// the line's validity: a trace whose header or first event holds a
	// NaN, or an unknown field nested deeper than a decoder allows, is
	// still a trace, and the trace decoder names the line and what is
	// wrong with it; the snapshot reader would only say that the file is
	// not a snapshot.
	InputJSONL InputKind = iota + 1
	// InputSnapshot is a PyTorch memory snapshot: a pickle (of protocol 2
	// or later, or of a dict or list in protocols 0 and 1), or one JSON
	// object (whose first line has no top-level "op" or "format" key, as
	// a pretty-printed or single-line dump of a snapshot never has) or
	// list (of segments).
	InputSnapshot
)

func (k InputKind) String() string {
	switch k {
	case InputJSONL:
		return "gpumem JSONL trace"
	case InputSnapshot:
		return "PyTorch snapshot"
	}
	return fmt.Sprintf("InputKind(%d)", int(k))
}

// ErrUnknownFormat is the error for an input that is neither a snapshot nor
// a trace, an empty one included; the message lists the formats that are
// read.
var ErrUnknownFormat = errors.New("neither a PyTorch memory snapshot (pickle or JSON, optionally gzipped) nor a gpumem JSONL trace (optionally gzipped)")

// ErrCorruptGzip is Sniff's error for an input that opens as a gzip
// stream (its magic bytes) but cannot be decompressed as far as Sniff
// reads: what it holds is unknown, so the message names neither a
// snapshot nor a trace. It wraps compress/gzip's or compress/flate's own
// error.
var ErrCorruptGzip = errors.New("corrupt gzip stream")

// sniffBytes is how much of the decompressed input Sniff may look at: one
// JSONL line at most, plus the white space before it is allowed to be long
// only that far. A JSON snapshot's first line is usually the whole file, so
// not finding a line's end within it means "snapshot".
const sniffBytes = MaxLineBytes + 1

// Sniff tells what r holds. A gzip stream (by its magic bytes) is
// decompressed first and gzipped reports it. The returned reader yields the
// (decompressed) content from its first byte, peeked bytes included; read
// from it, not from r. Errors: ErrUnknownFormat (with the first byte and
// its offset, or saying the input is empty or white space) for anything
// else, content still returned so that a caller with a hint of its own (a
// ".jsonl" name) can decode it and name the bad line or say it has no
// events; ErrCorruptGzip for a gzip stream that cannot be decompressed,
// content nil; or r's own read error.
func Sniff(r io.Reader) (kind InputKind, content io.Reader, gzipped bool, err error) {
	raw := bufio.NewReader(r)
	var src io.Reader = raw
	if magic, _ := raw.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(raw)
		if err != nil {
			return 0, nil, true, fmt.Errorf("%w: %w", ErrCorruptGzip, err)
		}
		src, gzipped = zr, true
	}
	br := bufio.NewReaderSize(src, sniffBytes)
	head, err := br.Peek(sniffBytes)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		if gzipped {
			err = fmt.Errorf("%w: %w", ErrCorruptGzip, err)
		}
		return 0, nil, gzipped, err
	}
	start := bytes.IndexFunc(head, func(c rune) bool { return c != ' ' && c != '\t' && c != '\r' && c != '\n' })
	if start < 0 {
		if len(head) < sniffBytes {
			return 0, br, gzipped, fmt.Errorf("%w: empty input", ErrUnknownFormat)
		}
		return 0, br, gzipped, fmt.Errorf("%w: the first %d bytes are white space", ErrUnknownFormat, len(head))
	}
	first := head[start]
	switch {
	case first == '{':
		if isTraceLine(head[start:]) {
			return InputJSONL, br, gzipped, nil
		}
		return InputSnapshot, br, gzipped, nil
	case first == '[':
		// A JSON list: the segments torch.cuda.memory_snapshot()
		// returns, as JSON. No trace line opens with one.
		return InputSnapshot, br, gzipped, nil
	case first == 0x80 || first == '(' || first == '}' || first == ']':
		// PROTO opens every pickle of protocol 2 and up (PyTorch writes
		// 4 or 5); a protocol 0 or 1 pickle of a dict or list opens with
		// MARK, EMPTY_DICT or EMPTY_LIST. Other opcodes are letters that
		// open ordinary text too ("hello" is BINGET 'e'...).
		return InputSnapshot, br, gzipped, nil
	}
	return 0, br, gzipped, fmt.Errorf("%w: it starts with byte %#02x at offset %d", ErrUnknownFormat, first, start)
}

// isTraceLine reports whether the line b starts with (up to its first
// newline, or all of b) opens a JSON object with an "op" or a "format" key
// at its top level: a native event or header. It reads the object's
// keys, not its values: a value that is not JSON (NaN) or nests deeply is
// passed over by its brackets and strings alone, so a trace line with a
// bad value is still a trace line, and the trace decoder then names it. A
// line cut short (no newline within b) counts the keys before the cut: a
// single-line JSON snapshot's top-level keys are "segments",
// "device_traces" and the like, never these.
func isTraceLine(b []byte) bool {
	if end := bytes.IndexByte(b, '\n'); end >= 0 {
		b = b[:end]
	}
	depth := 0       // bracket depth: 1 inside the top-level object
	wantKey := false // at depth 1, a string here is a key
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(b) {
				return false // cut inside a string
			}
			if depth == 1 && wantKey {
				if k := string(b[i+1 : j]); k == "op" || k == "format" {
					rest := bytes.TrimLeft(b[j+1:], " \t\r")
					if len(rest) > 0 && rest[0] == ':' {
						return true
					}
				}
				wantKey = false
			}
			i = j
		case '{', '[':
			if depth == 0 && (c != '{' || i > 0) {
				return false // b opens no object
			}
			depth++
			wantKey = depth == 1
		case '}', ']':
			depth--
			if depth <= 0 {
				return false // the top-level object closed without the keys
			}
		case ',':
			wantKey = depth == 1
		}
	}
	return false
}
