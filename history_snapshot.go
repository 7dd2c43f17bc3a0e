// The device's memory as PyTorch's snapshot (torch.cuda.memory._snapshot),
// which pytorch.org/memory_viz opens, written through
// history.WriteTorchSnapshot.
//
// Segments are what the device holds from storage, so their sizes add up to
// BytesAllocated exactly:
//
//   - A page backed whole, and every slot (an exclusive page, a dedicated or
//     persistent buffer), is one segment at its address; its blocks are its
//     slices in offset order, each its effective size (requested size plus
//     padding), with a slot's unused rest as a last inactive block.
//   - A page on granular storage (expandable, as PyTorch's expandable
//     segments) is one segment per run of mapped granules, whole granules
//     each, since the storage charges whole granules (G1): the run's part
//     past the page's end (the last granule of a page that is not a multiple
//     of it) is an inactive block, and slices are clipped to the run.
//     Granules whose unmap is held back for queued work still count (the
//     device still holds them) and are drawn mapped.
//   - A page whose deallocation is held back for queued work is a segment of
//     one inactive block: the bytes it still holds (a granular reservation's
//     still-mapped granules as one run at its address).
//
// Block states: active_allocated for a live buffer (a user holds a
// reference; its requested_size is the buffer's size, so the active blocks'
// requested sizes add up to Stats.BytesInUse); active_pending_free for a
// freed buffer whose slice something still binds (a stream's queued use, a
// graph's guard), as PyTorch shows a block freed with uses pending, their
// sizes adding up to Stats.BytesPendingFree (the pools count slices by the
// same rule, pool.Usage); and inactive for free room. A live block carries
// its allocation's stack when the history recorded one.
//
// device_traces is the history, in order, in memory_viz's actions: alloc
// (with frames); free_requested then free_completed at the same time for a
// free, or, for a held free (another stream's queued use, a mapping, a
// capture or a graph still bound the buffer), free_requested at the free
// and free_completed at its release, as PyTorch records a block freed with
// stream uses pending (a free on the buffer's own stream is reused in
// stream order at once, as PyTorch's is); segment_alloc/segment_free for storage
// allocations backed whole, segment_map/segment_unmap for granules (and
// the granules a freed reservation still mapped, where the history saw them
// mapped), and oom for a failed Alloc (addr: the capacity's free bytes, 0
// without a capacity). A storage release held back for a stream's queued
// work is a segment_free or segment_unmap when it really went (PyTorch has
// no action for the hold itself, so a snapshot's reader cannot replay it:
// WriteTrace's holds can). A relocation moves live buffers to new addresses,
// which PyTorch never does: each move is a free at the old address and an
// alloc at the new one, with the buffer's frames, so the viewer's timeline
// stays consistent with the segments; a relocation that did not commit
// moves them back. A free whose buffer's address the history never saw
// (allocated before the history's window) is left out: the viewer could
// not place it. Windows, capture phases, cleanups, growths and Defragment
// calls have no PyTorch action and are not written (History and WriteTrace
// have them; a Defragment's moves are written as above).
//
// Addresses are the history's numbering (history.go); without a recording
// the snapshot numbers the storage allocations it draws in ID order.

package gpumem

import (
	"cmp"
	"io"
	"slices"

	histformat "github.com/gpumem/gpumem/history"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// snapSlice is a slice copied under the lock.
type snapSlice struct {
	off, size, eff uint64
	id             BufferID
	state          string
}

// snapPage is a storage allocation copied under the lock.
type snapPage struct {
	stream  int
	id      storage.ID
	size    uint64
	granule uint64 // 0: backed whole
	mapped  []bool
	slices  []snapSlice
	rest    uint64
	held    uint64 // > 0: a held deallocation still holding these bytes
}

// Block states, as PyTorch names them.
const (
	stateActive  = "active_allocated"
	statePending = "active_pending_free"
	stateFree    = "inactive"
)

// snapshotPagesLocked copies every stream's pages and held deallocations.
func (d *Device) snapshotPagesLocked() []snapPage {
	var out []snapPage
	for _, s := range d.streams {
		s.mem.Layout(func(l pool.PageLayout) {
			p := snapPage{stream: s.index, id: l.Region.ID, size: l.Region.Size, granule: l.Granule, mapped: l.Mapped, rest: l.Rest}
			for k := range p.mapped {
				if !p.mapped[k] && s.st.unmapHeld(l.Region.ID, uint64(k)) {
					p.mapped[k] = true
				}
			}
			for _, sl := range l.Slices {
				st := stateFree
				switch {
				case sl.Desc.Handles() >= 2:
					st = stateActive
				case sl.Desc.Refs() > 1:
					st = statePending
				}
				p.slices = append(p.slices, snapSlice{off: sl.Offset, size: sl.Size, eff: sl.Size + sl.Padding, id: BufferID(sl.Desc.ID()), state: st})
			}
			out = append(out, p)
		})
		for _, h := range s.st.held {
			if h.n != 0 {
				continue
			}
			size := s.st.sizes[h.id]
			if n, reserved := s.st.mapped[h.id]; reserved {
				size = n * s.st.Granule()
			}
			if size > 0 {
				out = append(out, snapPage{stream: s.index, id: h.id, size: size, held: size, granule: s.st.Granule()})
			}
		}
	}
	return out
}

// WriteSnapshot writes the device's memory now, and its history when one
// was recorded, as PyTorch's memory snapshot (a protocol-2 pickle, plain
// data only) to w: open it at pytorch.org/memory_viz, or read it back
// with the tool's trace.ReadSnapshot. The file comment says what each part holds.
// Without a recording the device_traces list is empty. The state is copied
// under the device lock and written after it is released; w's error is
// returned.
func (d *Device) WriteSnapshot(w io.Writer) error {
	return histformat.WriteTorchSnapshot(w, d.torchSnapshot())
}

// torchSnapshot copies the pages and the history under the device lock and
// builds the snapshot after releasing it.
func (d *Device) torchSnapshot() *histformat.TorchSnapshot {
	borrowed := d.lockOrBorrow()
	pages := d.snapshotPagesLocked()
	var v *histView
	if h := d.historyLocked(); h != nil {
		v = viewLocked(h, h == d.hist)
	} else {
		// No recording: number the pages drawn, in ID order.
		v = &histView{bases: map[storage.ID]uint64{}}
		numbering := newHistory(HistoryOptions{MaxEntries: 1}, d.histSince)
		sorted := slices.Clone(pages)
		slices.SortFunc(sorted, func(a, b snapPage) int { return cmp.Compare(a.id, b.id) })
		for _, p := range sorted {
			v.bases[p.id] = numbering.base(p.id, p.size, p.granule)
		}
	}
	d.unlock(borrowed)
	snap := v.torchSnapshot(pages)
	// The writer is named, so a reader (gpumem replay) does not take this
	// device's reserve for PyTorch's.
	snap.WrittenBy = "gpumem (" + d.backend.Name() + " backend)"
	return snap
}

// torchSnapshot builds the snapshot from copied pages and history.
func (v *histView) torchSnapshot(pages []snapPage) *histformat.TorchSnapshot {
	addr := v.addresses()
	frames := map[BufferID][]histformat.TorchFrame{}
	if v.stacks != nil {
		for i, e := range v.entries {
			if e.kind == HistoryAlloc && len(v.stacks[i]) > 0 {
				frames[BufferID(e.id)] = torchFrames(v.stacks[i])
			}
		}
	}
	snap := &histformat.TorchSnapshot{Traces: [][]histformat.TorchTraceEntry{v.torchTrace(addr, frames)}}
	for _, p := range pages {
		base := addr(p.id, 0)
		switch {
		case p.held > 0:
			snap.Segments = append(snap.Segments, segment(p, base, p.held, []histformat.TorchBlock{{Address: base, Size: p.held, State: stateFree}}))
		case p.granule == 0:
			var blocks []histformat.TorchBlock
			for _, sl := range p.slices {
				blocks = append(blocks, block(base, sl.off, sl.eff, sl, frames))
			}
			if p.rest > 0 {
				blocks = append(blocks, histformat.TorchBlock{Address: base + p.size - p.rest, Size: p.rest, State: stateFree})
			}
			snap.Segments = append(snap.Segments, segment(p, base, p.size, blocks))
		default:
			for k := 0; k < len(p.mapped); {
				if !p.mapped[k] {
					k++
					continue
				}
				j := k
				for j < len(p.mapped) && p.mapped[j] {
					j++
				}
				lo, hi := uint64(k)*p.granule, uint64(j)*p.granule
				var blocks []histformat.TorchBlock
				for _, sl := range p.slices {
					s, e := max(sl.off, lo), min(sl.off+sl.eff, hi)
					if s < e {
						blocks = append(blocks, block(base, s, e-s, sl, frames))
					}
				}
				if end := min(hi, max(p.size, lo)); end < hi {
					blocks = append(blocks, histformat.TorchBlock{Address: base + end, Size: hi - end, State: stateFree})
				}
				seg := segment(p, base+lo, hi-lo, blocks)
				seg.Expandable = true
				snap.Segments = append(snap.Segments, seg)
				k = j
			}
		}
	}
	return snap
}

// segment is a TorchSegment of p at addr, size bytes.
func segment(p snapPage, addr, size uint64, blocks []histformat.TorchBlock) histformat.TorchSegment {
	typ := "large"
	if size <= 2<<20 {
		typ = "small" // PyTorch's small pool: segments of up to 2 MiB
	}
	return histformat.TorchSegment{Address: addr, TotalSize: size, Stream: uint64(p.stream), SegmentType: typ, Blocks: blocks}
}

// block is the part [off, off+size) of slice sl of the page at base.
func block(base, off, size uint64, sl snapSlice, frames map[BufferID][]histformat.TorchFrame) histformat.TorchBlock {
	b := histformat.TorchBlock{Address: base + off, Size: size, State: sl.state}
	if sl.state != stateFree {
		b.RequestedSize = min(sl.size, size)
		b.Frames = frames[sl.id]
	}
	return b
}

// torchFrames symbolises a recorded stack.
func torchFrames(pcs []uintptr) []histformat.TorchFrame {
	var out []histformat.TorchFrame
	for _, f := range symbolise(pcs) {
		out = append(out, histformat.TorchFrame{Name: f.Function, Filename: f.File, Line: f.Line})
	}
	return out
}

// torchTrace converts the history's entries to memory_viz's actions.
func (v *histView) torchTrace(addr func(storage.ID, uint64) uint64, frames map[BufferID][]histformat.TorchFrame) []histformat.TorchTraceEntry {
	var out []histformat.TorchTraceEntry
	at := map[BufferID]uint64{}            // live buffers' addresses
	byAddr := map[uint64]BufferID{}        // and back
	pending := map[BufferID]uint64{}       // held frees' addresses, until their release
	mapped := map[storage.ID][]bool{}      // granules the history saw mapped
	var moves []histformat.TorchTraceEntry // the running relocation's moves (as allocs at the new address)
	var moveFrom []uint64                  // their old addresses
	emitMove := func(from, to, size uint64, stream uint64, t int64) {
		id, ok := byAddr[from]
		out = append(out,
			histformat.TorchTraceEntry{Action: "free_requested", Addr: from, Size: size, Stream: stream, TimeUS: t},
			histformat.TorchTraceEntry{Action: "free_completed", Addr: from, Size: size, Stream: stream, TimeUS: t},
			histformat.TorchTraceEntry{Action: "alloc", Addr: to, Size: size, Stream: stream, TimeUS: t, Frames: frames[id]})
		if ok {
			delete(byAddr, from)
			at[id], byAddr[to] = to, id
		}
	}
	for _, e := range v.entries {
		t, st := e.t/1000, uint64(e.stream)
		switch e.kind {
		case HistoryAlloc:
			a := addr(storage.ID(e.a), e.b)
			at[BufferID(e.id)], byAddr[a] = a, BufferID(e.id)
			out = append(out, histformat.TorchTraceEntry{Action: "alloc", Addr: a, Size: e.size, Stream: st, TimeUS: t, Frames: frames[BufferID(e.id)]})
		case HistoryFree:
			a, ok := at[BufferID(e.id)]
			if !ok {
				continue // allocated before the window: no address to free
			}
			delete(at, BufferID(e.id))
			delete(byAddr, a)
			out = append(out, histformat.TorchTraceEntry{Action: "free_requested", Addr: a, Size: e.size, Stream: st, TimeUS: t})
			if e.aux == 1 { // held: completed at its release
				pending[BufferID(e.id)] = a
				continue
			}
			out = append(out, histformat.TorchTraceEntry{Action: "free_completed", Addr: a, Size: e.size, Stream: st, TimeUS: t})
		case HistoryRelease:
			if a, ok := pending[BufferID(e.id)]; ok {
				delete(pending, BufferID(e.id))
				out = append(out, histformat.TorchTraceEntry{Action: "free_completed", Addr: a, Size: e.size, Stream: st, TimeUS: t})
			}
		case HistoryAllocFailed:
			var free uint64
			if e.c > e.a {
				free = e.c - e.a
			}
			out = append(out, histformat.TorchTraceEntry{Action: "oom", Addr: free, Size: e.size, Stream: st, TimeUS: t})
		case HistoryMove:
			from, to := addr(storage.ID(e.a), e.b), addr(storage.ID(e.c), e.id)
			emitMove(from, to, e.size, st, t)
			moves = append(moves, histformat.TorchTraceEntry{Addr: to, Size: e.size, Stream: st})
			moveFrom = append(moveFrom, from)
		case HistoryRelocation:
			if outcomeMoved(e.aux2) {
				moves, moveFrom = moves[:0], moveFrom[:0]
				continue
			}
			for i, m := range moves { // not committed: the buffers stayed
				emitMove(m.Addr, moveFrom[i], m.Size, m.Stream, t)
			}
			moves, moveFrom = moves[:0], moveFrom[:0]
		case HistoryPageAlloc:
			if e.aux == 1 {
				mapped[storage.ID(e.id)] = make([]bool, (e.size+e.b-1)/max(e.b, 1))
				continue
			}
			out = append(out, histformat.TorchTraceEntry{Action: "segment_alloc", Addr: e.a, Size: e.size, Stream: st, TimeUS: t})
		case HistoryPageFree:
			if e.aux != 1 {
				out = append(out, histformat.TorchTraceEntry{Action: "segment_free", Addr: e.a, Size: e.size, Stream: st, TimeUS: t})
				continue
			}
			m := mapped[storage.ID(e.id)]
			for k := 0; k < len(m); k++ {
				if m[k] {
					j := k
					for j < len(m) && m[j] {
						j++
					}
					out = append(out, histformat.TorchTraceEntry{Action: "segment_unmap", Addr: e.a + uint64(k)*e.b, Size: uint64(j-k) * e.b, Stream: st, TimeUS: t})
					k = j
				}
			}
			delete(mapped, storage.ID(e.id))
		case HistoryMap, HistoryUnmap:
			granule := e.size / max(e.c, 1)
			action := "segment_map"
			if e.kind == HistoryUnmap {
				action = "segment_unmap"
			}
			out = append(out, histformat.TorchTraceEntry{Action: action, Addr: e.a + e.b*granule, Size: e.size, Stream: st, TimeUS: t})
			if m := mapped[storage.ID(e.id)]; m != nil {
				for k := e.b; k < e.b+e.c && k < uint64(len(m)); k++ {
					m[k] = e.kind == HistoryMap
				}
			}
		}
	}
	return out
}

// outcomeMoved reports whether a relocation entry's outcome committed its
// moves.
func outcomeMoved(kind uint8) bool { return relocation.OutcomeKind(kind) == relocation.Moved }
