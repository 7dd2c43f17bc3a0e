package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
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
	// non-blank line is a JSON object with an "op" or a "format" key.
	InputJSONL InputKind = iota + 1
	// InputSnapshot is a PyTorch memory snapshot: a pickle (of protocol 2
	// or later, or of a dict or list in protocols 0 and 1), or one JSON
	// object (the first line is not a complete object with "op" or
	// "format", as a pretty-printed or single-line dump never is).
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
// a trace; the message lists the formats that are read.
var ErrUnknownFormat = errors.New("neither a PyTorch memory snapshot (pickle or JSON, optionally gzipped) nor a gpumem JSONL trace (optionally gzipped)")

// sniffBytes is how much of the decompressed input Sniff may look at: one
// JSONL line at most, plus the white space before it is allowed to be long
// only that far. A JSON snapshot's first line is usually the whole file, so
// not finding a line's end within it means "snapshot".
const sniffBytes = MaxLineBytes + 1

// Sniff tells what r holds. A gzip stream (by its magic bytes) is
// decompressed first and gzipped reports it. The returned reader yields the
// (decompressed) content from its first byte, peeked bytes included; read
// from it, not from r. Errors: ErrUnknownFormat (with the first byte and
// its offset) for anything else, content still returned so that a caller
// with a hint of its own (a ".jsonl" name) can decode it and name the bad
// line; ErrSnapshot for an empty input or a bad gzip header; or r's own
// read error.
func Sniff(r io.Reader) (kind InputKind, content io.Reader, gzipped bool, err error) {
	raw := bufio.NewReader(r)
	var src io.Reader = raw
	if magic, _ := raw.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(raw)
		if err != nil {
			return 0, nil, true, fmt.Errorf("%w: gzip: %w", ErrSnapshot, err)
		}
		src, gzipped = zr, true
	}
	br := bufio.NewReaderSize(src, sniffBytes)
	head, err := br.Peek(sniffBytes)
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		if gzipped {
			err = fmt.Errorf("%w: gzip: %w", ErrSnapshot, err)
		}
		return 0, nil, gzipped, err
	}
	start := bytes.IndexFunc(head, func(c rune) bool { return c != ' ' && c != '\t' && c != '\r' && c != '\n' })
	if start < 0 {
		if len(head) < sniffBytes {
			return 0, nil, gzipped, fmt.Errorf("%w: empty input", ErrSnapshot)
		}
		return 0, br, gzipped, fmt.Errorf("%w: the first %d bytes are white space", ErrUnknownFormat, len(head))
	}
	first := head[start]
	switch {
	case first == '{':
		if isTraceLine(head[start:], len(head) < sniffBytes) {
			return InputJSONL, br, gzipped, nil
		}
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

// isTraceLine reports whether b starts with a complete line that is a JSON
// object with an "op" or a "format" key: a native event or header. whole
// says b runs to the end of the input, so a last line needs no newline.
func isTraceLine(b []byte, whole bool) bool {
	end := bytes.IndexByte(b, '\n')
	if end < 0 {
		if !whole {
			return false // no line's end in reach: one long JSON document
		}
		end = len(b)
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(b[:end], &keys) != nil {
		return false
	}
	_, op := keys["op"]
	_, format := keys["format"]
	return op || format
}
