// The unpickler: a decoder for the plain-data subset of Python's pickle
// format, protocols 2–5 (and the binary opcodes of protocol 1, plus the text
// INT, LONG, FLOAT, PUT and GET), written for PyTorch memory snapshots
// (design §13.2). Protocol-0 text strings (STRING, UNICODE) are not supported.
//
// Design. A pickle is a program for a small stack machine. This file runs
// that program over its input with an explicit value stack, a mark stack and
// a memo; nothing recurses, so nesting depth costs heap, not goroutine stack.
// The input streams through a refilled window (see fill), so reading holds
// the decoded values and one window, not the whole file. Values are:
//
//	None → nil          bool → bool          int → int64 or *big.Int
//	float → float64     str → string         bytes/bytearray → []byte
//	list, set → *pyList (shared by the memo, so later APPENDs are seen)
//	tuple → pyTuple     dict → *pyDict (insertion order kept)
//
// Stack frames are not kept. A real snapshot spends most of its bytes, and
// a decoder most of its time and memory, on the "frames" list of every trace
// entry, segment and block (some 60 frame references each), which gpumem
// never reads. A list that is the value of a "frames" key (see
// atFramesKey) is built elided: it counts its items and keeps their nesting
// depth, nothing else. The frame dicts themselves are still decoded and
// memoized where the pickle first builds them, so every later memo
// reference resolves; only the per-entry lists of references are dropped,
// and memory while reading is proportional to the trace, not to its stack
// depth. An elided list is never mistaken for an empty one: asList refuses
// it and describe names it, so a converter that reads a list where a
// "frames" value stands fails with a message instead of reading nothing.
// Each elided list carries its ordinal among the input's frames lists, so
// that a second read (frames.go, Snapshot.ReadFrames) can keep the few a
// report names, as ordinary lists, and stop right after them.
//
// Refused: every opcode that names a global or builds an object (GLOBAL,
// STACK_GLOBAL, INST, OBJ, NEWOBJ, NEWOBJ_EX, REDUCE, BUILD, EXT1/2/4,
// PERSID, BINPERSID) fails with ErrPickleGlobal before anything is looked
// up: the reader never instantiates a class. Out-of-band buffers
// (NEXT_BUFFER, READONLY_BUFFER) and unknown opcodes fail with ErrPickle.
//
// Invariants.
//   - (U1) Every length read from the input is checked against the bytes the
//     input may still hold (its size in memory, the size limit when
//     streaming) before anything is allocated, and the window grows only by
//     doubling once it is full of bytes that actually arrived, so a corrupt
//     length cannot make the decoder allocate more than about twice the
//     input it was given.
//   - (U2) Every pop checks the stack (and the mark stack) first; an empty
//     stack is an ErrPickle naming the opcode and its offset, never a panic.
//     A cut input is an ErrPickle saying "truncated at byte N", N the
//     input's length.
//   - (U3) The memo is a dense slice for the sequential indices that
//     MEMOIZE and real pickles use, with a map beside it for any index past
//     the slice's end, so a huge memo index costs one entry.
//   - (U4) Nesting is bounded: every tuple, list and dict records its depth
//     (1 + the deepest item it was built or extended with), and one deeper
//     than MaxNesting is an ErrPickle; an elided frames list keeps no items
//     and has depth 1 (the values it dropped were bounded as they were
//     built). Lists and dicts are shared through the memo and may be
//     extended after being placed in another container (even in
//     themselves), so the recorded depth bounds how the pickle built the
//     value, not every path through it: no code in this package walks
//     decoded values recursively (errors describe a value by its type and
//     length, see describe), so a cycle or a stale depth costs nothing.
//   - (U5) A text INT or LONG argument longer than maxIntDigits digits is
//     refused: decimal conversion is quadratic, and no snapshot field needs
//     more than 20 digits.
//   - (U6) Memory is bounded by the input read: every value built adds
//     what it holds to a count of held bytes (containers and their
//     elements, memo entries, strings and byte strings, boxed numbers; the
//     stack and marks are counted by their capacity, so a value pushed by
//     a memo reference is counted too, in its stack slot and then in the
//     container it goes to), and before each opcode run refuses the
//     input with a *TooLargeError once the count passes the held-bytes
//     budget for the bytes read so far (limits.go). The check costs a
//     compare per opcode: the budget is worked out again only when the
//     count passes the last allowance.

package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
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

// framesList is an elided list, the value of a "frames" key (see the file
// comment): it keeps only the number of items it was built with, n, and
// its ordinal among the input's frames lists, seq, from 0 (frames.go). It
// is a pointer, shared through the memo like a pyList, and holds no
// pointers, so the collector never scans it. Only describe, asList and
// ReadFrames look at it, and asList refuses it. Its depth is 1: the items
// it dropped are not reachable through it (U4). The counts are 32 bits
// (16 bytes a list read measurably slower) and wrap past 2^31, which takes
// gigabytes of input: a wrapped count is only ever a wrong number in a
// message, or a frames read refused as another input.
type framesList struct {
	n, seq int32
}

// keptFrames is a frames list kept with its items: one a second read asks
// for (frames.go), or, in every read, the frames of a trace entry that
// releases cache (segment_free, segment_unmap), which tell whose release it
// was (releases.go). To the decoder it is an elided list in every way
// (depth 1, appends not checked for depth), except that it keeps its
// items; seq is its ordinal among the input's frames lists, as an elided
// list's.
type keptFrames struct {
	items []any
	seq   int32
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

// sameString is a == b, rejecting most different keys on their length and
// end bytes before comparing them whole: the small dicts of a snapshot are
// searched linearly (building and reading every trace entry), and their
// keys mostly differ there.
func sameString(a, b string) bool {
	return len(a) == len(b) && (len(a) == 0 || a[0] == b[0] && a[len(a)-1] == b[len(b)-1] && a == b)
}

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
		if s, ok := key.(string); ok && sameString(s, k) {
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
				if ks, ok := key.(string); ok && sameString(ks, s) {
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

// window is the unpickler's read size: large enough that refills are rare
// next to the opcodes between them, small next to a real snapshot.
const window = 256 << 10

// unpickler is the stack machine's state.
//
// Input: buf[pos:] are the bytes read but not yet decoded, and base is the
// input offset of buf[0]. When r is nil, buf is the whole input. Otherwise
// fill slides and refills buf from r; limit is the most input bytes (counted
// from the input's start, base's origin) that may be read.
type unpickler struct {
	r     io.Reader
	buf   []byte
	pos   int
	base  int64
	limit int64
	eof   bool  // r returned io.EOF
	rerr  error // r's first other error, returned as is (the caller names the source)

	slabs     slabs
	ints      [intCache]boxedInt // recently boxed integers (pushInt)
	shapes    [shapes][]any      // recent distinct-string key sequences (fillDict)
	nextShape int

	budget   heldBudget // the held-bytes limit (U6)
	held     int64      // bytes held by the values built so far, the stack and marks aside
	heldNext int64      // run checks the budget when held bytes pass this
	refused  error      // the budget refused the stack's growth (growStack): run returns it

	stack []any
	marks []int   // stack heights of the open marks
	floor int     // height of the innermost mark, 0 with none: pops stop there (U2)
	memo  [][]any // memo indices 0..memoN-1 in chunks of memoChunk (U3)
	memoN uint64
	far   map[uint64]any
	op    byte // current opcode, for messages
	opPos int64

	framesSeq  int        // frames lists begun so far: the next one's ordinal
	framesLate bool       // a frames list grew after a later one began
	keep       *frameKeep // frames lists to keep, nil for none (frames.go)
}

// unpickle decodes one pickle held in memory and returns its value, its
// held bytes bounded as for a snapshot of its size.
func unpickle(data []byte) (any, error) {
	u := &unpickler{buf: data, limit: int64(len(data)), budget: newHeldBudget(int64(len(data)), heldPerInputByte)}
	return u.run()
}

// unpickleFrom decodes one pickle streamed from r, whose first byte is at
// input offset base; at most limit bytes of input (from offset 0) are read,
// beyond that the error is tooLarge, and the values it builds hold at most
// what budget allows (U6). After STOP the rest of r is read and discarded,
// still within limit, so a compressed stream's checksum is verified and
// the bound covers the whole input, as when it was read whole.
// With keep set, the frames lists it names are kept (frames.go) and the
// read stops, errFramesKept, once the last of them is built.
func unpickleFrom(r io.Reader, base, limit int64, budget heldBudget, tooLarge error, keep *frameKeep) (any, error) {
	u := &unpickler{r: r, base: base, limit: limit, budget: budget, buf: make([]byte, 0, window), stack: make([]any, 0, 256), keep: keep}
	v, err := u.run()
	if keep != nil {
		keep.late = u.framesLate
	}
	if errors.Is(err, errInputLimit) {
		return nil, tooLarge
	}
	if err != nil {
		return nil, err
	}
	for !u.eof && u.rerr == nil {
		u.pos = len(u.buf)
		if err := u.fill(1); err != nil && !errors.Is(err, ErrPickle) {
			if errors.Is(err, errInputLimit) {
				return nil, tooLarge
			}
			return nil, err
		}
	}
	if u.rerr != nil {
		return nil, u.rerr
	}
	return v, nil
}

// slabs hand out the small values a snapshot holds tens of thousands of
// (a dict per trace entry, segment, block and distinct frame; a list per
// frames value) from chunks, a few allocations instead of one or two per
// value: allocation and the collector's work on it were a third of reading
// time. A chunk lives as long as any value carved from it, which costs
// nothing here: the memo keeps every value alive until the pickle ends.
type slabs struct {
	dicts  []pyDict
	lists  []pyList
	frames []framesList
	kv     []any
}

const (
	slabValues = 256  // dicts or lists per chunk
	slabKV     = 4096 // dict slots per chunk
)

func (s *slabs) dict(depth int) *pyDict {
	if len(s.dicts) == cap(s.dicts) {
		s.dicts = make([]pyDict, 0, slabValues)
	}
	s.dicts = s.dicts[:len(s.dicts)+1]
	d := &s.dicts[len(s.dicts)-1]
	d.depth = depth
	return d
}

func (s *slabs) list(depth int) *pyList {
	if len(s.lists) == cap(s.lists) {
		s.lists = make([]pyList, 0, slabValues)
	}
	s.lists = s.lists[:len(s.lists)+1]
	l := &s.lists[len(s.lists)-1]
	l.depth = depth
	return l
}

func (s *slabs) framesList(n, seq int) *framesList {
	if len(s.frames) == cap(s.frames) {
		s.frames = make([]framesList, 0, slabValues)
	}
	s.frames = s.frames[:len(s.frames)+1]
	l := &s.frames[len(s.frames)-1]
	l.n, l.seq = int32(n), int32(seq)
	return l
}

// cut returns n slots cut from a chunk, its capacity capped at n so that
// an append past n reallocates instead of overwriting a neighbour.
func (s *slabs) cut(n int) []any {
	if n > slabKV/16 {
		return make([]any, 0, n)
	}
	if cap(s.kv)-len(s.kv) < n {
		s.kv = make([]any, 0, slabKV)
	}
	at := len(s.kv)
	s.kv = s.kv[:at+n]
	return s.kv[at : at : at+n]
}

// grow returns l with room for n more items, doubling: append's growth of
// a quarter for large slices made a trace's list of entries reallocate
// several times its final size.
func grow(l []any, n int) []any {
	if cap(l)-len(l) >= n {
		return l
	}
	nl := make([]any, len(l), max(2*cap(l), len(l)+n, 8))
	copy(nl, l)
	return nl
}

// What the decoded values hold, in bytes, as the held-bytes limit counts
// it (U6): Go's sizes of the value types, the slot that holds each value in
// its container (a list's whole capacity, as grow allocates it), a
// string's or byte string's header, the box of a number stored in an
// interface, and the stack's and the mark stack's whole capacity. Every
// value the pickle pushes takes a stack slot, a memo reference (BINGET)
// too, and that slot stays allocated after APPENDS moves the value into a
// list: counting the stack by its height let a list of memo references
// hold twice what was counted (a slot on the stack, one in the list),
// close to what the allowance let through. The counts are close to what
// the values cost, not exact (the spare capacity of a dict's slices is not
// counted, nor the keys a dict shares with another); the allowance per
// input byte leaves room for that.
const (
	slotBytes       = int64(unsafe.Sizeof(any(nil)))
	stackSlotBytes  = slotBytes
	markBytes       = int64(unsafe.Sizeof(int(0)))
	boxBytes        = 8 // an int64 or float64 stored in an interface
	dictBytes       = int64(unsafe.Sizeof(pyDict{}))
	listBytes       = int64(unsafe.Sizeof(pyList{}))
	framesListBytes = int64(unsafe.Sizeof(framesList{}))
	tupleBytes      = int64(unsafe.Sizeof(depthTuple{}))
	stringBytes     = int64(unsafe.Sizeof(""))
	bytesBytes      = int64(unsafe.Sizeof([]byte(nil)))
	bigBytes        = int64(unsafe.Sizeof(big.Int{}))
	indexBytes      = 48 // a string-keyed map entry and its share of the map's slack
	farMemoBytes    = 48 // a far memo entry, likewise
)

// checkHeld refuses the input when the values built so far (held bytes,
// the stack and marks included) hold more than the budget allows for the
// input read so far; otherwise run checks again only when held bytes pass
// what is allowed now, so a real snapshot, which holds far less than its
// allowance, is checked a few times in all (U6).
func (u *unpickler) checkHeld(held int64) error {
	if u.refused != nil {
		return u.refused
	}
	read := u.base + int64(u.pos)
	if err := u.budget.check(held, read); err != nil {
		return err
	}
	u.heldNext = u.budget.allowed(read)
	return nil
}

// errInputLimit is fill's report that the input ran past limit; the caller
// turns it into its own message (it knows which option set the limit).
var errInputLimit = errors.New("input larger than the limit")

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
	case *framesList, *keptFrames:
		return 1
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
		switch x := it.(type) {
		case *pyList:
			d = max(d, x.depth)
		case *pyDict:
			d = max(d, x.depth)
		case *depthTuple:
			d = max(d, x.depth)
			items[i] = x.t
		case *framesList, *keptFrames:
			d = max(d, 1)
		}
	}
	if err := u.checkDepth(d + 1); err != nil {
		return 0, err
	}
	return d + 1, nil
}

// newTuple builds a tuple from items it may keep.
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

// end is the input offset just past the bytes read so far: the input's
// length once r is exhausted.
func (u *unpickler) end() int64 { return u.base + int64(len(u.buf)) }

// fill makes at least n undecoded bytes available in buf[pos:], sliding the
// window and reading more. A read past limit is errInputLimit; the input
// ending first is "truncated at byte N" (U2); another read error is returned
// as is.
func (u *unpickler) fill(n int) error {
	if u.r == nil || u.eof || u.rerr != nil {
		if u.rerr != nil {
			return u.rerr
		}
		return u.errf("truncated at byte %d (%d more bytes needed)", u.end(), n-(len(u.buf)-u.pos))
	}
	if u.pos > 0 {
		k := copy(u.buf[:cap(u.buf)], u.buf[u.pos:])
		u.base += int64(u.pos)
		u.buf, u.pos = u.buf[:k], 0
	}
	for len(u.buf) < n {
		if len(u.buf) == cap(u.buf) {
			// Doubling a full buffer: it never outgrows what arrived (U1).
			nb := make([]byte, len(u.buf), max(2*cap(u.buf), window))
			copy(nb, u.buf)
			u.buf = nb
		}
		k, err := u.r.Read(u.buf[len(u.buf):cap(u.buf)])
		u.buf = u.buf[:len(u.buf)+k]
		if u.end() > u.limit {
			return errInputLimit
		}
		if err == io.EOF {
			u.eof = true
			if len(u.buf) < n {
				return u.errf("truncated at byte %d (%d more bytes needed)", u.end(), n-len(u.buf))
			}
		} else if err != nil {
			u.rerr = err
			return err
		}
	}
	return nil
}

// next consumes the next n bytes of input. The slice is valid until the
// next read: everything kept from it is copied.
func (u *unpickler) next(n int) ([]byte, error) {
	if len(u.buf)-u.pos < n {
		if err := u.fill(n); err != nil {
			return nil, err
		}
	}
	b := u.buf[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

// nextLen consumes a length-prefixed argument of n bytes, refusing a length
// the input cannot hold before reading or allocating anything for it (U1).
func (u *unpickler) nextLen(n uint64) ([]byte, error) {
	if left := u.limit - (u.base + int64(u.pos)); n > uint64(left) {
		if u.r == nil {
			return nil, u.errf("truncated at byte %d (%d bytes needed, %d left)", u.end(), n, left)
		}
		return nil, u.errf("argument of %d bytes, longer than the %d bytes the input may still hold", n, left)
	}
	return u.next(int(n))
}

func (u *unpickler) u8() (uint64, error) {
	if u.pos < len(u.buf) {
		b := u.buf[u.pos]
		u.pos++
		return uint64(b), nil
	}
	b, err := u.next(1)
	if err != nil {
		return 0, err
	}
	return uint64(b[0]), nil
}

func (u *unpickler) u16() (uint64, error) {
	b, err := u.next(2)
	if err != nil {
		return 0, err
	}
	return uint64(binary.LittleEndian.Uint16(b)), nil
}

func (u *unpickler) u32() (uint64, error) {
	if len(u.buf)-u.pos >= 4 {
		v := binary.LittleEndian.Uint32(u.buf[u.pos:])
		u.pos += 4
		return uint64(v), nil
	}
	b, err := u.next(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.LittleEndian.Uint32(b)), nil
}

func (u *unpickler) u64() (uint64, error) {
	b, err := u.next(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// line reads up to and excluding the next '\n' (text protocol arguments).
func (u *unpickler) line() (string, error) {
	for from := 0; ; {
		if i := bytes.IndexByte(u.buf[u.pos+from:], '\n'); i >= 0 {
			s := string(u.buf[u.pos : u.pos+from+i])
			u.pos += from + i + 1
			return s, nil
		}
		from = len(u.buf) - u.pos
		if err := u.fill(from + 1); err != nil {
			if errors.Is(err, ErrPickle) {
				return "", u.errf("truncated at byte %d: no end of line", u.end())
			}
			return "", err
		}
	}
}

// push pushes v. When the stack is full and the held-bytes budget does not
// allow it to grow, v is dropped and run returns the refusal (u.refused)
// before the next opcode: every opcode pushes last, so nothing reads the
// stack in between.
func (u *unpickler) push(v any) {
	if len(u.stack) == cap(u.stack) && !u.growStack() {
		return
	}
	u.stack = append(u.stack, v)
}

// growStack doubles the stack's capacity, if the held-bytes budget allows
// the doubled stack now; otherwise it allocates nothing, records the
// refusal in u.refused and returns false (U6). append grows a large slice
// by a quarter, and each old array stays in the process's memory until the
// runtime returns it, so a long run of pushes held about five times the
// stack it built; doubling bounds that by twice, and checking before the
// allocation keeps a refused input from allocating the array it is
// refused for.
func (u *unpickler) growStack() bool {
	n := max(2*cap(u.stack), 256)
	read := u.base + int64(u.pos)
	if want := u.heldNow() + stackSlotBytes*int64(n-cap(u.stack)); want > u.budget.allowed(read) {
		u.refused = u.budget.check(want, read)
		u.heldNext = -1 // run's next check returns u.refused
		return false
	}
	s := make([]any, len(u.stack), n)
	copy(s, u.stack)
	u.stack = s
	return true
}

// heldNow is what the values built so far hold, the stack and marks
// included (U6).
func (u *unpickler) heldNow() int64 {
	return u.held + stackSlotBytes*int64(cap(u.stack)) + markBytes*int64(cap(u.marks))
}

func (u *unpickler) pop() (any, error) {
	if len(u.stack) <= u.floor {
		return nil, u.errf("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) <= u.floor {
		return nil, u.errf("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// mark opens a mark at the current stack height.
func (u *unpickler) mark() {
	u.marks = append(u.marks, len(u.stack))
	u.floor = len(u.stack)
}

// popMark pops everything above the innermost mark and the mark itself. The
// items are a view of the stack, valid until the next push: a caller that
// keeps them copies them (LIST, TUPLE, DICT), one that consumes them at once
// (APPENDS, SETITEMS, POP_MARK) does not.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.errf("no mark")
	}
	m := u.floor
	u.marks = u.marks[:len(u.marks)-1]
	u.floor = 0
	if len(u.marks) > 0 {
		u.floor = u.marks[len(u.marks)-1]
	}
	items := u.stack[m:]
	u.stack = u.stack[:m]
	return items, nil
}

// popN pops n items as a copy (TUPLE1..3, SETITEM).
func (u *unpickler) popN(n int) ([]any, error) {
	if len(u.stack)-u.floor < n {
		return nil, u.errf("stack underflow")
	}
	items := slices.Clone(u.stack[len(u.stack)-n:])
	u.stack = u.stack[:len(u.stack)-n]
	return items, nil
}

// decodeLong decodes a little-endian two's-complement integer: an int64
// when it fits (big is nil), else big. It returns no interface so that
// pushInt can reuse a boxed value.
func decodeLong(b []byte) (int64, *big.Int) {
	if len(b) == 0 {
		return 0, nil
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
			return int64(v), nil
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
		return n.Int64(), nil
	}
	return 0, n
}

// intCache is how many boxed integers pushInt remembers, a power of 2.
const intCache = 1024

type boxedInt struct {
	v   int64
	box any // v as an interface, or nil
}

// pushInt pushes v, reusing its interface value when v was pushed recently.
// Boxing an int64 in an interface allocates it (below 256 excepted), and a
// snapshot's addresses and sizes recur (an allocation's address in its
// alloc, free_requested and free_completed entries); a boxed value is
// immutable, so sharing it is safe.
func (u *unpickler) pushInt(v int64) {
	c := &u.ints[uint64(v)*0x9e3779b97f4a7c15>>(64-10)]
	if c.box == nil || c.v != v {
		c.v, c.box = v, v
		if uint64(v) >= 256 {
			u.held += boxBytes // Go boxes 0..255 without allocating
		}
	}
	u.push(c.box)
}

// memoLen is the number of memo entries, which MEMOIZE uses as its index
// (as Python's len(memo)): the dense slice and the far map never share an
// index (memoize moves an index from far to the slice when the slice
// reaches it).
func (u *unpickler) memoLen() uint64 { return u.memoN + uint64(len(u.far)) }

// memoChunk is the dense memo's chunk size: chunks are never copied as the
// memo grows (a real snapshot memoizes tens of thousands of values, and
// growing one slice copied them several times, each copy a write barrier
// per value while the collector runs).
const memoChunk = 4096

func (u *unpickler) memoize(idx uint64) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	switch n := u.memoN; {
	case idx < n:
		u.memo[idx/memoChunk][idx%memoChunk] = v
	case idx == n:
		if idx%memoChunk == 0 {
			u.held += slotBytes * memoChunk
			u.memo = append(u.memo, make([]any, memoChunk))
		}
		u.memo[idx/memoChunk][idx%memoChunk] = v
		u.memoN++
		if u.far != nil {
			delete(u.far, idx)
		}
	default:
		if u.far == nil {
			u.far = make(map[uint64]any)
		}
		if _, ok := u.far[idx]; !ok {
			u.held += farMemoBytes
		}
		u.far[idx] = v
	}
	return nil
}

func (u *unpickler) get(idx uint64) error {
	if idx < u.memoN {
		u.push(u.memo[idx/memoChunk][idx%memoChunk])
		return nil
	}
	v, ok := u.far[idx]
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

// countFrameRefs runs MARK (just read) GET… APPENDS onto the frames list fl
// without pushing anything: it counts the memo references up to APPENDS
// and adds them to fl. That is a snapshot's commonest sequence, some 60
// references per trace entry, and pushing each only for APPENDS to drop it
// cost most of reading (a stored pointer is a write barrier while the
// collector runs). It works within the window and gives up, consuming
// nothing, at anything else (another opcode, the window's end, a memo
// index not set), so the ordinary path then runs the same opcodes and
// reports any error exactly as it would have.
func (u *unpickler) countFrameRefs(fl *framesList) bool {
	b, p, n := u.buf, u.pos, 0
	for p < len(b) {
		var idx uint64
		switch b[p] {
		case 'h': // BINGET
			if p+2 > len(b) {
				return false
			}
			idx = uint64(b[p+1])
			p += 2
		case 'j': // LONG_BINGET
			if p+5 > len(b) {
				return false
			}
			idx = uint64(binary.LittleEndian.Uint32(b[p+1:]))
			p += 5
		case 'e': // APPENDS
			fl.n += int32(n)
			u.framesLate = u.framesLate || int(fl.seq) != u.framesSeq-1
			u.pos = p + 1
			return true
		default:
			return false
		}
		if idx >= u.memoN {
			if _, ok := u.far[idx]; !ok {
				return false
			}
		}
		n++
	}
	return false
}

// atFramesKey reports whether a list about to be pushed is the value of a
// "frames" key: the stack's top (above the innermost mark) is the string
// "frames" and stands where a key stands, an even number of items above the
// innermost mark (SETITEMS, DICT) or right above a dict (SETITEM). A list
// elided by mistake elsewhere is refused where it is read (asList), never
// read as empty.
func (u *unpickler) atFramesKey() bool {
	n := len(u.stack)
	if n <= u.floor {
		return false
	}
	if s, ok := u.stack[n-1].(string); !ok || s != "frames" {
		return false
	}
	if len(u.marks) > 0 && (n-1-u.floor)%2 == 0 {
		return true
	}
	if n-2 >= u.floor {
		_, ok := u.stack[n-2].(*pyDict)
		return ok
	}
	return false
}

// pushFrames pushes the value of a "frames" key, a list built with items
// (a view of the stack, copied if kept): elided, numbered with the next
// ordinal, unless keep wants that ordinal, when it is an ordinary list,
// recorded in keep. Past keep's last wanted ordinal every kept list is
// complete (unless the first read saw a list grow late: ReadFrames then
// sets no last), and the read stops with errFramesKept.
func (u *unpickler) pushFrames(items []any) error {
	seq := u.framesSeq
	u.framesSeq++
	if k := u.keep; k != nil && k.want != nil {
		if seq > k.last {
			return errFramesKept
		}
		if k.want[seq] {
			k.lists[seq] = u.pushKeptFrames(items, seq)
			return nil
		}
	}
	if u.atReleaseEntry() {
		u.pushKeptFrames(items, seq)
		return nil
	}
	u.held += framesListBytes
	u.push(u.slabs.framesList(len(items), seq))
	return nil
}

// pushKeptFrames pushes a frames list that keeps its items (a copy of
// items, unwrapped), numbered seq, and returns it.
func (u *unpickler) pushKeptFrames(items []any, seq int) *keptFrames {
	u.held += listBytes + slotBytes*int64(len(items))
	l := &keptFrames{items: make([]any, len(items)), seq: int32(seq)}
	for i, it := range items {
		l.items[i] = unwrap(it)
	}
	u.push(l)
	return l
}

// atReleaseEntry reports whether the "frames" key on top of the stack
// (atFramesKey) is a trace entry's whose action is a cache release: its
// "action" key and value stand among the key-value pairs above the
// innermost mark (SETITEMS, as Python's pickler writes a dict, action
// first), or in the dict they go to (below the mark, or right below the
// key with SETITEM). A release's frames are few (one entry per segment
// released) and say whose release it was, so they are kept.
func (u *unpickler) atReleaseEntry() bool {
	n := len(u.stack)
	var action any
	dict := n - 2 // SETITEM: the dict right below the key
	if len(u.marks) > 0 && (n-1-u.floor)%2 == 0 {
		for i := u.floor; i+1 < n-1; i += 2 {
			if k, ok := u.stack[i].(string); ok && k == "action" {
				action = u.stack[i+1]
				break
			}
		}
		dict = u.floor - 1
	}
	if action == nil && dict >= 0 {
		if d, ok := u.stack[dict].(*pyDict); ok {
			action, _ = d.get("action")
		}
	}
	a, _ := action.(string)
	return a == "segment_free" || a == "segment_unmap"
}

// run executes the pickle program until STOP.
func (u *unpickler) run() (any, error) {
	for {
		if held := u.heldNow(); held > u.heldNext {
			if err := u.checkHeld(held); err != nil {
				return nil, err
			}
		}
		if u.pos >= len(u.buf) {
			u.op, u.opPos = 0, u.base+int64(u.pos)
			if err := u.fill(1); err != nil {
				if errors.Is(err, ErrPickle) {
					return nil, fmt.Errorf("%w: truncated at byte %d: no STOP", ErrPickle, u.end())
				}
				return nil, err
			}
		}
		u.opPos = u.base + int64(u.pos)
		u.op = u.buf[u.pos]
		u.pos++
		var err error
		switch u.op {
		case 'h', 'j': // BINGET, LONG_BINGET: most of a snapshot's opcodes
			var idx uint64
			if u.op == 'h' {
				idx, err = u.u8()
			} else {
				idx, err = u.u32()
			}
			if err == nil {
				err = u.get(idx)
			}
		case 0x80: // PROTO
			var p uint64
			if p, err = u.u8(); err == nil && p > 5 {
				err = u.errf("unsupported protocol %d", p)
			}
		case 0x95: // FRAME: framing is advisory, but the frame must be there.
			var n uint64
			if n, err = u.u64(); err == nil {
				if left := u.limit - (u.base + int64(u.pos)); n > uint64(left) && u.r == nil {
					err = u.errf("truncated at byte %d (frame of %d bytes, %d left)", u.end(), n, left)
				} else if n > uint64(left) {
					err = u.errf("frame of %d bytes, longer than the %d bytes the input may still hold", n, left)
				} else if len(u.buf)-u.pos < int(n) {
					err = u.fill(int(n))
				}
			}
		case '.': // STOP
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			return unwrap(v), nil
		case '(': // MARK
			if n := len(u.stack); n > u.floor {
				if fl, ok := u.stack[n-1].(*framesList); ok && u.countFrameRefs(fl) {
					continue
				}
			}
			u.mark()
		case '0': // POP
			if _, err = u.pop(); err != nil && len(u.marks) > 0 && len(u.stack) == u.floor {
				_, err = u.popMark() // POP of a mark
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
				u.pushInt(int64(int32(uint32(v))))
			}
		case 'K': // BININT1
			var v uint64
			if v, err = u.u8(); err == nil {
				u.push(int64(v))
			}
		case 'M': // BININT2
			var v uint64
			if v, err = u.u16(); err == nil {
				u.pushInt(int64(v))
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
				if b, err = u.nextLen(n); err == nil {
					if v, big := decodeLong(b); big != nil {
						u.held += bigBytes + int64(len(b))
						u.push(big)
					} else {
						u.pushInt(v)
					}
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
					u.held += boxBytes
					u.push(f)
				}
			}
		case 'G': // BINFLOAT, big-endian
			var b []byte
			if b, err = u.next(8); err == nil {
				u.held += boxBytes
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
				b, err = u.nextLen(n)
			}
			var s string
			if err == nil {
				if s, err = u.str(b); err == nil {
					u.held += stringBytes + int64(len(s))
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
				if b, err = u.nextLen(n); err == nil {
					u.held += bytesBytes + int64(len(b))
					u.push(append([]byte(nil), b...))
				}
			}
		case '}':
			u.held += dictBytes
			u.push(u.slabs.dict(1))
		case ']': // EMPTY_LIST
			if u.atFramesKey() {
				err = u.pushFrames(nil)
			} else {
				u.held += listBytes
				u.push(u.slabs.list(1))
			}
		case 0x8f: // EMPTY_SET
			u.held += listBytes
			u.push(u.slabs.list(1))
		case ')':
			u.held += tupleBytes
			u.push(&depthTuple{t: pyTuple{}, depth: 1})
		case 'l', 0x91: // LIST, FROZENSET
			var items []any
			if items, err = u.popMark(); err == nil {
				if u.op == 'l' && u.atFramesKey() {
					err = u.pushFrames(items)
				} else {
					var d int
					if d, err = u.itemsDepth(items); err == nil {
						u.held += listBytes + slotBytes*int64(len(items))
						l := u.slabs.list(d)
						l.items = slices.Clone(items)
						u.push(l)
					}
				}
			}
		case 't', 0x85, 0x86, 0x87: // TUPLE, TUPLE1..3
			var items []any
			if u.op == 't' {
				if items, err = u.popMark(); err == nil {
					items = slices.Clone(items)
				}
			} else {
				items, err = u.popN(int(u.op - 0x84))
			}
			var t *depthTuple
			if err == nil {
				if t, err = u.newTuple(items); err == nil {
					u.held += tupleBytes + slotBytes*int64(len(items))
					u.push(t)
				}
			}
		case 'd':
			var items []any
			if items, err = u.popMark(); err == nil {
				if len(items)%2 != 0 {
					err = u.errf("odd number of dict items")
				} else {
					u.held += dictBytes
					d := u.slabs.dict(1)
					if err = u.fillDict(d, items); err == nil {
						u.push(d)
					}
				}
			}
		case 'a': // APPEND
			var v, l any
			if v, err = u.pop(); err == nil {
				if l, err = u.top(); err == nil {
					err = u.appendTo(l, []any{v})
				}
			}
		case 'e', 0x90: // APPENDS, ADDITEMS
			var items []any
			if items, err = u.popMark(); err == nil {
				var l any
				if l, err = u.top(); err == nil {
					err = u.appendTo(l, items)
				}
			}
		case 's': // SETITEM
			if len(u.stack)-u.floor < 2 {
				err = u.errf("stack underflow")
			} else {
				kv := u.stack[len(u.stack)-2:]
				u.stack = u.stack[:len(u.stack)-2]
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
			err = u.memoize(u.memoLen())
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
		u.pushInt(v)
		return nil
	}
	b, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return u.errf("bad integer %s", describe(s))
	}
	u.held += bigBytes + int64(len(b.Bits()))*int64(unsafe.Sizeof(big.Word(0)))
	u.push(b)
	return nil
}

// appendTo appends items (a view of the stack or a fresh slice, not kept)
// to the list l. An elided list only counts them: it keeps none, so they
// add nothing to its depth (U4), and the pass over them is skipped — a
// snapshot's frames lists hold most of its items.
func (u *unpickler) appendTo(l any, items []any) error {
	if fl, ok := l.(*framesList); ok {
		fl.n += int32(len(items))
		u.framesLate = u.framesLate || int(fl.seq) != u.framesSeq-1
		return nil
	}
	if kl, ok := l.(*keptFrames); ok {
		u.framesLate = u.framesLate || int(kl.seq) != u.framesSeq-1
		c := cap(kl.items)
		for _, it := range items {
			kl.items = append(kl.items, unwrap(it))
		}
		u.held += slotBytes * int64(cap(kl.items)-c)
		return nil
	}
	pl, ok := l.(*pyList)
	if !ok {
		return u.errf("append to %s, not a list", describe(unwrap(l)))
	}
	d, err := u.itemsDepth(items)
	if err != nil {
		return err
	}
	pl.depth = max(pl.depth, d)
	c := cap(pl.items)
	pl.items = append(grow(pl.items, len(items)), items...)
	u.held += slotBytes * int64(cap(pl.items)-c) // what growing it allocated
	return nil
}

// setItems stores the key-value pairs kv (a view of the stack, not kept)
// in the dict on top of the stack.
func (u *unpickler) setItems(kv []any) error {
	d, err := u.top()
	if err != nil {
		return err
	}
	pd, ok := d.(*pyDict)
	if !ok {
		return u.errf("setitem on %s, not a dict", describe(unwrap(d)))
	}
	return u.fillDict(pd, kv)
}

// shapes is how many recent key sequences fillDict remembers.
const shapes = 4

// fillDict stores the key-value pairs kv in d. An empty dict given only
// string keys, fewer than dictIndexAt, takes its keys slice from a recent
// dict with the same keys in the same order when there is one: a
// snapshot's trace entries, segments, blocks and frames each repeat one
// key sequence thousands of times, so sharing it halves their storage and
// skips the duplicate check. A shared keys slice is never written: set
// replaces only vals, and appends past its capped capacity reallocate.
func (u *unpickler) fillDict(d *pyDict, kv []any) error {
	n := len(kv) / 2
	if len(d.keys) == 0 && n > 0 && n < dictIndexAt {
		for _, keys := range u.shapes {
			if len(keys) == n && sameKeys(keys, kv) {
				u.held += slotBytes * int64(n) // the values: the keys are shared
				return u.fillShaped(d, keys, kv)
			}
		}
	}
	before, indexed := len(d.keys), d.sidx != nil
	err := u.fillUnshaped(d, kv)
	u.held += 2 * slotBytes * int64(len(d.keys)-before)
	switch {
	case d.sidx != nil && indexed:
		u.held += indexBytes * int64(len(d.keys)-before)
	case d.sidx != nil:
		u.held += indexBytes * int64(len(d.keys))
	}
	return err
}

// fillUnshaped is fillDict for pairs whose keys no recent dict shares.
func (u *unpickler) fillUnshaped(d *pyDict, kv []any) error {
	n := len(kv) / 2
	depth, err := u.itemsDepth(kv)
	if err != nil {
		return err
	}
	d.depth = max(d.depth, depth)
	if len(d.keys) != 0 || n == 0 || n >= dictIndexAt {
		for i := 0; i < len(kv); i += 2 {
			d.set(kv[i], kv[i+1])
		}
		return nil
	}
	d.keys, d.vals = u.slabs.cut(n), u.slabs.cut(n)
	for i := 0; i < len(kv); i += 2 {
		d.set(kv[i], kv[i+1])
	}
	if len(d.keys) == n && cap(d.keys) == n && allStrings(d.keys) {
		u.shapes[u.nextShape] = d.keys
		u.nextShape = (u.nextShape + 1) % shapes
	}
	return nil
}

// fillShaped fills the empty dict d from the pairs kv, whose keys are the
// strings keys: the values are copied, unwrapped and their depth taken in
// one pass (the keys, strings, add no depth).
func (u *unpickler) fillShaped(d *pyDict, keys, kv []any) error {
	vals := u.slabs.cut(len(keys))[:len(keys)]
	depth := 0
	for i := range vals {
		v := kv[2*i+1]
		switch x := v.(type) {
		case *pyDict:
			depth = max(depth, x.depth)
		case *framesList, *keptFrames:
			depth = max(depth, 1)
		case *pyList:
			depth = max(depth, x.depth)
		case *depthTuple:
			depth = max(depth, x.depth)
			v = x.t
		}
		vals[i] = v
	}
	if err := u.checkDepth(depth + 1); err != nil {
		return err
	}
	d.depth = max(d.depth, depth+1)
	d.keys, d.vals = keys, vals
	return nil
}

// sameKeys reports whether the keys of the pairs kv are the string keys
// keys, in order.
func sameKeys(keys, kv []any) bool {
	for i, k := range keys {
		ks, ok := kv[2*i].(string)
		if !ok || !sameString(ks, k.(string)) {
			return false
		}
	}
	return true
}

func allStrings(keys []any) bool {
	for _, k := range keys {
		if _, ok := k.(string); !ok {
			return false
		}
	}
	return true
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
