// The PyTorch snapshot reader (design §13.2): from the dict that
// torch.cuda.memory._dump_snapshot pickles to native events.
//
// Conversion, in three steps over the chosen device's trace:
//
//  1. Parse every trace entry into a compact record, checking the schema:
//     an action string; an address for alloc, free and segment actions; a
//     size for alloc and segment actions; sizes in [0, 2^62]. The first
//     violation is an ErrSnapshot naming the entry index.
//  2. Prelude (on by default). The trace is a ring buffer that may start
//     mid-run, so allocations made before its first entry are rebuilt:
//     (a) a block active in `segments` (active_allocated, active_awaiting_free
//     or active_pending_free) whose address never appears in the trace was
//     live throughout it; (b) an address whose first appearance in the trace
//     is a free (free_requested or free_completed) carrying a size was live
//     when the trace began, and its size is known. Both become alloc events at
//     the first entry's time, in address order (the order a fresh allocator
//     carves a segment front to back), counted separately. For (b) the size
//     is the free's requested_size, else its size — unless the address is
//     still active in `segments` and never allocated in the trace, when it
//     is that block's (same allocation, and the block carries the requested
//     size). A free of an address never seen whose size is unknown is
//     ignored and counted.
//  3. Replay the entries: alloc → alloc with a fresh logical ID (size =
//     requested_size when present, else size); an alloc at a live address
//     first frees the old ID (an implied free, counted); free_requested →
//     free, where PyTorch's allocated bytes drop, and free_completed, where
//     the block may be reused (PyTorch waits for the block's other-stream
//     uses) → the release of a held free: a free_requested whose
//     free_completed is the very next entry is a plain free at that entry
//     (as before held frees were read), any other is a free with "held"
//     and its free_completed a release (none if the trace ends first: still
//     held at the dump); a free_completed of a live allocation whose free
//     was never requested is a plain free; an alloc
//     at the address of a held free first releases it. segment_* feed
//     PyTorch's reserved-bytes timeline, and a run of segment_free
//     (segment_unmap) entries the program's empty_cache made, or a failed
//     request's out-of-memory path, becomes cleanup events at its first
//     entry, one per stream known then (releases.go says whose a run was
//     and what an oom entry says of the capacity); oom and snapshot are
//     counted; any other action is skipped and counted by name.
//
// Times are time_us, or the entry index when time_us is missing; a time
// before the previous event's is raised to it (counted) so the output keeps
// the native format's non-decreasing t. Raw stream handles become dense
// stream numbers in order of first appearance among the emitted events.

package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"slices"
	"sort"
	"unicode/utf8"

	"github.com/gpumem/gpumem/history"
)

// DefaultMaxSnapshotBytes bounds the decompressed size of a snapshot that
// ReadSnapshot will read when SnapshotOptions.MaxBytes is 0: 1 GiB, several
// times the largest real snapshot seen (under 100 MiB). With it, the
// held-bytes limit (limits.go) bounds what the decoded values may hold: a
// floor of MaxBytes/16 plus a few bytes per input byte read, so a hostile
// input (a gzip bomb, a pickle denser than any snapshot) cannot take the
// machine; a larger or denser snapshot needs MaxBytes (the CLI's
// -max-snapshot).
const DefaultMaxSnapshotBytes = 1 << 30

// SnapshotOptions configures ReadSnapshot. The zero value reads the one
// device with data with the prelude on.
type SnapshotOptions struct {
	// ChooseDevice selects Device, which must have data (segments, or
	// trace entries other than markers): a device without is a
	// *NoDeviceDataError. Without it the snapshot's one device with data
	// is read (device 0 when none has any); a snapshot with data for
	// several devices is a *SeveralDevicesError for ReadSnapshot, and
	// ReadSnapshotDevices reads each.
	ChooseDevice bool
	Device       int
	// NoPrelude turns off the prelude: allocations made before the trace's
	// first entry are not rebuilt, and every free of an unseen address is
	// ignored and counted.
	NoPrelude bool
	// MaxBytes bounds the (decompressed) input and sets the held-bytes
	// limit on its decoded values (limits.go); 0 means
	// DefaultMaxSnapshotBytes.
	MaxBytes int64
}

// SnapshotCounts are the reader's counters. Every entry of the chosen trace
// lands in exactly one of Allocs, Frees, IgnoredFrees, FreeRequests,
// UnmatchedFreeRequests, SegmentEvents, OOMs, Snapshots or Skipped.
type SnapshotCounts struct {
	Entries               int            // entries in the chosen device trace
	Allocs                int            // alloc entries (each one native alloc)
	Frees                 int            // free_completed entries that completed a free: a native free, or the release of a held one
	IgnoredFrees          int            // free_completed of an address not live and of unknown size
	FreeRequests          int            // free_requested of a live allocation (held, or completed by the next entry)
	UnmatchedFreeRequests int            // free_requested of an address not live
	HeldFrees             int            // of FreeRequests, those not completed by the next entry: frees with "held"
	ImpliedFrees          int            // native frees implied by an alloc at a live address
	Prelude               int            // prelude allocs in all (PreludeFromSegments + PreludeFromFrees)
	PreludeFromSegments   int            // rule (a): active blocks of `segments` never seen in the trace
	PreludeFromFrees      int            // rule (b): first seen as a free with a known size
	PreludeBytes          uint64         // bytes of all prelude allocs
	PendingAtEnd          int            // held frees not completed at the dump (no release)
	SegmentEvents         int            // segment_alloc/free/map/unmap entries
	Cleanups              int            // cleanup events emitted for release runs (Snapshot.Releases)
	OOMs                  int            // oom entries
	Snapshots             int            // snapshot entries
	Skipped               map[string]int // other actions, by name
	SkippedTotal          int            // sum of Skipped
	MissingTimes          int            // entries without time_us (time = entry index)
	ClampedTimes          int            // entries whose time went backwards, raised to the previous
}

// ReservedPoint is PyTorch's reserved bytes right after one segment entry.
type ReservedPoint struct {
	Entry int    // index of the segment entry in the device trace
	Event int    // number of native events emitted before it (prelude included)
	T     int64  // its time
	Bytes uint64 // reserved bytes after it
}

// StartSegment is a segment PyTorch held when the trace's window began: one
// of `segments` whose segment_alloc is not in the trace, or one the trace
// frees without having allocated it. A replay that starts from these (all
// free, the prelude then filling them) starts where PyTorch did.
type StartSegment struct {
	Address uint64
	Size    uint64
	Stream  int  // dense stream of Events, or -1 when no event uses it
	Small   bool // segment_type "small" (a 2 MiB segment when the type is unknown)
}

// Snapshot is a converted PyTorch memory snapshot.
type Snapshot struct {
	Device int // the device whose trace and segments were converted
	// Devices are the snapshot's devices with data (segments, or trace
	// entries other than markers), in order, Device among them unless
	// none has data.
	Devices []DeviceData
	Events  []Event // native events: prelude first, then the trace
	Streams int     // dense streams used by Events
	// StreamHandles[i] is the raw PyTorch stream handle of dense stream i.
	StreamHandles []uint64
	Counts        SnapshotCounts

	// PyTorch's own reserved bytes for Device. FinalReserved is the sum of
	// `segments` total_size; ReservedAtStart is that minus the net segment
	// entries of the trace (what the segments held before the window);
	// PeakReserved is the highest point of ReservedAtStart plus the running
	// net. ReservedInconsistent is set when the net exceeds FinalReserved
	// (ReservedAtStart is then 0).
	FinalReserved        uint64
	ReservedAtStart      uint64
	PeakReserved         uint64
	Reserved             []ReservedPoint
	ReservedInconsistent bool
	Segments             int // segments of Device in `segments`
	// StartSegments are the segments held before the window, in address
	// order. Their sizes add up to ReservedAtStart unless the trace uses
	// expandable segments (segment_map/segment_unmap).
	StartSegments []StartSegment

	// PeakLive and FinalLive are the highest and final sums of live sizes
	// over Events (requested sizes, prelude included).
	PeakLive  uint64
	FinalLive uint64

	// The window a replay uses begins at the trace's first alloc entry: a
	// trace may open with a run of segment_free entries (an empty_cache
	// between experiments) whose reserve belonged to the previous
	// experiment, and a replay cannot be compared with that.
	//
	// FirstAlloc is the index of the first alloc entry, −1 when there is
	// none (the window then begins at the dump). ReservedAtFirstAlloc is
	// PyTorch's reserved bytes just before it (segment entries before it
	// included), WindowPeakReserved the highest reserve from there on — the
	// figure to compare a replay with — and LiveAtFirstAlloc the live bytes
	// then (the prelude less the frees before it).
	FirstAlloc int
	// FirstAllocEvent is the index in Events of the first alloc entry's
	// event (after the prelude and any frees before it), −1 when none.
	FirstAllocEvent      int
	ReservedAtFirstAlloc uint64
	WindowPeakReserved   uint64
	LiveAtFirstAlloc     uint64
	// UnexplainedReserved is the bytes of the UnexplainedSegments segments
	// PyTorch held when the window began in which no allocation live then
	// and no alloc entry of the window lies: cached before the window and
	// never used in it, so neither the trace nor the live blocks explain
	// them, and a replay (which starts without them) cannot reproduce
	// them.
	UnexplainedReserved uint64
	UnexplainedSegments int

	// AllocatorSettings is the snapshot's "allocator_settings" dict, the
	// settings PyTorch's allocator ran with (package trace/torch reads
	// them), nil when the snapshot has none (older PyTorch). String keys
	// only; values are strings, bools, int64 or *big.Int, float64, or
	// nested dicts of the same as map[string]any.
	AllocatorSettings map[string]any

	// EventEntries[i] is the index in the chosen device trace of the entry
	// Events[i] came from, -1 for the prelude: a replay's failing event
	// named as the entry a user finds in the snapshot (its event numbers
	// differ: entries that emit nothing, implied frees, the prelude).
	EventEntries []int32

	// frames[i] says where the stack frames of entry i of the chosen
	// trace lie in the input, for ReadFrames; maxBytes is the MaxBytes
	// it was read with, for the same.
	frames     []framesRef
	maxBytes   int64
	framesLate bool // a frames list grew after a later one began: no early stop

	// Placements[i] is the segment PyTorch placed Events[i]'s block in
	// (address and size, from the segment_alloc entries and `segments`),
	// for alloc events whose block lies in a known plain segment; the zero
	// value otherwise. The torch model places its segments there, so it
	// breaks ties between equal-size free blocks by PyTorch's addresses.
	Placements []SegmentPlacement

	// Releases are the trace's runs of cache releases (segment_free or
	// segment_unmap entries in a row), each with whose it was
	// (releases.go): the program's (empty_cache) and those before a
	// failed request became cleanup events, one per stream known then;
	// the out-of-memory path's served retries and the allocator's own
	// became none. OOMEntries are the trace's oom entries, and Capacity
	// what they and the retries say of the memory PyTorch could reserve.
	Releases   []ReleaseRun
	OOMEntries []OOMEntry
	Capacity   RecordedCapacity

	// WrittenBy is the snapshot's "written_by" string: "" for PyTorch's own
	// snapshots, which have none; "gpumem" (and what it replayed) for one
	// gpumem wrote (WriteTorchSnapshot). The reserve figures of such a
	// snapshot are that writer's, not PyTorch's.
	WrittenBy string
}

// SegmentPlacement is a recorded segment: its address and size.
type SegmentPlacement struct {
	Addr, Size uint64
}

// writtenByKey is the top-level key naming a snapshot's writer.
const writtenByKey = history.WrittenByKey

// ReadSnapshot reads a PyTorch CUDA memory snapshot: a pickle (protocols
// 2–5, plain data only), the same schema as JSON (leading '{' or '['), either
// optionally gzip-compressed, in any shape memory_viz reads (a dict with
// segments and device_traces, traces empty or not, PyTorch 2.0's blocks
// without addresses, or the list torch.cuda.memory_snapshot() returns:
// snapshot_doc.go), and converts the chosen device's trace and segments to
// native events as the file comment above describes. Errors wrap
// [ErrPickle], [ErrPickleGlobal] or [ErrSnapshot] with the offset or entry
// index at fault, or [ErrNotSnapshot] for input of another shape; a device
// choice is a [*SeveralDevicesError] or a [*NoDeviceDataError]. It never
// panics on bad input.
//
// Bounds: the (decompressed) input is at most SnapshotOptions.MaxBytes
// (default [DefaultMaxSnapshotBytes]) and its decoded values hold at most
// MaxBytes/16 (1 MiB at least) plus 4 bytes per input byte read, 24 for
// JSON, both refused with a [*TooLargeError]; its first byte must open a JSON
// object or be a pickle opcode before the rest is read, so a stream of
// garbage (zeros from a gzip bomb) is refused at once; tuples, lists and
// dicts nest at most [MaxNesting] levels; integer literals have at most 40
// digits; at most [MaxStreams] distinct stream handles are converted;
// PyTorch's reserved bytes never exceed 2^62 at any point of the trace.
//
// No stack frames are kept; [Snapshot.ReadFrames] reads those of chosen
// entries again from the same input.
func ReadSnapshot(r io.Reader, opts SnapshotOptions) (*Snapshot, error) {
	limit := opts.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxSnapshotBytes
	}
	keep := &frameKeep{} // keeps nothing: says whether a frames list grew late
	root, err := readRoot(r, limit, keep)
	if err != nil {
		return nil, err
	}
	s, err := convertSnapshot(root, opts)
	if err != nil {
		return nil, err
	}
	s.maxBytes, s.framesLate = limit, keep.late
	return s, nil
}

// ReadSnapshotDevices is ReadSnapshot for every device with data: one
// Snapshot per device with data, in device order (the device of
// SnapshotOptions.Device alone with ChooseDevice; device 0's, empty, when
// no device has data), from one read of r. Its errors are ReadSnapshot's;
// a *SeveralDevicesError only for more than [MaxSnapshotDevices] devices
// with data.
func ReadSnapshotDevices(r io.Reader, opts SnapshotOptions) ([]*Snapshot, error) {
	limit := opts.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxSnapshotBytes
	}
	keep := &frameKeep{}
	root, err := readRoot(r, limit, keep)
	if err != nil {
		return nil, err
	}
	doc, err := parseDoc(root)
	if err != nil {
		return nil, err
	}
	devs := []int{0}
	if opts.ChooseDevice {
		if _, err := doc.choose(opts); err != nil {
			return nil, err
		}
		devs = []int{opts.Device}
	} else if d := doc.withData(); len(d) > MaxSnapshotDevices {
		return nil, &SeveralDevicesError{Devices: d}
	} else if len(d) > 0 {
		devs = devs[:0]
		for _, x := range d {
			devs = append(devs, x.Device)
		}
	}
	out := make([]*Snapshot, 0, len(devs))
	for _, dev := range devs {
		s, err := doc.convert(dev, opts)
		if err != nil {
			if len(devs) > 1 {
				err = fmt.Errorf("device %d: %w", dev, err)
			}
			return nil, err
		}
		s.maxBytes, s.framesLate = limit, keep.late
		out = append(out, s)
	}
	return out, nil
}

// readRoot decodes a snapshot, gzipped or not, into the unpickler's value
// types, within limit bytes of (decompressed) input; keep, when set, asks
// a pickle's read to keep some frames lists and stop after them (frames.go),
// when the root is nil, and says whether one grew late.
func readRoot(r io.Reader, limit int64, keep *frameKeep) (any, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var src io.Reader = br
	gzipped := false
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrSnapshot, err)
		}
		src, gzipped = zr, true
	}
	root, err := decodeSnapshot(src, limit, keep)
	if errors.Is(err, errFramesKept) {
		return nil, nil
	}
	if err != nil {
		if gzipped && !errors.Is(err, ErrSnapshot) && !errors.Is(err, ErrPickle) && !errors.Is(err, ErrPickleGlobal) {
			return nil, fmt.Errorf("%w: gzip: %w", ErrSnapshot, err)
		}
		return nil, err
	}
	return root, nil
}

// decodeSnapshot reads at most limit bytes, skipping leading JSON white
// space, after checking that the first other byte can start a snapshot,
// and decodes them into the unpickler's value types. JSON (leading '{', or
// '[' for a list of segments) is read into memory, as encoding/json needs
// it, its white space runs cut to one byte and its values counted against
// the held-bytes limit as it is read (readJSONText); a pickle streams through the unpickler's window, so
// reading holds the decoded values, not the file, and they are counted as
// they are built (U6).
// Errors from r itself are returned as they are (ReadSnapshot names a
// gzip stream's). keep goes to the unpickler, which marks it as a
// pickle's.
func decodeSnapshot(r io.Reader, limit int64, keep *frameKeep) (any, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var skipped int64
	for {
		b, err := br.ReadByte()
		if err == io.EOF {
			return nil, fmt.Errorf("%w: empty input", ErrSnapshot)
		}
		if err != nil {
			return nil, err
		}
		if b == ' ' || b == '\t' || b == '\r' || b == '\n' {
			if skipped++; skipped > limit {
				return nil, inputTooLarge(limit)
			}
			continue
		}
		isJSON := b == '{' || b == '[' // '[': the list of segments, as JSON
		if !isJSON && !pickleOpcodes[b] {
			return nil, fmt.Errorf("%w: input starts with byte %#02x at offset %d, neither a pickle opcode nor a JSON object or list", ErrSnapshot, b, skipped)
		}
		if err := br.UnreadByte(); err != nil {
			return nil, err
		}
		if !isJSON {
			if keep != nil {
				keep.pickle = true
			}
			return unpickleFrom(br, skipped, limit, newHeldBudget(limit, heldPerInputByte), inputTooLarge(limit), keep)
		}
		break
	}
	data, err := readJSONText(br, skipped, limit)
	if err != nil {
		return nil, err
	}
	return decodeJSONValue(data)
}

// decodeJSONValue decodes a JSON snapshot, as readJSONText returns it, into
// the unpickler's value types.
func decodeJSONValue(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: json: %w", ErrSnapshot, err)
	}
	return fromJSON(v), nil
}

// What a JSON snapshot's decoded values hold, as the held-bytes limit
// counts it for readJSONText: encoding/json's generic values (a map per
// object, a slice per array, a boxed value in a slot per value) and then
// fromJSON's copy of them, about 7 bytes per input byte for a real JSON
// snapshot, 12 without stack frames.
const (
	jsonValueBytes  = 64  // any value: its slot in both copies, its box
	jsonObjectBytes = 384 // an object's map and dict, beyond its values
	jsonArrayBytes  = 64  // an array's slice and list, likewise
)

// readJSONText reads the rest of a JSON snapshot from br (skipped bytes of
// white space already read) into memory, at most limit bytes in all, and
// checks its shape as it goes, so that no input is held whole before it is
// refused:
//
//   - a run of white space outside strings is kept as its first byte
//     (JSON reads it so), so white space costs no memory: a gigabyte of
//     it used to be read whole, and copied as the buffer grew, before the
//     size limit refused it;
//   - objects and arrays nest at most MaxNesting levels, and a number has
//     at most maxIntDigits digits in a row (decimal conversion of big
//     integers is quadratic), each refused naming its byte offset;
//   - the values the text will decode to (counted as encoding/json and
//     fromJSON hold them: jsonValueBytes and the rest), with the text
//     itself, stay within the held-bytes budget (limits.go) for the bytes
//     read so far, checked at every refill.
//
// It only tracks strings, brackets and value starts; encoding/json checks
// the rest.
func readJSONText(br *bufio.Reader, skipped, limit int64) ([]byte, error) {
	budget := newHeldBudget(limit, jsonHeldPerInputByte)
	var out []byte
	var held int64 // the decoded values' bytes; the text's is cap(out)
	depth, digits := 0, 0
	inString, escaped := false, false
	space := false  // the last byte was white space outside a string
	scalar := false // the last byte was a number's or a literal's
	at := skipped   // input offset of chunk[0]
	for {
		chunk, err := br.Peek(br.Buffered())
		if len(chunk) == 0 {
			if _, err = br.Peek(1); err == io.EOF {
				return out, budget.check(held+int64(cap(out)), at)
			} else if err != nil {
				return nil, err
			}
			continue
		}
		if at+int64(len(chunk)) > limit {
			return nil, inputTooLarge(limit)
		}
		from := 0 // chunk[from:i] is to be kept
		for i := 0; i < len(chunk); i++ {
			if inString {
				// Most of a real JSON snapshot is strings (frame names):
				// skip to the closing quote or a backslash at once.
				if escaped {
					escaped = false
					continue
				}
				rest := chunk[i:]
				n := bytes.IndexByte(rest, '"')
				if n < 0 {
					n = len(rest)
				}
				if k := bytes.IndexByte(rest[:n], '\\'); k >= 0 {
					held += int64(k) // the string's own copy
					i += k
					escaped = true
					continue
				}
				held += int64(n)
				if i += n; i < len(chunk) {
					inString = false // chunk[i] is the closing quote
				}
				continue
			}
			b := chunk[i]
			if b == ' ' || b == '\t' || b == '\r' || b == '\n' {
				if space {
					out = append(out, chunk[from:i]...)
					from = i + 1
				}
				space, scalar, digits = true, false, 0
				continue
			}
			space = false
			switch b {
			case '"':
				inString, scalar, digits = true, false, 0
				held += jsonValueBytes
			case '{', '[':
				if depth++; depth > MaxNesting {
					return nil, fmt.Errorf("%w: json: nesting deeper than %d levels at byte offset %d", ErrSnapshot, MaxNesting, at+int64(i))
				}
				scalar, digits = false, 0
				held += jsonValueBytes + jsonArrayBytes
				if b == '{' {
					held += jsonObjectBytes - jsonArrayBytes
				}
			case '}', ']':
				depth--
				scalar, digits = false, 0
			case ',', ':':
				scalar, digits = false, 0
			default: // a number's or a literal's byte
				if !scalar {
					scalar = true
					held += jsonValueBytes
				}
				if b < '0' || b > '9' {
					digits = 0
				} else if digits++; digits > maxIntDigits {
					return nil, fmt.Errorf("%w: json: number at byte offset %d has more than %d digits", ErrSnapshot, at+int64(i-digits+1), maxIntDigits)
				}
			}
		}
		out = append(out, chunk[from:]...)
		if _, err := br.Discard(len(chunk)); err != nil {
			return nil, err
		}
		at += int64(len(chunk))
		if err := budget.check(held+int64(cap(out)), at); err != nil {
			return nil, err
		}
	}
}

// fromJSON converts encoding/json's generic values to the unpickler's. Its
// recursion is bounded by readJSONText's MaxNesting.
func fromJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		d := &pyDict{}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			d.set(k, fromJSON(x[k]))
		}
		return d
	case []any:
		l := &pyList{items: make([]any, len(x))}
		for i, e := range x {
			l.items[i] = fromJSON(e)
		}
		return l
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if b, ok := new(big.Int).SetString(string(x), 10); ok {
			return b
		}
		f, _ := x.Float64()
		return f
	default:
		return v
	}
}

// describe names a decoded value for an error message without walking it:
// a scalar's value (a string truncated to 40 bytes), a container's type
// and length, a big integer's size. Decoded values may nest a million levels
// deep or share sub-values exponentially often, so fmt's %v must never see
// them.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool, int64, float64:
		return fmt.Sprintf("%v", x)
	case string:
		const keep = 40
		if len(x) > keep {
			cut := keep
			for cut > 0 && !utf8.RuneStart(x[cut]) {
				cut--
			}
			return fmt.Sprintf("%q… (string of %d bytes)", x[:cut], len(x))
		}
		return fmt.Sprintf("%q", x)
	case []byte:
		return fmt.Sprintf("bytes of %d", len(x))
	case *big.Int:
		return fmt.Sprintf("integer of %d bits", x.BitLen())
	case *pyList:
		return fmt.Sprintf("list of %d", len(x.items))
	case *framesList:
		return fmt.Sprintf("list of %d stack frames, not kept", x.n)
	case *keptFrames:
		return fmt.Sprintf("list of %d stack frames", len(x.items))
	case pyTuple:
		return fmt.Sprintf("tuple of %d", len(x))
	case *depthTuple:
		return fmt.Sprintf("tuple of %d", len(x.t))
	case *pyDict:
		return fmt.Sprintf("dict of %d", len(x.keys))
	}
	return fmt.Sprintf("%T", v)
}

// Accessors over decoded values.

// asList returns a list's or tuple's items. An elided frames list (see
// pickle.go) has none kept, so it is refused rather than read as empty.
func asList(v any) ([]any, bool) {
	switch x := v.(type) {
	case *pyList:
		return x.items, true
	case pyTuple:
		return x, true
	}
	return nil, false
}

// asUint64 accepts a non-negative integer that fits a uint64.
func asUint64(v any) (uint64, bool) {
	switch x := v.(type) {
	case int64:
		if x >= 0 {
			return uint64(x), true
		}
	case *big.Int:
		if x.IsUint64() {
			return x.Uint64(), true
		}
	}
	return 0, false
}

// asStreamKey maps a raw stream handle (any integer in int64 or uint64
// range) to a uint64 key.
func asStreamKey(v any) (uint64, bool) {
	switch x := v.(type) {
	case int64:
		return uint64(x), true
	case *big.Int:
		if x.IsUint64() {
			return x.Uint64(), true
		}
	}
	return 0, false
}

type actionKind uint8

const (
	actSkip actionKind = iota
	actAlloc
	actFreeRequested
	actFreeCompleted
	actSegmentAdd
	actSegmentSub
	actOOM
	actSnapshot
)

var actionKinds = map[string]actionKind{
	"alloc": actAlloc, "free_requested": actFreeRequested, "free_completed": actFreeCompleted,
	"segment_alloc": actSegmentAdd, "segment_map": actSegmentAdd,
	"segment_free": actSegmentSub, "segment_unmap": actSegmentSub,
	"oom": actOOM, "snapshot": actSnapshot,
}

// entry is one parsed trace entry.
type entry struct {
	kind    actionKind
	action  string // for skipped actions
	addr    uint64
	size    uint64 // requested_size when present, else size; 0 when neither
	rawSize uint64 // size as recorded (segment entries)
	hasSize bool
	stream  uint64
	t       int64
	frames  uint8  // a release's: whose its frames say it was (releases.go)
	hasFree bool   // an oom entry's device_free was recorded
	free    uint64 // an oom entry's device_free
}

// sizeField reads an optional non-negative size-like integer field. where
// names the record for the error ("entry", "segment"; idx is its index).
func sizeField(d *pyDict, key string, where string, idx int) (uint64, bool, error) {
	v, ok := d.get(key)
	if !ok || v == nil {
		return 0, false, nil
	}
	n, ok := asUint64(v)
	if !ok || n > MaxSize {
		return 0, false, fmt.Errorf("%w: %s %d: %s %s is not a size in [0, 2^62]", ErrSnapshot, where, idx, key, describe(v))
	}
	return n, true, nil
}

func parseEntry(v any, idx int) (entry, error) {
	d, ok := v.(*pyDict)
	if !ok {
		return entry{}, fmt.Errorf("%w: entry %d is %s, not a dict", ErrSnapshot, idx, describe(v))
	}
	av, _ := d.get("action")
	action, ok := av.(string)
	if !ok {
		return entry{}, fmt.Errorf("%w: entry %d has no action string", ErrSnapshot, idx)
	}
	e := entry{kind: actionKinds[action], action: action}
	if addrV, ok := d.get("addr"); ok && addrV != nil {
		if e.addr, ok = asUint64(addrV); !ok {
			return entry{}, fmt.Errorf("%w: entry %d: addr %s is not an address", ErrSnapshot, idx, describe(addrV))
		}
	} else if e.kind >= actAlloc && e.kind <= actSegmentSub {
		return entry{}, fmt.Errorf("%w: entry %d: %s without addr", ErrSnapshot, idx, action)
	}
	size, hasSize, err := sizeField(d, "size", "entry", idx)
	if err != nil {
		return entry{}, err
	}
	req, hasReq, err := sizeField(d, "requested_size", "entry", idx)
	if err != nil {
		return entry{}, err
	}
	e.rawSize = size
	e.size, e.hasSize = size, hasSize
	if hasReq {
		e.size, e.hasSize = req, true
	}
	if !hasSize && (e.kind == actAlloc || e.kind == actSegmentAdd || e.kind == actSegmentSub) {
		return entry{}, fmt.Errorf("%w: entry %d: %s without size", ErrSnapshot, idx, action)
	}
	if e.kind == actOOM {
		// PyTorch writes the driver's free bytes as device_free (it keeps
		// them in the entry's addr field, where gpumem's writer puts them).
		free, hasFree, err := sizeField(d, "device_free", "entry", idx)
		if err != nil {
			return entry{}, err
		}
		if !hasFree {
			if av, ok := d.get("addr"); ok && av != nil {
				free, hasFree = e.addr, e.addr <= MaxSize
			}
		}
		e.free, e.hasFree = free, hasFree
	}
	if sv, ok := d.get("stream"); ok && sv != nil {
		if e.stream, ok = asStreamKey(sv); !ok {
			return entry{}, fmt.Errorf("%w: entry %d: stream %s is not an integer", ErrSnapshot, idx, describe(sv))
		}
	}
	e.t = -1
	if tv, ok := d.get("time_us"); ok && tv != nil {
		t, ok := tv.(int64)
		if !ok {
			return entry{}, fmt.Errorf("%w: entry %d: time_us %s is not an integer", ErrSnapshot, idx, describe(tv))
		}
		if t < 0 {
			return entry{}, fmt.Errorf("%w: entry %d: negative time_us %d", ErrSnapshot, idx, t)
		}
		e.t = t
	}
	return e, nil
}

// rawSegment is a segment as the snapshot records it, raw stream handle
// included.
type rawSegment struct {
	addr, size, stream uint64
	small              bool
}

// preludeAlloc is one allocation rebuilt from before the trace's window.
type preludeAlloc struct {
	addr   uint64
	size   uint64
	stream uint64
}

// converter holds the state of step 3.
type converter struct {
	s       *Snapshot
	streams map[uint64]int
	live    map[uint64]*liveAlloc
	held    map[uint64]uint64 // address of a held free → its ID, until free_completed
	nextID  uint64
	liveSum uint64
}

type liveAlloc struct {
	id   uint64
	size uint64
}

// stream returns the dense stream of a raw handle, numbering a new one; a
// handle beyond the first MaxStreams distinct ones is refused.
func (c *converter) stream(raw uint64) (int, error) {
	if id, ok := c.streams[raw]; ok {
		return id, nil
	}
	id := len(c.s.StreamHandles)
	if id >= MaxStreams {
		return 0, fmt.Errorf("%w: stream handle %#x is the %d-th distinct stream (at most %d)", ErrSnapshot, raw, id+1, MaxStreams)
	}
	c.streams[raw] = id
	c.s.StreamHandles = append(c.s.StreamHandles, raw)
	return id, nil
}

func (c *converter) alloc(t int64, addr, size, stream uint64) error {
	if c.liveSum > math.MaxInt64-size {
		return fmt.Errorf("%w: live bytes exceed 2^63", ErrSnapshot)
	}
	dense, err := c.stream(stream)
	if err != nil {
		return err
	}
	id := c.nextID
	c.nextID++
	c.s.Events = append(c.s.Events, Event{Op: OpAlloc, T: t, ID: id, Size: size, Stream: dense})
	c.live[addr] = &liveAlloc{id: id, size: size}
	c.liveSum += size
	if c.liveSum > c.s.PeakLive {
		c.s.PeakLive = c.liveSum
	}
	return nil
}

// free frees the allocation live at addr, held (its memory taken until
// release) or not; false when none is live there.
func (c *converter) free(t int64, addr uint64, held bool) bool {
	a, ok := c.live[addr]
	if !ok {
		return false
	}
	c.s.Events = append(c.s.Events, Event{Op: OpFree, T: t, ID: a.id, Held: held})
	c.liveSum -= a.size
	delete(c.live, addr)
	if held {
		c.held[addr] = a.id
	}
	return true
}

// release releases the held free at addr; false when none is held there.
func (c *converter) release(t int64, addr uint64) bool {
	id, ok := c.held[addr]
	if !ok {
		return false
	}
	c.s.Events = append(c.s.Events, Event{Op: OpRelease, T: t, ID: id})
	delete(c.held, addr)
	return true
}

// cleanup emits an empty_cache as native cleanup events, one per stream
// known so far (PyTorch releases every stream's cached segments), and
// returns the index of the first; −1 before any event, when a replay
// (which starts with nothing reserved) has nothing to release.
func (c *converter) cleanup(t int64) int {
	n := len(c.s.StreamHandles)
	if n == 0 {
		return -1
	}
	first := len(c.s.Events)
	for d := 0; d < n; d++ {
		c.s.Events = append(c.s.Events, Event{Op: OpCleanup, T: t, Stream: d})
	}
	c.s.Counts.Cleanups += n
	return first
}

// convertSnapshot converts the device opts chooses (ReadSnapshot's rules)
// of the decoded snapshot root.
func convertSnapshot(root any, opts SnapshotOptions) (*Snapshot, error) {
	doc, err := parseDoc(root)
	if err != nil {
		return nil, err
	}
	dev, err := doc.choose(opts)
	if err != nil {
		return nil, err
	}
	return doc.convert(dev, opts)
}

// choose is the device ReadSnapshot converts: the chosen one, which must
// have data; else the one device with data, device 0 when none has any.
func (doc *snapshotDoc) choose(opts SnapshotOptions) (int, error) {
	withData := doc.withData()
	if opts.ChooseDevice {
		if !doc.dataOf(opts.Device).HasData() {
			return 0, &NoDeviceDataError{Device: doc.dataOf(opts.Device), Devices: withData}
		}
		return opts.Device, nil
	}
	switch len(withData) {
	case 0:
		return 0, nil
	case 1:
		return withData[0].Device, nil
	}
	// Never one device silently: the caller chooses, or reads each
	// (ReadSnapshotDevices).
	return 0, &SeveralDevicesError{Devices: withData}
}

// convert converts device dev's trace and segments (the file comment's
// three steps).
func (doc *snapshotDoc) convert(dev int, opts SnapshotOptions) (*Snapshot, error) {
	s := &Snapshot{Counts: SnapshotCounts{Skipped: map[string]int{}}, Device: dev, WrittenBy: doc.writtenBy, AllocatorSettings: doc.settings, Devices: doc.withData()}
	raw := doc.trace(dev)

	// Step 1: parse.
	entries := make([]entry, len(raw))
	s.frames = make([]framesRef, len(raw))
	for i, v := range raw {
		e, err := parseEntry(v, i)
		if err != nil {
			return nil, err
		}
		s.frames[i] = framesRefOf(v.(*pyDict)) // parseEntry checked it is one
		if e.kind == actSegmentSub {
			fv, _ := v.(*pyDict).get("frames")
			e.frames = releaseFramesOf(fv)
		}
		if e.t < 0 {
			e.t = int64(i)
			s.Counts.MissingTimes++
		}
		entries[i] = e
	}
	s.Counts.Entries = len(entries)

	// Segments of the chosen device: reserved bytes and active blocks.
	var active []preludeAlloc
	var endSegments []rawSegment
	for _, seg := range doc.segments {
		if seg.device != dev {
			continue
		}
		s.Segments++
		s.FinalReserved += seg.raw.size // parseDoc bounded the device's sum
		endSegments = append(endSegments, seg.raw)
		active = append(active, seg.active...)
	}

	// Step 2: prelude.
	var prelude []preludeAlloc
	if !opts.NoPrelude {
		allocated := make(map[uint64]bool)
		for _, e := range entries {
			if e.kind == actAlloc {
				allocated[e.addr] = true
			}
		}
		activeAt := make(map[uint64]preludeAlloc, len(active))
		for _, a := range active {
			activeAt[a.addr] = a
		}
		seen := make(map[uint64]bool)
		for _, e := range entries {
			switch e.kind {
			case actAlloc:
				seen[e.addr] = true
			case actFreeRequested, actFreeCompleted:
				if seen[e.addr] {
					break
				}
				seen[e.addr] = true
				if a, ok := activeAt[e.addr]; ok && !allocated[e.addr] {
					// Still active in `segments` and never re-allocated: the
					// same block, whose requested_size is the better size.
					prelude = append(prelude, a)
					s.Counts.PreludeFromFrees++
				} else if e.hasSize && e.size > 0 {
					prelude = append(prelude, preludeAlloc{addr: e.addr, size: e.size, stream: e.stream})
					s.Counts.PreludeFromFrees++
				}
			}
		}
		for _, a := range active {
			if !seen[a.addr] {
				seen[a.addr] = true
				prelude = append(prelude, a)
				s.Counts.PreludeFromSegments++
			}
		}
		slices.SortStableFunc(prelude, func(a, b preludeAlloc) int {
			switch {
			case a.addr < b.addr:
				return -1
			case a.addr > b.addr:
				return 1
			}
			return 0
		})
	}

	// Which release runs become cleanup events (releases.go).
	runs, runNets := releaseRuns(entries, maxSplitOf(doc.settings))
	runAt := make(map[int]int, len(runs))
	for k, r := range runs {
		runAt[r.First] = k
	}
	var oomNets []int64

	// Step 3: emit.
	c := &converter{s: s, streams: map[uint64]int{}, live: map[uint64]*liveAlloc{}, held: map[uint64]uint64{}, nextID: 1}
	s.Events = make([]Event, 0, len(prelude)+len(entries))
	var t0 int64
	if len(entries) > 0 {
		t0 = entries[0].t
	}
	for _, a := range prelude {
		if err := c.alloc(t0, a.addr, a.size, a.stream); err != nil {
			return nil, fmt.Errorf("prelude at address %#x: %w", a.addr, err)
		}
		s.Counts.PreludeBytes += a.size
	}
	s.EventEntries = make([]int32, len(s.Events), cap(s.Events))
	for i := range s.EventEntries {
		s.EventEntries[i] = -1 // the prelude: no entry of the trace
	}
	s.Counts.Prelude = len(prelude)
	lastT := t0
	var net, maxNet int64
	maxNetEntry := -1 // the entry where net reached maxNet (> 0)
	// The window (see Snapshot.FirstAlloc): the net before its first alloc
	// entry, and the highest net from there on.
	s.FirstAlloc, s.FirstAllocEvent = -1, -1
	var netAtWindow, maxNetWindow int64
	for i, e := range entries {
		for len(s.EventEntries) < len(s.Events) { // the previous entry's events
			s.EventEntries = append(s.EventEntries, int32(i-1))
		}
		t := e.t
		if t < lastT {
			t = lastT
			s.Counts.ClampedTimes++
		}
		lastT = t
		if k, ok := runAt[i]; ok && runs[k].Kind.Cleanup() {
			runs[k].Cleanup = c.cleanup(t)
		}
		switch e.kind {
		case actAlloc:
			if s.FirstAlloc < 0 {
				s.FirstAlloc, netAtWindow, maxNetWindow = i, net, net
				s.LiveAtFirstAlloc = c.liveSum
				s.FirstAllocEvent = len(s.Events)
				if _, live := c.live[e.addr]; live {
					s.FirstAllocEvent++ // after the implied free
				}
				if _, held := c.held[e.addr]; held {
					s.FirstAllocEvent++ // after the implied release
				}
			}
			c.release(t, e.addr) // PyTorch never reuses a block before its free completes
			if c.free(t, e.addr, false) {
				s.Counts.ImpliedFrees++
			}
			if err := c.alloc(t, e.addr, e.size, e.stream); err != nil {
				return nil, fmt.Errorf("entry %d: %w", i, err)
			}
			s.Counts.Allocs++
		case actFreeRequested:
			if _, ok := c.live[e.addr]; !ok {
				s.Counts.UnmatchedFreeRequests++
				break
			}
			s.Counts.FreeRequests++
			if i+1 < len(entries) && entries[i+1].kind == actFreeCompleted && entries[i+1].addr == e.addr {
				break // completed by the next entry (no other stream used the block): a plain free there
			}
			c.free(t, e.addr, true)
			s.Counts.HeldFrees++
		case actFreeCompleted:
			if c.release(t, e.addr) || c.free(t, e.addr, false) {
				s.Counts.Frees++
			} else {
				s.Counts.IgnoredFrees++
			}
		case actSegmentAdd, actSegmentSub:
			s.Counts.SegmentEvents++
			d := int64(e.rawSize) // ≤ 2^62
			if e.kind == actSegmentSub {
				d = -d
			}
			if (d > 0 && net > math.MaxInt64-d) || (d < 0 && net < math.MinInt64-d) {
				return nil, fmt.Errorf("%w: entry %d: segment bytes overflow", ErrSnapshot, i)
			}
			net += d
			if net > maxNet {
				maxNet, maxNetEntry = net, i
			}
			if s.FirstAlloc >= 0 {
				maxNetWindow = max(maxNetWindow, net)
			}
			s.Reserved = append(s.Reserved, ReservedPoint{Entry: i, Event: len(s.Events), T: t})
			s.Reserved[len(s.Reserved)-1].Bytes = uint64(net) // fixed up below
		case actOOM:
			s.Counts.OOMs++
			s.OOMEntries = append(s.OOMEntries, OOMEntry{Entry: i, Size: e.size, DeviceFree: e.free, HasDeviceFree: e.hasFree})
			oomNets = append(oomNets, net)
		case actSnapshot:
			s.Counts.Snapshots++
		default:
			s.Counts.Skipped[e.action]++
			s.Counts.SkippedTotal++
		}
	}
	for len(s.EventEntries) < len(s.Events) {
		s.EventEntries = append(s.EventEntries, int32(len(entries)-1))
	}
	// Segments held before the window: freed in it without being allocated
	// in it, or still held at the end and not allocated in it.
	born := map[uint64]bool{}
	allocatedInWindow := map[uint64]bool{}
	var startSegs []rawSegment
	for _, e := range entries {
		switch e.action {
		case "segment_alloc":
			born[e.addr] = true
			allocatedInWindow[e.addr] = true
		case "segment_free":
			if !born[e.addr] {
				startSegs = append(startSegs, rawSegment{addr: e.addr, size: e.rawSize, stream: e.stream, small: e.rawSize == 2<<20})
			}
			delete(born, e.addr)
		}
	}
	for _, rs := range endSegments {
		if !allocatedInWindow[rs.addr] {
			startSegs = append(startSegs, rs)
		}
	}
	slices.SortStableFunc(startSegs, func(a, b rawSegment) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	for _, rs := range startSegs {
		dense, ok := c.streams[rs.stream]
		if !ok {
			dense = -1
		}
		s.StartSegments = append(s.StartSegments, StartSegment{Address: rs.addr, Size: rs.size, Stream: dense, Small: rs.small})
	}

	s.Placements = placements(s, entries, startSegs, prelude)
	s.Counts.PendingAtEnd = len(c.held)
	s.FinalLive = c.liveSum
	s.Streams = len(s.StreamHandles)

	// Reserved timeline: start = final − net. The net lies in
	// [−2^63, 2^63), so start and start + maxNet are worked out in uint64
	// (where they cannot wrap) and refused above 2^62 like every other size;
	// after that every point start + net fits an int64.
	if s.FinalReserved > math.MaxInt64/2 {
		return nil, fmt.Errorf("%w: segments total %d bytes is impossible", ErrSnapshot, s.FinalReserved)
	}
	var ustart uint64
	switch {
	case net < 0:
		ustart = s.FinalReserved + (0 - uint64(net)) // < 2^62 + 2^63
	case uint64(net) <= s.FinalReserved:
		ustart = s.FinalReserved - uint64(net)
	default:
		s.ReservedInconsistent = true
	}
	if ustart > MaxSize {
		return nil, fmt.Errorf("%w: segments total %d bytes and the trace's segment entries net %d bytes: reserved bytes before the trace exceed 2^62", ErrSnapshot, s.FinalReserved, net)
	}
	if peak := ustart + uint64(max(maxNet, 0)); peak > MaxSize { // < 2^62 + 2^63
		return nil, fmt.Errorf("%w: entry %d: reserved bytes reach %d, more than 2^62", ErrSnapshot, maxNetEntry, peak)
	}
	start := int64(ustart)
	s.ReservedAtStart = ustart
	s.PeakReserved = ustart + uint64(max(maxNet, 0))
	for i := range s.Reserved {
		v := start + int64(s.Reserved[i].Bytes)
		if v < 0 {
			v = 0
		}
		s.Reserved[i].Bytes = uint64(v)
	}
	// Every net lies between the lowest and the highest, so start + net is
	// in [0, PeakReserved] once clamped at 0.
	level := func(n int64) uint64 { return uint64(max(start+n, 0)) }
	if s.FirstAlloc < 0 {
		// No alloc entry: the window is the dump, and the live blocks are
		// all a replay sees.
		s.LiveAtFirstAlloc = c.liveSum
		netAtWindow, maxNetWindow = net, net
	}
	s.ReservedAtFirstAlloc = level(netAtWindow)
	s.WindowPeakReserved = level(maxNetWindow)
	s.UnexplainedSegments, s.UnexplainedReserved = unexplainedSegments(entries, startSegs, prelude, s.FirstAlloc)
	for k := range runs {
		runs[k].ReservedBefore = level(runNets[k])
	}
	for k := range s.OOMEntries {
		s.OOMEntries[k].Reserved = level(oomNets[k])
	}
	s.Releases = runs
	s.Capacity = recordedCapacity(runs, s.OOMEntries, s.PeakReserved)
	return s, nil
}

// unexplainedSegments counts the segments held when the window began (at
// entry first, or at the end when first < 0) in which no prelude
// allocation and no alloc entry of the window lies (Snapshot.
// UnexplainedReserved). held are the segments held before the trace, in
// address order.
func unexplainedSegments(entries []entry, before []rawSegment, prelude []preludeAlloc, first int) (int, uint64) {
	window := len(entries)
	if first >= 0 {
		window = first
	}
	type span struct{ addr, size uint64 }
	held := map[uint64]span{}
	for _, rs := range before {
		held[rs.addr] = span{rs.addr, rs.size}
	}
	for _, e := range entries[:window] {
		switch e.action {
		case "segment_alloc":
			held[e.addr] = span{e.addr, e.rawSize}
		case "segment_free":
			delete(held, e.addr)
		}
	}
	if len(held) == 0 {
		return 0, 0
	}
	var used []uint64
	for _, a := range prelude {
		used = append(used, a.addr)
	}
	for _, e := range entries[window:] {
		if e.kind == actAlloc {
			used = append(used, e.addr)
		}
	}
	slices.Sort(used)
	n, bytes := 0, uint64(0)
	for _, sp := range held {
		i, _ := slices.BinarySearch(used, sp.addr)
		if i < len(used) && used[i]-sp.addr < sp.size {
			continue
		}
		n++
		bytes += min(sp.size, math.MaxUint64-bytes)
	}
	return n, bytes
}

// plainDict copies a decoded dict's string-keyed scalar entries, and its
// nested dicts down to depth levels, into Go maps; other entries (lists,
// non-string keys, deeper dicts) are left out.
func plainDict(d *pyDict, depth int) map[string]any {
	m := make(map[string]any, len(d.keys))
	for i, k := range d.keys {
		key, ok := k.(string)
		if !ok {
			continue
		}
		switch v := d.vals[i].(type) {
		case nil, bool, int64, float64, string, *big.Int:
			m[key] = v
		case *pyDict:
			if depth > 1 {
				m[key] = plainDict(v, depth-1)
			}
		}
	}
	return m
}

// placements finds, for each alloc event, the plain segment PyTorch put its
// block in: the start segments, then segment_alloc and segment_free entries
// in order (mapped ranges of expandable segments are not plain segments).
func placements(s *Snapshot, entries []entry, start []rawSegment, prelude []preludeAlloc) []SegmentPlacement {
	var live []SegmentPlacement // by address
	find := func(addr uint64) int {
		return sort.Search(len(live), func(i int) bool { return live[i].Addr+live[i].Size > addr })
	}
	add := func(p SegmentPlacement) {
		i := sort.Search(len(live), func(i int) bool { return live[i].Addr >= p.Addr })
		if i < len(live) && live[i].Addr == p.Addr {
			live[i] = p
			return
		}
		live = slices.Insert(live, i, p)
	}
	for _, rs := range start {
		if rs.addr != 0 && rs.size != 0 {
			add(SegmentPlacement{Addr: rs.addr, Size: rs.size})
		}
	}
	lookup := func(addr uint64) SegmentPlacement {
		if i := find(addr); i < len(live) && live[i].Addr <= addr {
			return live[i]
		}
		return SegmentPlacement{}
	}
	out := make([]SegmentPlacement, len(s.Events))
	next := 0 // entries applied
	for i, e := range s.Events {
		if e.Op != OpAlloc {
			continue
		}
		if i < len(prelude) && s.EventEntries[i] < 0 {
			out[i] = lookup(prelude[i].addr)
			continue
		}
		at := int(s.EventEntries[i])
		for ; next <= at && next < len(entries); next++ {
			switch en := entries[next]; en.action {
			case "segment_alloc":
				add(SegmentPlacement{Addr: en.addr, Size: en.rawSize})
			case "segment_free":
				if j := find(en.addr); j < len(live) && live[j].Addr == en.addr {
					live = slices.Delete(live, j, j+1)
				}
			}
		}
		if at >= 0 && at < len(entries) {
			out[i] = lookup(entries[at].addr)
		}
	}
	return out
}
