// A snapshot's top level and its devices (design §13.2): every shape
// PyTorch's memory_viz reads, and which devices hold data.
//
// Shapes, as torch/cuda/_memory_viz.py and torch/utils/viz/MemoryViz.js
// read them:
//
//   - A dict with `segments` and `device_traces`: torch.cuda.memory.
//     _snapshot() and _dump_snapshot (and gpumem's WriteTorchSnapshot). The
//     traces may all be empty (history off, or _snapshot() taken without
//     recording): the segments are then all there is. A dict with only one
//     of the two keys is read with the other empty.
//   - A list of segments: torch.cuda.memory_snapshot(). memory_viz's _read
//     makes it {'segments': list, 'traces': []}: segments, no trace.
//
// Blocks: PyTorch 2.1 and later give each block its `address`; PyTorch
// 2.0's blocks have none, only `size`, `state` and a `history` of {addr,
// real_size, frames}, newest first. memory_viz (annotate_snapshot) gives
// every block its segment's `address` plus the sizes of the blocks before
// it; this reader does the same for a block without an address, and
// refuses a block that would then lie past its segment's total_size (the
// sizes cannot be the segment's). A live block's request is its history's
// newest real_size when it has a history (capped at the block's size),
// else its requested_size, else its size. An inactive block's
// requested_size is never read: in the 2.0 format it is left over from an
// earlier use of the memory and may exceed the block's size.
//
// Devices: a device has data when it has segments or trace entries other
// than markers (`snapshot` entries, one per _dump_snapshot call, which
// allocate nothing). A file may hold several devices' data, or all of it
// on device 1 with device 0's trace empty or holding one marker; devices
// are chosen by their data, never by their position alone.

package trace

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrNotSnapshot is returned by ReadSnapshot for input that decodes (a
// pickle or JSON) but is none of the shapes a PyTorch memory snapshot
// takes: its message says what the top level is and what was expected.
var ErrNotSnapshot = errors.New("not a PyTorch memory snapshot")

// ErrSeveralDevices is matched by a *SeveralDevicesError: the snapshot
// holds data for more than one device and none was chosen.
var ErrSeveralDevices = errors.New("the snapshot holds data for several devices")

// ErrNoDeviceData is matched by a *NoDeviceDataError: the chosen device
// has no data in the snapshot.
var ErrNoDeviceData = errors.New("no data for the chosen device")

// snapshotShapes is what ErrNotSnapshot's message says was expected.
const snapshotShapes = "a dict with segments and device_traces (torch.cuda.memory._snapshot(), _dump_snapshot) or a list of segments (torch.cuda.memory_snapshot())"

// DeviceData is what a snapshot holds for one device: its segments at the
// dump and its trace.
type DeviceData struct {
	Device   int
	Segments int    // segments of the device in `segments`
	Reserved uint64 // their total_size: PyTorch's reserved bytes at the dump
	Live     uint64 // bytes requested by its live (active) blocks at the dump
	Entries  int    // entries of device_traces[Device], markers excluded
	Markers  int    // `snapshot` marker entries of device_traces[Device]
}

// HasData reports whether the device has segments or trace entries other
// than markers.
func (d DeviceData) HasData() bool { return d.Segments > 0 || d.Entries > 0 }

// String describes the device's data in a line: "device 1: 3.08 GiB live
// and 3.94 GiB reserved in 255 segments at the dump, no trace entries".
func (d DeviceData) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %d: ", d.Device)
	if d.Segments > 0 {
		fmt.Fprintf(&b, "%s live and %s reserved in %d segment%s at the dump", binaryBytes(d.Live), binaryBytes(d.Reserved), d.Segments, plural(d.Segments))
	} else {
		b.WriteString("no segments at the dump")
	}
	switch d.Entries {
	case 0:
		b.WriteString(", no trace entries")
	default:
		fmt.Fprintf(&b, ", %d trace entr%s", d.Entries, pluralY(d.Entries))
	}
	if d.Markers > 0 {
		fmt.Fprintf(&b, " (and %d snapshot marker%s)", d.Markers, plural(d.Markers))
	}
	return b.String()
}

// binaryBytes writes n in binary units as the reports do ("3.08 GiB",
// "512 B"); trace knows no device, so not through internal/pool.
func binaryBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func pluralY(n int) string {
	if n == 1 {
		return "y"
	}
	return "ies"
}

// deviceList is "0, 1, 2", the first listedDevices then "…".
func deviceList(ds []DeviceData) string {
	var s []string
	for i, d := range ds {
		if i == listedDevices {
			s = append(s, "…")
			break
		}
		s = append(s, strconv.Itoa(d.Device))
	}
	return strings.Join(s, ", ")
}

// MaxSnapshotDevices bounds the devices ReadSnapshotDevices converts from
// one snapshot: eight times a 8-GPU node's, so that every real snapshot is
// read whole while a crafted one with a tiny segment on each of a million
// devices cannot make a million conversions out of a few megabytes.
const MaxSnapshotDevices = 64

// listedDevices bounds the device lines an error message lists.
const listedDevices = 16

// writeDevices writes one line per device, the first listedDevices.
func writeDevices(b *strings.Builder, ds []DeviceData) {
	for i, d := range ds {
		if i == listedDevices {
			fmt.Fprintf(b, "\n  … and %d more devices", len(ds)-i)
			return
		}
		b.WriteString("\n  ")
		b.WriteString(d.String())
	}
}

// SeveralDevicesError is ReadSnapshot's error for a snapshot with data
// (segments, or trace entries other than markers) for more than one device
// when SnapshotOptions.ChooseDevice is not set: one device is converted at
// a time, and none is dropped silently. ReadSnapshotDevices converts each
// instead. It matches ErrSeveralDevices.
type SeveralDevicesError struct {
	Devices []DeviceData // the devices with data, in order
	// Choose, when set, says how the caller's user chooses ("with
	// -device N"): the message puts it after "choose one".
	Choose string
}

func (e *SeveralDevicesError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the snapshot holds data for devices %s: choose one", deviceList(e.Devices))
	if e.Choose != "" {
		b.WriteString(" " + e.Choose)
	}
	writeDevices(&b, e.Devices)
	return b.String()
}

// Unwrap makes a SeveralDevicesError match ErrSeveralDevices.
func (e *SeveralDevicesError) Unwrap() error { return ErrSeveralDevices }

// NoDeviceDataError is ReadSnapshot's error for a chosen device
// (SnapshotOptions.Device) without data in the snapshot: no segments and
// no trace entry other than markers. It matches ErrNoDeviceData.
type NoDeviceDataError struct {
	Device  DeviceData   // the chosen device (markers at most)
	Devices []DeviceData // the devices with data, in order; none when the snapshot has none
	// Choose, when set, says how the caller's user chooses another
	// device ("with -device N"), put after the devices with data.
	Choose string
}

func (e *NoDeviceDataError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "device %d has no data in the snapshot (no segments, no trace entries", e.Device.Device)
	if e.Device.Markers > 0 {
		fmt.Fprintf(&b, " but %d snapshot marker%s", e.Device.Markers, plural(e.Device.Markers))
	}
	b.WriteString(")")
	if len(e.Devices) == 0 {
		b.WriteString(", and no other device has any")
		return b.String()
	}
	fmt.Fprintf(&b, "; data for device%s %s", plural(len(e.Devices)), deviceList(e.Devices))
	if e.Choose != "" {
		b.WriteString(": choose one " + e.Choose)
	}
	writeDevices(&b, e.Devices)
	return b.String()
}

// Unwrap makes a NoDeviceDataError match ErrNoDeviceData.
func (e *NoDeviceDataError) Unwrap() error { return ErrNoDeviceData }

// snapshotDoc is a decoded snapshot's top level, in either shape.
type snapshotDoc struct {
	traces    []any // device_traces' items; nil when there are none
	segments  []docSegment
	writtenBy string
	settings  map[string]any
	// data is every device's DeviceData, devices with markers only
	// included, by device.
	data map[int]*DeviceData
}

// docSegment is one of `segments`, read: its device, its extent and its
// live blocks.
type docSegment struct {
	device int
	raw    rawSegment
	active []preludeAlloc
}

// maxDevice bounds a segment's device index: far above any machine's GPUs,
// low enough that an index always fits an int.
const maxDevice = 1 << 20

// parseDoc reads a decoded snapshot's top level: the dict or the list,
// every segment (with its blocks' addresses, derived where absent), and
// the device traces' shapes. The traces' entries are parsed later, for the
// chosen devices only.
func parseDoc(root any) (*snapshotDoc, error) {
	doc := &snapshotDoc{data: map[int]*DeviceData{}}
	var segs []any
	switch top := root.(type) {
	case *pyDict:
		tracesV, hasTraces := top.get("device_traces")
		segV, hasSegs := top.get("segments")
		if !hasTraces && !hasSegs {
			return nil, fmt.Errorf("%w: top level is %s, without segments or device_traces; expected %s", ErrNotSnapshot, describeDict(top), snapshotShapes)
		}
		if hasTraces && tracesV != nil {
			l, ok := asList(tracesV)
			if !ok {
				return nil, fmt.Errorf("%w: device_traces is %s, not a list", ErrSnapshot, describe(tracesV))
			}
			doc.traces = l
		}
		if hasSegs && segV != nil {
			l, ok := asList(segV)
			if !ok {
				return nil, fmt.Errorf("%w: segments is %s, not a list", ErrSnapshot, describe(segV))
			}
			segs = l
		}
		if v, ok := top.get(writtenByKey); ok {
			w, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%w: %s is %s, not a string", ErrSnapshot, writtenByKey, describe(v))
			}
			doc.writtenBy = w
		}
		if v, ok := top.get("allocator_settings"); ok {
			d, ok := v.(*pyDict)
			if !ok && v != nil {
				return nil, fmt.Errorf("%w: allocator_settings is %s, not a dict", ErrSnapshot, describe(v))
			}
			if ok {
				doc.settings = plainDict(d, 2)
			}
		}
	case *pyList, pyTuple:
		// torch.cuda.memory_snapshot(): the segments alone. Its items
		// are segment dicts; a list of anything else is not a snapshot.
		segs, _ = asList(top)
		if len(segs) > 0 {
			d, ok := segs[0].(*pyDict)
			if !ok {
				return nil, fmt.Errorf("%w: top level is %s whose first item is %s; expected %s", ErrNotSnapshot, describe(root), describe(segs[0]), snapshotShapes)
			}
			if _, ok := d.get("total_size"); !ok {
				return nil, fmt.Errorf("%w: top level is %s whose first item is %s without total_size, not a segment; expected %s", ErrNotSnapshot, describe(root), describeDict(d), snapshotShapes)
			}
		}
	default:
		return nil, fmt.Errorf("%w: top level is %s; expected %s", ErrNotSnapshot, describe(root), snapshotShapes)
	}

	for i, tv := range doc.traces {
		l, ok := asList(tv)
		if !ok && tv != nil {
			return nil, fmt.Errorf("%w: device_traces[%d] is %s, not a list", ErrSnapshot, i, describe(tv))
		}
		if len(l) == 0 {
			continue
		}
		d := doc.device(i)
		for _, ev := range l {
			if e, ok := ev.(*pyDict); ok {
				if a, _ := e.get("action"); a == "snapshot" {
					d.Markers++
					continue
				}
			}
			d.Entries++
		}
	}
	for i, sv := range segs {
		seg, err := parseSegment(sv, i)
		if err != nil {
			return nil, err
		}
		d := doc.device(seg.device)
		d.Segments++
		// Each total is at most 2^62, so the sum cannot wrap before this
		// check refuses it.
		d.Reserved += seg.raw.size
		if d.Reserved > math.MaxInt64/2 {
			return nil, fmt.Errorf("%w: segment %d: segments total more than 2^62 bytes", ErrSnapshot, i)
		}
		for _, a := range seg.active {
			d.Live += a.size // each at most its block's size, within the segment
		}
		doc.segments = append(doc.segments, seg)
	}
	return doc, nil
}

// device returns device i's DeviceData, adding it.
func (doc *snapshotDoc) device(i int) *DeviceData {
	d, ok := doc.data[i]
	if !ok {
		d = &DeviceData{Device: i}
		doc.data[i] = d
	}
	return d
}

// withData lists the devices with data, in order.
func (doc *snapshotDoc) withData() []DeviceData {
	var out []DeviceData
	for _, d := range doc.data {
		if d.HasData() {
			out = append(out, *d)
		}
	}
	slices.SortFunc(out, func(a, b DeviceData) int { return a.Device - b.Device })
	return out
}

// dataOf is device i's DeviceData, zero (but for the device) when the
// snapshot holds nothing for it.
func (doc *snapshotDoc) dataOf(i int) DeviceData {
	if d, ok := doc.data[i]; ok {
		return *d
	}
	return DeviceData{Device: i}
}

// trace is device i's raw trace entries, none when it has no trace.
func (doc *snapshotDoc) trace(i int) []any {
	if i < 0 || i >= len(doc.traces) {
		return nil
	}
	l, _ := asList(doc.traces[i]) // parseDoc checked it is a list or None
	return l
}

// parseSegment reads segment i: its device (0 when it names none), total
// size, stream and type, and its live blocks with their addresses and
// requested sizes (see the file comment).
func parseSegment(sv any, i int) (docSegment, error) {
	seg, ok := sv.(*pyDict)
	if !ok {
		return docSegment{}, fmt.Errorf("%w: segment %d is %s, not a dict", ErrSnapshot, i, describe(sv))
	}
	var out docSegment
	if dv, ok := seg.get("device"); ok && dv != nil {
		dev, ok := dv.(int64)
		if !ok || dev < 0 || dev > maxDevice {
			return docSegment{}, fmt.Errorf("%w: segment %d: device %s is not a device index", ErrSnapshot, i, describe(dv))
		}
		out.device = int(dev)
	}
	total, _, err := sizeField(seg, "total_size", "segment", i)
	if err != nil {
		return docSegment{}, err
	}
	var stream uint64
	if sv, ok := seg.get("stream"); ok && sv != nil {
		if stream, ok = asStreamKey(sv); !ok {
			return docSegment{}, fmt.Errorf("%w: segment %d: stream %s is not an integer", ErrSnapshot, i, describe(sv))
		}
	}
	segAddrV, _ := seg.get("address")
	segAddr, hasSegAddr := asUint64(segAddrV)
	out.raw = rawSegment{addr: segAddr, size: total, stream: stream, small: total == 2<<20}
	if tv, ok := seg.get("segment_type"); ok {
		if typ, ok := tv.(string); ok {
			out.raw.small = typ == "small"
		}
	}
	blocksV, _ := seg.get("blocks")
	blocks, _ := asList(blocksV)
	// offset is the bytes of the blocks before block j, while all of
	// their sizes are known (offsetKnown): a block without an address lies
	// there.
	var offset uint64
	offsetKnown := true
	unknownAt := -1 // the block whose size is missing
	where := fmt.Sprintf("segment %d block", i)
	for j, bv := range blocks {
		b, ok := bv.(*pyDict)
		if !ok {
			return docSegment{}, fmt.Errorf("%w: segment %d block %d is %s, not a dict", ErrSnapshot, i, j, describe(bv))
		}
		stv, _ := b.get("state")
		state, _ := stv.(string)
		active := strings.HasPrefix(state, "active")
		av, hasAddr := b.get("address")
		hasAddr = hasAddr && av != nil
		size, hasSize, err := sizeField(b, "size", where, j)
		if err != nil && (active || !hasAddr) {
			return docSegment{}, err
		}
		if !hasAddr {
			// PyTorch 2.0: the block lies after the ones before it.
			if !hasSegAddr {
				return docSegment{}, fmt.Errorf("%w: segment %d block %d has no address, and segment %d's address %s cannot place it", ErrSnapshot, i, j, i, describe(segAddrV))
			}
			if segAddr > math.MaxUint64-total {
				return docSegment{}, fmt.Errorf("%w: segment %d: address %#x plus total_size %d pass 2^64, so its blocks' addresses cannot be derived", ErrSnapshot, i, segAddr, total)
			}
			if !offsetKnown {
				return docSegment{}, fmt.Errorf("%w: segment %d block %d has no address, and block %d before it has no size to place it after", ErrSnapshot, i, j, unknownAt)
			}
			if !hasSize {
				return docSegment{}, fmt.Errorf("%w: segment %d block %d has neither an address nor a size", ErrSnapshot, i, j)
			}
			if offset > total || size > total-offset {
				return docSegment{}, fmt.Errorf("%w: segment %d block %d: the sizes of blocks 0 to %d add up to more than the segment's total_size %d, so their addresses cannot be derived", ErrSnapshot, i, j, j, total)
			}
		}
		addr := segAddr + offset // used only when derived: then offset < total and segAddr + total < 2^64
		if hasAddr {
			a, ok := asUint64(av)
			if !ok {
				return docSegment{}, fmt.Errorf("%w: segment %d block %d: address %s is not an address", ErrSnapshot, i, j, describe(av))
			}
			addr = a
		}
		if hasSize && offsetKnown {
			offset += size // ≤ 2^62 per block; refused above past total when used
			if offset > MaxSize {
				offsetKnown, unknownAt = false, j
			}
		} else if offsetKnown {
			offsetKnown, unknownAt = false, j
		}
		if !active {
			continue // its requested_size may be stale: never read
		}
		if !hasSize {
			return docSegment{}, fmt.Errorf("%w: segment %d block %d: live block without a size", ErrSnapshot, i, j)
		}
		req, err := liveRequest(b, size, where, j)
		if err != nil {
			return docSegment{}, err
		}
		out.active = append(out.active, preludeAlloc{addr: addr, size: req, stream: stream})
	}
	return out, nil
}

// liveRequest is the bytes a live block's allocation asked for: its
// history's newest real_size (PyTorch 2.0), at most the block's size; else
// its requested_size; else its size.
func liveRequest(b *pyDict, size uint64, where string, j int) (uint64, error) {
	if hv, ok := b.get("history"); ok && hv != nil {
		if h, ok := asList(hv); ok && len(h) > 0 {
			if newest, ok := h[0].(*pyDict); ok {
				real, has, err := sizeField(newest, "real_size", where+" history", j)
				if err != nil {
					return 0, err
				}
				if has {
					return min(real, size), nil
				}
			}
		}
	}
	req, has, err := sizeField(b, "requested_size", where, j)
	if err != nil {
		return 0, err
	}
	if has {
		return req, nil
	}
	return size, nil
}

// describeDict names a dict by its keys: `dict of 2 keys ("a", "b")`, the
// first few string keys only.
func describeDict(d *pyDict) string {
	const show = 5
	var ks []string
	for _, k := range d.keys {
		if s, ok := k.(string); ok && len(ks) < show {
			ks = append(ks, describe(s))
		}
	}
	if len(d.keys) == 0 {
		return "an empty dict"
	}
	out := fmt.Sprintf("a dict of %d key%s", len(d.keys), plural(len(d.keys)))
	if len(ks) > 0 {
		more := ""
		if len(d.keys) > len(ks) {
			more = ", …"
		}
		out += " (" + strings.Join(ks, ", ") + more + ")"
	}
	return out
}
