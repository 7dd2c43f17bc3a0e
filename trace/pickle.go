// The unpickler: a decoder for the plain-data subset of Python's pickle
// format, protocols 2–5 (and the binary opcodes of protocol 1, plus the text
// INT, LONG, FLOAT, PUT and GET), written for PyTorch memory snapshots
// (design §13.2). Protocol-0 text strings (STRING, UNICODE) are not supported.
//
// Design. A pickle is a program for a small stack machine. This file runs
// that program over an in-memory byte slice with an explicit value stack, a
// mark stack and a memo; nothing recurses, so nesting depth costs heap, not
// goroutine stack. Values are:
//
//	None → nil          bool → bool          int → int64 or *big.Int
//	float → float64     str → string         bytes/bytearray → []byte
//	list, set → *pyList (shared by the memo, so later APPENDs are seen)
//	tuple → pyTuple     dict → *pyDict (insertion order kept)
//
// Refused: every opcode that names a global or builds an object (GLOBAL,
// STACK_GLOBAL, INST, OBJ, NEWOBJ, NEWOBJ_EX, REDUCE, BUILD, EXT1/2/4,
// PERSID, BINPERSID) fails with ErrPickleGlobal before anything is looked
// up: the reader never instantiates a class. Out-of-band buffers
// (NEXT_BUFFER, READONLY_BUFFER) and unknown opcodes fail with ErrPickle.
//
// Invariants.
//   - (U1) Every length read from the input is checked against the bytes
//     left before anything is allocated, so a corrupt length cannot make the
//     decoder allocate more than the input's size.
//   - (U2) Every pop checks the stack (and the mark stack) first; an empty
//     stack is an ErrPickle naming the opcode and its offset, never a panic.
//   - (U3) The memo is a map, so a huge memo index costs one entry.
//   - (U4) Nesting is bounded: every tuple, list and dict records its depth
//     (1 + the deepest item it was built or extended with), and one deeper
//     than MaxNesting is an ErrPickle. Lists and dicts are shared through
//     the memo and may be extended after being placed in another container
//     (even in themselves), so the recorded depth bounds how the pickle
//     built the value, not every path through it: no code in this package
//     walks decoded values recursively (errors describe a value by its type
//     and length, see describe), so a cycle or a stale depth costs nothing.
//   - (U5) A text INT or LONG argument longer than maxIntDigits digits is
//     refused: decimal conversion is quadratic, and no snapshot field needs
//     more than 20 digits.

package trace

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxNesting bounds how deeply tuples, lists and dicts may nest in a decoded
// snapshot (pickle or JSON); a real snapshot nests fewer than 10 levels.
const MaxNesting = 1000

// maxIntDigits bounds the decimal digits of an integer literal (pickle text
// INT/LONG, JSON numbers): 2^64 has 20 digits.
const maxIntDigits = 40

// pyList is a Python list (or set). It is a pointer so that the memo and the
// stack share it, as Python does. depth is its nesting depth as built (U4).
type pyList struct {
	items []any
	depth int
}

// pyTuple is a Python tuple.
type pyTuple []any

// pyDict is a Python dict with insertion order kept. String keys are
// indexed once the dict grows past a few entries, so building a dict of n
// items costs O(n), not O(n²), even from a hostile pickle.
type pyDict struct {
	keys  []any
	vals  []any
	sidx  map[string]int // index of string keys; nil while the dict is small
	depth int            // nesting depth as built (U4)
}

const dictIndexAt = 16

// get returns the value under the string key k.
func (d *pyDict) get(k string) (any, bool) {
	if d.sidx != nil {
		i, ok := d.sidx[k]
		if !ok {
			return nil, false
		}
		return d.vals[i], true
	}
	for i, key := range d.keys {
		if s, ok := key.(string); ok && s == k {
			return d.vals[i], true
		}
	}
	return nil, false
}

// set stores v under k. A string key already present is replaced; other
// keys are appended (snapshot readers only ever look keys up by string).
func (d *pyDict) set(k, v any) {
	s, isString := k.(string)
	if isString {
		if d.sidx != nil {
			if i, ok := d.sidx[s]; ok {
				d.vals[i] = v
				return
			}
		} else {
			for i, key := range d.keys {
				if ks, ok := key.(string); ok && ks == s {
					d.vals[i] = v
					return
				}
			}
		}
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	switch {
	case d.sidx != nil && isString:
		d.sidx[s] = len(d.keys) - 1
	case d.sidx == nil && len(d.keys) >= dictIndexAt:
		d.sidx = make(map[string]int, len(d.keys))
		for i, key := range d.keys {
			if ks, ok := key.(string); ok {
				d.sidx[ks] = i
			}
		}
	}
}

// unpickler is the stack machine's state. Marks are kept as stack heights.
type unpickler struct {
	data  []byte
	pos   int
	stack []any
	marks []int
	memo  map[uint64]any
	op    byte // current opcode, for messages
	opPos int
}

// unpickle decodes one pickle from data and returns its value.
func unpickle(data []byte) (any, error) {
	u := &unpickler{data: data, memo: make(map[uint64]any)}
	return u.run()
}

// depthTuple is how a tuple travels on the stack and in the memo while the
// pickle runs: with its nesting depth. run unwraps every one before
// returning (see unwrap).
type depthTuple struct {
	t     pyTuple
	depth int
}

// depthOf is the nesting depth of a value on the stack: 0 for a scalar.
func depthOf(v any) int {
	switch x := v.(type) {
	case *pyList:
		return x.depth
	case *pyDict:
		return x.depth
	case *depthTuple:
		return x.depth
	}
	return 0
}

// checkDepth refuses a container nested deeper than MaxNesting.
func (u *unpickler) checkDepth(d int) error {
	if d > MaxNesting {
		return u.errf("nesting deeper than %d levels", MaxNesting)
	}
	return nil
}

// unwrap returns the value to store in a container or return: a tuple
// without its depth.
func unwrap(v any) any {
	if t, ok := v.(*depthTuple); ok {
		return t.t
	}
	return v
}

// itemsDepth unwraps items in place and returns 1 + their deepest depth,
// refusing one above MaxNesting.
func (u *unpickler) itemsDepth(items []any) (int, error) {
	d := 0
	for i, it := range items {
		d = max(d, depthOf(it))
		items[i] = unwrap(it)
	}
	if err := u.checkDepth(d + 1); err != nil {
		return 0, err
	}
	return d + 1, nil
}

// newTuple builds a tuple from stack items.
func (u *unpickler) newTuple(items []any) (*depthTuple, error) {
	d, err := u.itemsDepth(items)
	if err != nil {
		return nil, err
	}
	return &depthTuple{t: pyTuple(items), depth: d}, nil
}

func (u *unpickler) errf(format string, args ...any) error {
	return fmt.Errorf("%w: opcode 0x%02x at offset %d: %s", ErrPickle, u.op, u.opPos, fmt.Sprintf(format, args...))
}

func (u *unpickler) need(n uint64) ([]byte, error) {
	if n > uint64(len(u.data)-u.pos) {
		return nil, u.errf("truncated: need %d bytes, %d left", n, len(u.data)-u.pos)
	}
	b := u.data[u.pos : u.pos+int(n)]
	u.pos += int(n)
	return b, nil
}

func (u *unpickler) u8() (uint64, error) {
	b, err := u.need(1)
	if err != nil {
		return 0, err
	}
	return uint64(b[0]), nil
}

func (u *unpickler) u16() (uint64, error) {
	b, err := u.need(2)
	if err != nil {
		return 0, err
	}
	return uint64(binary.LittleEndian.Uint16(b)), nil
}

func (u *unpickler) u32() (uint64, error) {
	b, err := u.need(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.LittleEndian.Uint32(b)), nil
}

func (u *unpickler) u64() (uint64, error) {
	b, err := u.need(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// line reads up to and excluding the next '\n' (text protocol arguments).
func (u *unpickler) line() (string, error) {
	for i := u.pos; i < len(u.data); i++ {
		if u.data[i] == '\n' {
			s := string(u.data[u.pos:i])
			u.pos = i + 1
			return s, nil
		}
	}
	return "", u.errf("truncated: no end of line")
}

func (u *unpickler) push(v any) { u.stack = append(u.stack, v) }

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, u.errf("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, u.errf("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark pops everything above the innermost mark and the mark itself.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.errf("no mark")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) popN(n int) ([]any, error) {
	floor := 0
	if len(u.marks) > 0 {
		floor = u.marks[len(u.marks)-1]
	}
	if len(u.stack)-floor < n {
		return nil, u.errf("stack underflow")
	}
	items := append([]any(nil), u.stack[len(u.stack)-n:]...)
	u.stack = u.stack[:len(u.stack)-n]
	return items, nil
}

// decodeLong decodes a little-endian two's-complement integer.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		if b[len(b)-1]&0x80 != 0 && len(b) < 8 {
			v |= ^uint64(0) << (8 * len(b)) // sign-extend
		}
		if len(b) < 8 || b[7]&0x80 != 0 || v <= math.MaxInt64 {
			return int64(v)
		}
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	n := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if n.IsInt64() {
		return n.Int64()
	}
	return n
}

func (u *unpickler) memoize(idx uint64) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	u.memo[idx] = v
	return nil
}

func (u *unpickler) get(idx uint64) error {
	v, ok := u.memo[idx]
	if !ok {
		return u.errf("memo key %d not found", idx)
	}
	u.push(v)
	return nil
}

func (u *unpickler) str(b []byte) (string, error) {
	if !utf8.Valid(b) {
		return "", u.errf("string is not valid UTF-8")
	}
	return string(b), nil
}

// run executes the pickle program until STOP.
func (u *unpickler) run() (any, error) {
	for {
		if u.pos >= len(u.data) {
			return nil, fmt.Errorf("%w: truncated at offset %d: no STOP", ErrPickle, u.pos)
		}
		u.opPos = u.pos
		u.op = u.data[u.pos]
		u.pos++
		var err error
		switch u.op {
		case 0x80: // PROTO
			var p uint64
			if p, err = u.u8(); err == nil && p > 5 {
				err = u.errf("unsupported protocol %d", p)
			}
		case 0x95: // FRAME: framing is advisory; the length must still fit.
			var n uint64
			if n, err = u.u64(); err == nil && n > uint64(len(u.data)-u.pos) {
				err = u.errf("frame of %d bytes, %d left", n, len(u.data)-u.pos)
			}
		case '.': // STOP
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			return unwrap(v), nil
		case '(': // MARK
			u.marks = append(u.marks, len(u.stack))
		case '0': // POP
			if _, err = u.pop(); err != nil && len(u.marks) > 0 && len(u.stack) == u.marks[len(u.marks)-1] {
				u.marks, err = u.marks[:len(u.marks)-1], nil // POP of a mark
			}
		case '1': // POP_MARK
			_, err = u.popMark()
		case '2': // DUP
			var v any
			if v, err = u.top(); err == nil {
				u.push(v)
			}
		case 'N':
			u.push(nil)
		case 0x88:
			u.push(true)
		case 0x89:
			u.push(false)
		case 'J': // BININT
			var v uint64
			if v, err = u.u32(); err == nil {
				u.push(int64(int32(uint32(v))))
			}
		case 'K': // BININT1
			var v uint64
			if v, err = u.u8(); err == nil {
				u.push(int64(v))
			}
		case 'M': // BININT2
			var v uint64
			if v, err = u.u16(); err == nil {
				u.push(int64(v))
			}
		case 0x8a, 0x8b: // LONG1, LONG4
			var n uint64
			if u.op == 0x8a {
				n, err = u.u8()
			} else {
				n, err = u.u32()
				if err == nil && int32(uint32(n)) < 0 {
					err = u.errf("negative LONG4 length")
				}
			}
			var b []byte
			if err == nil {
				if b, err = u.need(n); err == nil {
					u.push(decodeLong(b))
				}
			}
		case 'I', 'L': // INT, LONG (text)
			var s string
			if s, err = u.line(); err == nil {
				err = u.textInt(s)
			}
		case 'F': // FLOAT (text)
			var s string
			if s, err = u.line(); err == nil {
				var f float64
				if f, err = strconv.ParseFloat(s, 64); err != nil {
					err = u.errf("bad float %s", describe(s))
				} else {
					u.push(f)
				}
			}
		case 'G': // BINFLOAT, big-endian
			var b []byte
			if b, err = u.need(8); err == nil {
				u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
			}
		case 'X', 0x8c, 0x8d, 'T', 'U': // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8, BINSTRING, SHORT_BINSTRING
			var n uint64
			switch u.op {
			case 'X', 'T':
				n, err = u.u32()
			case 0x8c, 'U':
				n, err = u.u8()
			default:
				n, err = u.u64()
			}
			var b []byte
			if err == nil {
				b, err = u.need(n)
			}
			var s string
			if err == nil {
				if s, err = u.str(b); err == nil {
					u.push(s)
				}
			}
		case 'B', 'C', 0x8e, 0x96: // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
			var n uint64
			switch u.op {
			case 'B':
				n, err = u.u32()
			case 'C':
				n, err = u.u8()
			default:
				n, err = u.u64()
			}
			var b []byte
			if err == nil {
				if b, err = u.need(n); err == nil {
					u.push(append([]byte(nil), b...))
				}
			}
		case '}':
			u.push(&pyDict{depth: 1})
		case ']', 0x8f: // EMPTY_LIST, EMPTY_SET
			u.push(&pyList{depth: 1})
		case ')':
			u.push(&depthTuple{t: pyTuple{}, depth: 1})
		case 'l', 0x91: // LIST, FROZENSET
			var items []any
			if items, err = u.popMark(); err == nil {
				var d int
				if d, err = u.itemsDepth(items); err == nil {
					u.push(&pyList{items: items, depth: d})
				}
			}
		case 't', 0x85, 0x86, 0x87: // TUPLE, TUPLE1..3
			var items []any
			if u.op == 't' {
				items, err = u.popMark()
			} else {
				items, err = u.popN(int(u.op - 0x84))
			}
			var t *depthTuple
			if err == nil {
				if t, err = u.newTuple(items); err == nil {
					u.push(t)
				}
			}
		case 'd':
			var items []any
			if items, err = u.popMark(); err == nil {
				if len(items)%2 != 0 {
					err = u.errf("odd number of dict items")
				} else {
					var depth int
					if depth, err = u.itemsDepth(items); err == nil {
						d := &pyDict{depth: depth}
						for i := 0; i < len(items); i += 2 {
							d.set(items[i], items[i+1])
						}
						u.push(d)
					}
				}
			}
		case 'a': // APPEND
			var v, l any
			if v, err = u.pop(); err == nil {
				if l, err = u.top(); err == nil {
					err = u.appendTo(l, v)
				}
			}
		case 'e', 0x90: // APPENDS, ADDITEMS
			var items []any
			if items, err = u.popMark(); err == nil {
				var l any
				if l, err = u.top(); err == nil {
					err = u.appendTo(l, items...)
				}
			}
		case 's': // SETITEM
			var kv []any
			if kv, err = u.popN(2); err == nil {
				err = u.setItems(kv)
			}
		case 'u': // SETITEMS
			var kv []any
			if kv, err = u.popMark(); err == nil {
				if len(kv)%2 != 0 {
					err = u.errf("odd number of dict items")
				} else {
					err = u.setItems(kv)
				}
			}
		case 0x94: // MEMOIZE
			err = u.memoize(uint64(len(u.memo)))
		case 'q', 'r': // BINPUT, LONG_BINPUT
			var idx uint64
			if u.op == 'q' {
				idx, err = u.u8()
			} else {
				idx, err = u.u32()
			}
			if err == nil {
				err = u.memoize(idx)
			}
		case 'p', 'g': // PUT, GET (text)
			var s string
			if s, err = u.line(); err == nil {
				var idx uint64
				if idx, err = strconv.ParseUint(s, 10, 32); err != nil {
					err = u.errf("bad memo index %s", describe(s))
				} else if u.op == 'p' {
					err = u.memoize(idx)
				} else {
					err = u.get(idx)
				}
			}
		case 'h', 'j': // BINGET, LONG_BINGET
			var idx uint64
			if u.op == 'h' {
				idx, err = u.u8()
			} else {
				idx, err = u.u32()
			}
			if err == nil {
				err = u.get(idx)
			}
		case 'c', 0x93, 'i', 'o', 0x81, 0x92, 'R', 'b', 0x82, 0x83, 0x84, 'P', 'Q':
			return nil, fmt.Errorf("%w: opcode 0x%02x (%s) at offset %d", ErrPickleGlobal, u.op, refusedName[u.op], u.opPos)
		default:
			return nil, u.errf("unsupported opcode")
		}
		if err != nil {
			return nil, err
		}
	}
}

var refusedName = map[byte]string{
	'c': "GLOBAL", 0x93: "STACK_GLOBAL", 'i': "INST", 'o': "OBJ", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX",
	'R': "REDUCE", 'b': "BUILD", 0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", 'P': "PERSID", 'Q': "BINPERSID",
}

func (u *unpickler) textInt(s string) error {
	switch s {
	case "00":
		u.push(false)
		return nil
	case "01":
		u.push(true)
		return nil
	}
	if n := len(s); n > 0 && s[n-1] == 'L' {
		s = s[:n-1]
	}
	if digits := len(strings.TrimLeft(s, "+-")); digits > maxIntDigits {
		return u.errf("integer of %d digits (at most %d)", digits, maxIntDigits)
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		u.push(v)
		return nil
	}
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return u.errf("bad integer %s", describe(s))
	}
	u.push(b)
	return nil
}

func (u *unpickler) appendTo(l any, items ...any) error {
	pl, ok := l.(*pyList)
	if !ok {
		return u.errf("append to %s, not a list", describe(unwrap(l)))
	}
	d, err := u.itemsDepth(items)
	if err != nil {
		return err
	}
	pl.depth = max(pl.depth, d)
	pl.items = append(pl.items, items...)
	return nil
}

func (u *unpickler) setItems(kv []any) error {
	d, err := u.top()
	if err != nil {
		return err
	}
	pd, ok := d.(*pyDict)
	if !ok {
		return u.errf("setitem on %s, not a dict", describe(unwrap(d)))
	}
	depth, err := u.itemsDepth(kv)
	if err != nil {
		return err
	}
	pd.depth = max(pd.depth, depth)
	for i := 0; i < len(kv); i += 2 {
		pd.set(kv[i], kv[i+1])
	}
	return nil
}

// pickleOpcodes are the bytes run knows as opcodes (decoded or refused): a
// snapshot that is not JSON must start with one of them.
var pickleOpcodes = func() (t [256]bool) {
	for _, b := range []byte("\x80\x95.(012NJKM\x8a\x8bILFGX\x8c\x8dTUBC\x8e\x96}]\x8f)l\x91t\x85\x86\x87dae\x90su\x94qrpghj" +
		"c\x93io\x81\x92Rb\x82\x83\x84PQ\x88\x89") {
		t[b] = true
	}
	return t
}()
