// The history as gpumem's native JSONL trace (design §13.1), which
// `gpumem replay` and replay.Run read: the runtime's own workload, to
// replay under any policy and capacity.
//
// What becomes an event:
//
//   - HistoryAlloc → alloc (ID = the buffer ID, its requested size, its
//     stream); HistoryFree → free, with "held" when something still bound
//     the buffer's memory (another stream's queued use, a mapping, a
//     capture, a graph); HistoryRelease → release of that ID, when the
//     last binding went (left out when the trace has not its held free).
//   - HistoryHeld → hold on its stream when the held release waits for
//     work the stream's open holds do not cover (a new fence: the first
//     since the stream's held releases last all went, or one queued
//     later); HistoryPassed → a pass for each of the stream's open holds
//     whose releases all went back (or were withdrawn). A storage release
//     the device made at once while holds were open means the stream's
//     work had passed them all: they pass first. A replay then holds its
//     own storage releases where the device held its (Stream.HoldReleases)
//     and reproduces the device's bytes under the same policy; another
//     policy's releases are held where this device's were, which is where
//     the stream had work queued.
//   - HistoryAllocFailed → alloc_failed of the buffer ID the failed call
//     took (version 2): never live, so a replay's live bytes never count
//     it; the replay tries it (the program asked for it), and one that
//     fails the same way, at the device's capacity, counts the failure.
//     An alloc followed by a free, as version 1 wrote it, was served by a
//     replay with room to spare and counted in its peak live bytes.
//   - HistoryDefragment → defragment with its bounds (version 2), which a
//     replay performs at the same point; its moves and page frees happen
//     again by themselves.
//   - HistoryWindow → window (persistent, dedicated; auto closes).
//   - HistoryCapture → capture with the token's number as the graph; an
//     abort becomes end, which on a window that never began does what
//     AbortCapture does (it closes it).
//   - HistoryCleanup → cleanup, explicit ones only (a Device.Cleanup is one
//     per stream, in creation order): the reclaims a failed reservation
//     runs happen again by themselves, as growths, relocations and page
//     calls do.
//
// Times are the entries' times in microseconds.
//
// The header carries the device (history.Device): its backend, capacity,
// largest page, alignment, granule and memory config, relocation and
// compaction. A replay opened with them (replay.DeviceOptions; the CLI's
// replay takes them unless a flag says otherwise) runs the trace on the
// device that recorded it: a 2 GiB device's largest page is 512 MiB, and
// replayed with another page size the trace peaks elsewhere.
//
// The prelude. The ring is bounded and a recording may begin after
// buffers were allocated, so the trace would free buffers it never
// allocated and miss ones live throughout. WriteTrace does not refuse such
// a history: it writes a prelude, at the first entry's time, allocating
// every buffer live when the retained history begins — those live now
// that the history never saw allocated, and those it saw freed but not
// allocated — in buffer ID order, which is the order they were allocated
// in. Sizes and streams are exact; placement is not: the prelude
// allocates them back to back, where the device interleaved them with
// allocations and frees the history no longer holds, and windows or
// captures open when the history begins are not known. A replay of a
// trace with a prelude therefore reproduces live bytes exactly and device
// bytes only approximately; a recording kept whole from Open
// (WithHistory, Dropped = 0) needs no prelude and replays exactly.

package gpumem

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"

	histformat "github.com/gpumem/gpumem/history"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
)

// liveBuffer is a buffer live when a history was copied.
type liveBuffer struct {
	id     BufferID
	size   uint64
	stream int
}

// liveBuffersLocked lists every live buffer of every stream: slices whose
// allocation still has a user's handle (the slice holds the other one).
func (d *Device) liveBuffersLocked() []liveBuffer {
	var out []liveBuffer
	for _, s := range d.streams {
		s.mem.Layout(func(l pool.PageLayout) {
			for _, sl := range l.Slices {
				if sl.Desc.Handles() >= 2 {
					out = append(out, liveBuffer{id: BufferID(sl.Desc.ID()), size: sl.Size, stream: s.index})
				}
			}
		})
	}
	return out
}

// WriteTrace writes the device's history (the running recording, or the
// last one StopHistory ended) to w as a native JSONL trace with a header,
// a prelude when the history does not begin at an empty device (see the
// file comment), then one event per recorded call. It returns
// ErrNoHistory without a recording, or w's error. The history is copied
// under the device lock and written after it is released.
func (d *Device) WriteTrace(w io.Writer) error {
	borrowed := d.lockOrBorrow()
	h := d.historyLocked()
	if h == nil {
		d.unlock(borrowed)
		return ErrNoHistory
	}
	v := viewLocked(h, h == d.hist)
	live := d.liveBuffersLocked()
	dev := d.traceDeviceLocked()
	d.unlock(borrowed)
	events, prelude := v.traceEvents(live)
	streams := 1
	for _, e := range events {
		streams = max(streams, e.Stream+1)
	}
	bw := bufio.NewWriter(w)
	enc := histformat.NewEncoder(bw)
	src := fmt.Sprintf("gpumem device history: %d entries, %d dropped, %d prelude allocations", len(v.entries), v.dropped, prelude)
	if err := enc.WriteHeader(histformat.Header{Source: src, Streams: streams, Device: dev}); err != nil {
		return err
	}
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// traceDeviceLocked describes how the device runs, for the trace header:
// what a replay needs to run the trace as the device did.
func (d *Device) traceDeviceLocked() *histformat.Device {
	dev := &histformat.Device{
		Backend: d.backend.Name(), Capacity: d.budget.Capacity(),
		MaxPage: d.props.MaxPageSize, Alignment: d.props.Alignment, MaxMemory: d.props.MaxMemory,
		Dynamic: d.cfg.Dynamic.String(), Persistent: d.cfg.Persistent.String(),
		NoRelocate: d.noRelocate, NoCompact: d.noCompact,
	}
	if d.cfg.BaseMode != nil {
		dev.BaseMode = d.cfg.BaseMode.String()
	}
	if d.cfg.PageGranular == memory.GranulesAuto && len(d.streams) > 0 {
		dev.Granule = d.streams[0].st.Granule()
	}
	return dev
}

// traceEvents converts the view to native events, prelude first, and
// returns how many prelude allocations it wrote.
func (v *histView) traceEvents(live []liveBuffer) ([]histformat.Event, int) {
	allocated := make(map[BufferID]bool)
	var prelude []liveBuffer
	for _, e := range v.entries {
		switch e.kind {
		case HistoryAlloc, HistoryAllocFailed:
			allocated[BufferID(e.id)] = true
		case HistoryFree:
			if !allocated[BufferID(e.id)] {
				prelude = append(prelude, liveBuffer{id: BufferID(e.id), size: e.size, stream: int(e.stream)})
			}
		}
	}
	for _, b := range live {
		if !allocated[b.id] {
			prelude = append(prelude, b)
		}
	}
	slices.SortFunc(prelude, func(a, b liveBuffer) int { return cmpID(a.id, b.id) })
	var t0 int64
	if len(v.entries) > 0 {
		t0 = v.entries[0].t / 1000
	}
	out := make([]histformat.Event, 0, len(prelude)+len(v.entries))
	for _, b := range prelude {
		out = append(out, histformat.Event{Op: histformat.OpAlloc, T: t0, ID: uint64(b.id), Size: b.size, Stream: b.stream})
	}
	heldFree := map[uint64]bool{} // held frees written, not released yet
	type fence struct{ seq, vseq uint64 }
	open := map[int][]fence{} // per stream, the holds written and not passed, oldest first
	pass := func(st, n int, t int64) {
		for range n {
			out = append(out, histformat.Event{Op: histformat.OpPass, T: t, Stream: st})
		}
		open[st] = open[st][n:]
	}
	for _, e := range v.entries {
		t, st := e.t/1000, int(e.stream)
		switch e.kind {
		case HistoryAlloc:
			out = append(out, histformat.Event{Op: histformat.OpAlloc, T: t, ID: e.id, Size: e.size, Stream: st})
		case HistoryAllocFailed:
			out = append(out, histformat.Event{Op: histformat.OpAllocFailed, T: t, ID: e.id, Size: e.size, Stream: st})
		case HistoryDefragment:
			out = append(out, histformat.Event{Op: histformat.OpDefragment, T: t, Size: e.size, MaxMoves: int32(min(e.a, math.MaxInt32))})
		case HistoryFree:
			out = append(out, histformat.Event{Op: histformat.OpFree, T: t, ID: e.id, Held: e.aux == 1})
			if e.aux == 1 {
				heldFree[e.id] = true
			}
		case HistoryRelease:
			if heldFree[e.id] {
				delete(heldFree, e.id)
				out = append(out, histformat.Event{Op: histformat.OpRelease, T: t, ID: e.id})
			}
		case HistoryHeld:
			f := fence{e.b, e.c}
			if fs := open[st]; len(fs) == 0 || fs[len(fs)-1] != f {
				open[st] = append(fs, f)
				out = append(out, histformat.Event{Op: histformat.OpHold, T: t, Stream: st})
			}
		case HistoryPassed:
			fs := open[st]
			n := len(fs)
			if e.aux == 1 { // the oldest still held waits for (b, c): the holds before it passed
				oldest := fence{e.b, e.c}
				n = 0
				for n < len(fs) && fs[n] != oldest && fs[n].seq <= oldest.seq && fs[n].vseq <= oldest.vseq {
					n++
				}
			}
			pass(st, n, t)
		case HistoryPageFree, HistoryUnmap:
			if e.aux2 == 0 && len(open[st]) > 0 {
				pass(st, len(open[st]), t) // made at once: the stream's work had passed its holds
			}
		case HistoryWindow:
			out = append(out, histformat.Event{Op: histformat.OpWindow, T: t, Stream: st, Mode: memory.Mode(e.aux).String()})
		case HistoryCapture:
			p := capturePhase(e.aux)
			if p == phaseAbort {
				p = phaseEnd
			}
			out = append(out, histformat.Event{Op: histformat.OpCapture, T: t, Stream: st, Phase: p.String(), Graph: int(e.id)})
		case HistoryCleanup:
			if e.aux == 1 {
				out = append(out, histformat.Event{Op: histformat.OpCleanup, T: t, Stream: st})
			}
		}
	}
	return out, len(prelude)
}

func cmpID(a, b BufferID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
