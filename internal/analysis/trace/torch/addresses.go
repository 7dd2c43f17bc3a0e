// Segment addresses: the tie-break of best fit.
//
// get_free_block takes the first block of its pool's set ordered by
// (stream, size, address): among free blocks of equal size, the one at the
// lowest address. The address is cudaMalloc's, chosen by the driver, and it
// does not follow allocation order: on an H200 with PyTorch 2.11, 150 of
// the 234 segments of four snapshots lay below the segment allocated just
// before them, 84 above (transformer-small: its fourth segment, 20 MiB,
// lies 872 MiB below its second). A model that numbers its segments in
// allocation order breaks every such tie towards the oldest segment, where
// PyTorch breaks it towards the lowest address; one different pick moves
// every later block, and a segment that stays partly used where PyTorch's
// emptied means a new segment PyTorch did not need. That was the whole of
// the model's difference from PyTorch on that card: fed the recorded
// addresses, every allocation of its four snapshots lands in the segment
// and at the offset PyTorch chose, and the peak reserved bytes are
// PyTorch's.
//
// A snapshot records the addresses (each segment_alloc entry's addr, each
// of `segments`' address, the addr of each alloc entry), so Config.Recorded
// gives, per event, the segment PyTorch placed that alloc's block in. When
// the model allocates a segment for alloc event i, it takes
// Recorded[i].Addr if Recorded[i].Size is the segment's size and no live
// segment overlaps that range; otherwise (no recording, a different size,
// a range in use: the model's run has left PyTorch's, as under a smaller
// capacity) it takes a synthetic address, above every address in
// Config.Recorded and Config.Cached and clear of every live segment. A
// Cached segment takes its Addr the same way, and MallocRecorded takes a
// recording per call. Every live segment, expandable ranges included, is
// kept by address (Allocator.segs), so no two overlap (T5).
//
// What no snapshot says: the address the driver would give a segment
// PyTorch never allocated (a run under another capacity or other settings
// once its segments differ from the recorded ones, or a snapshot without
// addresses, such as PyTorch 2.0's). Two conventions bracket the guess
// (Config.Addresses): AddressesRising, the default, puts such segments
// above every recorded one and each above the one before, so among
// equal-size free blocks they lose to the recorded ones and to older
// invented ones; AddressesFalling puts them below every recorded one and
// each below the one before, as cudaMalloc's addresses often fall over a
// run (one snapshot: 0x7f5066… → 0x7f504c… → 0x7f5024…), so they win those
// ties. Stats.SyntheticSegments counts such segments, so a caller can say
// how much of a run the convention touched and run the other to say how
// much a figure depends on it.

package torch

import (
	"math"
	"sort"
)

// RecordedSegment is the segment PyTorch placed one allocation in, as its
// snapshot recorded it: the segment's address and size (total_size). The
// zero value means unknown. A recording with Addr at or above 2^63, or Size
// of 0 or above 2^62, is treated as unknown.
type RecordedSegment struct {
	Addr uint64
	Size uint64
}

func (r RecordedSegment) usable() bool {
	return r.Addr != 0 && r.Addr < 1<<63 && r.Size != 0 && r.Size <= MaxRequest
}

// AddressConvention is how the model places a segment whose address no
// recording gives (the file comment).
type AddressConvention uint8

const (
	// AddressesRising places invented segments above every recorded one,
	// each above the last: the default.
	AddressesRising AddressConvention = iota
	// AddressesFalling places them below every recorded one, each below
	// the last.
	AddressesFalling
)

// String names the convention: "rising" or "falling".
func (c AddressConvention) String() string {
	if c == AddressesFalling {
		return "falling"
	}
	return "rising"
}

// fallingCeiling is where falling synthetic addresses start when nothing
// is recorded: 2^47, the top of the 47-bit user address space in which
// the driver's addresses lie (0x7f…).
const fallingCeiling = 1 << 47

// syntheticStart is the first synthetic address of an allocator started
// with cfg: rising, above every recorded or cached address (2 MiB
// aligned, one gap above the highest end), and at least baseAddress;
// falling, the bound below which they go down: one gap below the lowest
// recorded or cached address (2 MiB aligned), or fallingCeiling.
func syntheticStart(cfg Config) uint64 {
	var end uint64
	low := uint64(math.MaxUint64)
	note := func(r RecordedSegment) {
		if r.usable() {
			end = max(end, r.Addr+r.Size)
			low = min(low, r.Addr)
		}
	}
	for _, r := range cfg.Recorded {
		note(r)
	}
	for _, c := range cfg.Cached {
		note(RecordedSegment{Addr: c.Addr, Size: c.Size})
	}
	if cfg.Addresses == AddressesFalling {
		if end == 0 {
			return fallingCeiling
		}
		return low / RoundLarge * RoundLarge // the gap is taken below it
	}
	if end == 0 {
		return baseAddress
	}
	return max(baseAddress, (end+RoundLarge-1)/RoundLarge*RoundLarge+addressGap)
}

// segmentAddress returns the address of a new segment of size bytes: r's
// when r is usable, of that size, and no live segment overlaps its range
// (recorded true); else the next synthetic address past every live
// segment in the way. ok is false only when the synthetic addresses would
// pass 2^64.
func (a *Allocator) segmentAddress(r RecordedSegment, size uint64) (addr uint64, recorded, ok bool) {
	if r.usable() && r.Size == size && !a.overlaps(r.Addr, size) {
		return r.Addr, true, true
	}
	if a.cfg.Addresses == AddressesFalling {
		return a.fallingAddress(size)
	}
	for {
		if size > math.MaxUint64-addressGap || a.nextAddr > math.MaxUint64-(size+addressGap) {
			return 0, false, false
		}
		i := a.firstEndingAfter(a.nextAddr)
		if i == len(a.segs) || a.segs[i].addr >= a.nextAddr+size {
			addr = a.nextAddr
			a.nextAddr += size + addressGap
			return addr, false, true
		}
		// A segment at a recorded address lies in the way (only a
		// MallocRecorded hint puts one among the synthetic addresses).
		end := a.segs[i].addr + a.segs[i].size
		if end > math.MaxUint64-RoundLarge-addressGap {
			return 0, false, false
		}
		a.nextAddr = max(a.nextAddr, (end+RoundLarge-1)/RoundLarge*RoundLarge+addressGap)
	}
}

// fallingAddress is segmentAddress's synthetic address under
// AddressesFalling: the highest 2 MiB aligned address, one gap below the
// last synthetic one (a.nextAddr, which only falls), below which size
// bytes end clear of every live segment (a recorded one may lie below the
// floor only when a MallocRecorded hint put it there). ok is false when
// the addresses would pass 0.
func (a *Allocator) fallingAddress(size uint64) (addr uint64, recorded, ok bool) {
	for {
		top := a.nextAddr
		if top < addressGap || top-addressGap < size {
			return 0, false, false
		}
		addr = (top - addressGap - size) / RoundLarge * RoundLarge
		if !a.overlaps(addr, size) {
			a.nextAddr = addr
			return addr, false, true
		}
		// Below the segment in the way.
		i := a.firstEndingAfter(addr)
		a.nextAddr = min(a.nextAddr, a.segs[i].addr)
	}
}

// firstEndingAfter is the index in a.segs of the first segment ending after
// addr.
func (a *Allocator) firstEndingAfter(addr uint64) int {
	return sort.Search(len(a.segs), func(i int) bool { return a.segs[i].addr+a.segs[i].size > addr })
}

// overlaps reports whether a live segment holds any of [addr, addr+size).
func (a *Allocator) overlaps(addr, size uint64) bool {
	i := a.firstEndingAfter(addr)
	return i < len(a.segs) && a.segs[i].addr < addr+size
}

// track adds a new segment to a.segs and counts its address.
func (a *Allocator) track(seg *segment, recorded bool) {
	if !seg.expandable {
		if recorded {
			a.stats.RecordedSegments++
		} else {
			a.stats.SyntheticSegments++
		}
	}
	seg.recorded = recorded
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].addr >= seg.addr })
	a.segs = append(a.segs, nil)
	copy(a.segs[i+1:], a.segs[i:])
	a.segs[i] = seg
}

// untrack removes a released segment from a.segs, so a later segment may
// take its range (the driver reuses freed ranges).
func (a *Allocator) untrack(seg *segment) {
	i := sort.Search(len(a.segs), func(i int) bool { return a.segs[i].addr >= seg.addr })
	if i >= len(a.segs) || a.segs[i] != seg {
		panic("torch: released segment missing from the live segments (T5)")
	}
	a.segs = append(a.segs[:i], a.segs[i+1:]...)
}

// MallocRecorded is Malloc for an allocation PyTorch placed in segment r: a
// segment the call allocates takes r's address when it has r's size and
// the range is free (see the file comment). Malloc is MallocRecorded with
// the zero RecordedSegment.
func (a *Allocator) MallocRecorded(size uint64, stream int, r RecordedSegment) (Block, error) {
	a.hint = r
	defer func() { a.hint = RecordedSegment{} }()
	return a.Malloc(size, stream)
}
