// The PyTorch snapshot writer: gpumem's own memory as the dict that
// torch.cuda.memory._snapshot() returns, pickled so that PyTorch's viewer
// (pytorch.org/memory_viz) and the tool's ReadSnapshot open it.
//
// The pickle is protocol 2, plain data only (dicts, lists, strings,
// integers, floats, bools, None): no global is named, so a restricted
// unpickler (find_class refusing everything) loads it. Repeated strings —
// dict keys, action names, frame file names — are written once and
// referred to through the memo, as Python's pickler does, so a long trace
// costs a few bytes per key.

package history

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// WrittenByKey is the top-level key naming a snapshot's writer (gpumem
// writes it; PyTorch does not): readers tell a device's own history from a
// recording by it.
const WrittenByKey = "written_by"

// ErrUnwritable is returned by WriteTorchSnapshot for an allocator
// setting it cannot write as plain pickle data (another type, or nested
// too deep).
var ErrUnwritable = errors.New("allocator setting cannot be written in a PyTorch snapshot")

// TorchSnapshot is a memory snapshot in PyTorch's schema, for writing.
type TorchSnapshot struct {
	Segments []TorchSegment
	// Traces are the device traces, one per device index (PyTorch's
	// device_traces).
	Traces [][]TorchTraceEntry
	// AllocatorSettings, when set, is written as allocator_settings (plain
	// values: string, bool, int, int64, uint64, float64, nested
	// map[string]any).
	AllocatorSettings map[string]any
	// WrittenBy, when set, is written as the top-level key "written_by"
	// (PyTorch's viewer ignores keys it does not know): who made the
	// snapshot, so a reader does not take a gpumem device's reserve for
	// PyTorch's (Snapshot.WrittenBy).
	WrittenBy string
}

// TorchSegment is one segment of memory (a gpumem page): its blocks tile
// it in address order.
type TorchSegment struct {
	Device      int
	Address     uint64
	TotalSize   uint64
	Stream      uint64
	SegmentType string // "small" or "large"
	Expandable  bool   // is_expandable
	Blocks      []TorchBlock
}

// TorchBlock is one block of a segment. State is "active_allocated" for a
// live allocation and "inactive" for free room.
type TorchBlock struct {
	Address       uint64
	Size          uint64
	RequestedSize uint64
	State         string
	Frames        []TorchFrame
}

// TorchTraceEntry is one entry of a device trace. Action is one of alloc,
// free_requested, free_completed, segment_alloc, segment_free,
// segment_map, segment_unmap, oom (memory_viz's actions); for oom, Size is
// the request and Addr the device's free bytes, as PyTorch records them.
type TorchTraceEntry struct {
	Action string
	Addr   uint64
	Size   uint64
	Stream uint64
	TimeUS int64
	Frames []TorchFrame
}

// TorchFrame is one stack frame.
type TorchFrame struct {
	Name     string
	Filename string
	Line     int
}

// WriteTorchSnapshot writes s as a protocol-2 pickle of PyTorch's snapshot
// dict: segments (with allocated, active and requested sizes summed from
// their blocks), device_traces and, when set, allocator_settings.
func WriteTorchSnapshot(w io.Writer, s *TorchSnapshot) error {
	p := &pickler{w: bufio.NewWriterSize(w, 64<<10), memo: map[string]uint32{}}
	p.raw(0x80, 2) // PROTO 2
	p.beginDict()
	p.key("segments")
	p.beginList()
	for _, seg := range s.Segments {
		p.segment(seg)
	}
	p.endList()
	p.key("device_traces")
	p.beginList()
	for _, tr := range s.Traces {
		p.beginList()
		for _, e := range tr {
			p.traceEntry(e)
		}
		p.endList()
	}
	p.endList()
	if s.WrittenBy != "" {
		p.key(WrittenByKey)
		p.str(s.WrittenBy)
	}
	if s.AllocatorSettings != nil {
		p.key("allocator_settings")
		if err := p.value(s.AllocatorSettings, 2); err != nil {
			return err
		}
	}
	p.endDict()
	p.raw('.') // STOP
	if p.err != nil {
		return p.err
	}
	return p.w.Flush()
}

// pickler writes pickle opcodes, remembering the first write error.
type pickler struct {
	w    *bufio.Writer
	memo map[string]uint32
	err  error
	buf  [10]byte
}

func (p *pickler) raw(b ...byte) {
	if p.err == nil {
		_, p.err = p.w.Write(b)
	}
}

// The container helpers write EMPTY_* MARK … and APPENDS/SETITEMS; Python
// batches by 1000 items, but one batch of any length loads the same.
func (p *pickler) beginDict() { p.raw('}', '(') }
func (p *pickler) endDict()   { p.raw('u') }
func (p *pickler) beginList() { p.raw(']', '(') }
func (p *pickler) endList()   { p.raw('e') }

// str writes a string, through the memo once it has been written.
func (p *pickler) str(s string) {
	if idx, ok := p.memo[s]; ok {
		if idx < 256 {
			p.raw('h', byte(idx)) // BINGET
		} else {
			binary.LittleEndian.PutUint32(p.buf[:4], idx)
			p.raw('j', p.buf[0], p.buf[1], p.buf[2], p.buf[3]) // LONG_BINGET
		}
		return
	}
	binary.LittleEndian.PutUint32(p.buf[:4], uint32(len(s)))
	p.raw('X', p.buf[0], p.buf[1], p.buf[2], p.buf[3]) // BINUNICODE
	if p.err == nil {
		_, p.err = p.w.WriteString(s)
	}
	idx := uint32(len(p.memo))
	p.memo[s] = idx
	if idx < 256 {
		p.raw('q', byte(idx)) // BINPUT
	} else {
		binary.LittleEndian.PutUint32(p.buf[:4], idx)
		p.raw('r', p.buf[0], p.buf[1], p.buf[2], p.buf[3]) // LONG_BINPUT
	}
}

func (p *pickler) key(k string) { p.str(k) }

// uint writes a non-negative integer in the shortest opcode.
func (p *pickler) uint(v uint64) {
	switch {
	case v < 1<<8:
		p.raw('K', byte(v))
	case v < 1<<16:
		p.raw('M', byte(v), byte(v>>8))
	case v < 1<<31:
		binary.LittleEndian.PutUint32(p.buf[:4], uint32(v))
		p.raw('J', p.buf[0], p.buf[1], p.buf[2], p.buf[3])
	default:
		// LONG1: little-endian two's complement, a zero byte on top when
		// the highest bit is set (so it reads as positive).
		n := 0
		for x := v; x > 0; x >>= 8 {
			n++
		}
		binary.LittleEndian.PutUint64(p.buf[1:9], v)
		p.buf[9] = 0
		if v>>(8*n-1)&1 == 1 {
			n++
		}
		p.raw(0x8a, byte(n))
		p.raw(p.buf[1 : 1+n]...)
	}
}

// int writes a signed integer.
func (p *pickler) int(v int64) {
	if v >= 0 {
		p.uint(uint64(v))
		return
	}
	if v >= math.MinInt32 {
		binary.LittleEndian.PutUint32(p.buf[:4], uint32(int32(v)))
		p.raw('J', p.buf[0], p.buf[1], p.buf[2], p.buf[3])
		return
	}
	binary.LittleEndian.PutUint64(p.buf[:8], uint64(v))
	p.raw(0x8a, 8)
	p.raw(p.buf[:8]...)
}

func (p *pickler) bool(b bool) {
	if b {
		p.raw(0x88)
	} else {
		p.raw(0x89)
	}
}

func (p *pickler) float(f float64) {
	binary.BigEndian.PutUint64(p.buf[:8], math.Float64bits(f))
	p.raw('G')
	p.raw(p.buf[:8]...)
}

// value writes a plain value of allocator_settings.
func (p *pickler) value(v any, depth int) error {
	switch x := v.(type) {
	case nil:
		p.raw('N')
	case bool:
		p.bool(x)
	case int:
		p.int(int64(x))
	case int64:
		p.int(x)
	case uint64:
		p.uint(x)
	case float64:
		p.float(x)
	case string:
		p.str(x)
	case map[string]any:
		if depth == 0 {
			return fmt.Errorf("%w: allocator_settings nest too deep", ErrUnwritable)
		}
		p.beginDict()
		for _, k := range sortedKeys(x) {
			p.key(k)
			if err := p.value(x[k], depth-1); err != nil {
				return err
			}
		}
		p.endDict()
	default:
		return fmt.Errorf("%w: allocator_settings value of type %T cannot be written", ErrUnwritable, v)
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Insertion sort: settings dicts hold a few keys.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

func (p *pickler) frames(fs []TorchFrame) {
	p.beginList()
	for _, f := range fs {
		p.beginDict()
		p.key("name")
		p.str(f.Name)
		p.key("filename")
		p.str(f.Filename)
		p.key("line")
		p.int(int64(f.Line))
		p.endDict()
	}
	p.endList()
}

func (p *pickler) segment(seg TorchSegment) {
	var allocated, requested uint64
	for _, b := range seg.Blocks {
		if b.State == "active_allocated" {
			allocated += b.Size
			requested += b.RequestedSize
		}
	}
	typ := seg.SegmentType
	if typ == "" {
		typ = "large"
	}
	p.beginDict()
	p.key("device")
	p.int(int64(seg.Device))
	p.key("address")
	p.uint(seg.Address)
	p.key("total_size")
	p.uint(seg.TotalSize)
	p.key("allocated_size")
	p.uint(allocated)
	p.key("active_size")
	p.uint(allocated)
	p.key("requested_size")
	p.uint(requested)
	p.key("stream")
	p.uint(seg.Stream)
	p.key("segment_type")
	p.str(typ)
	p.key("segment_pool_id")
	p.beginTuple2(0, 0)
	p.key("is_expandable")
	p.bool(seg.Expandable)
	p.key("frames")
	p.frames(nil)
	p.key("blocks")
	p.beginList()
	for _, b := range seg.Blocks {
		p.beginDict()
		p.key("address")
		p.uint(b.Address)
		p.key("size")
		p.uint(b.Size)
		p.key("requested_size")
		p.uint(b.RequestedSize)
		p.key("state")
		p.str(b.State)
		p.key("frames")
		p.frames(b.Frames)
		p.endDict()
	}
	p.endList()
	p.endDict()
}

// beginTuple2 writes the tuple (a, b) (segment_pool_id).
func (p *pickler) beginTuple2(a, b uint64) {
	p.uint(a)
	p.uint(b)
	p.raw(0x86) // TUPLE2
}

func (p *pickler) traceEntry(e TorchTraceEntry) {
	p.beginDict()
	p.key("action")
	p.str(e.Action)
	// PyTorch keeps an oom entry's free bytes in the same field as an
	// address but writes them as device_free, which is what memory_viz
	// and every reader of its snapshots look up.
	if e.Action == "oom" {
		p.key("device_free")
	} else {
		p.key("addr")
	}
	p.uint(e.Addr)
	p.key("size")
	p.uint(e.Size)
	p.key("stream")
	p.uint(e.Stream)
	p.key("time_us")
	p.int(e.TimeUS)
	p.key("frames")
	p.frames(e.Frames)
	p.endDict()
}
