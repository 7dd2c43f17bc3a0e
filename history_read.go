// Reading the history: the ring copied under the device lock (a
// histView), then turned into entries, a trace or a snapshot outside it.

package gpumem

import (
	"errors"
	"runtime"
	"time"

	"github.com/gpumem/gpumem/storage"
)

// ErrNoHistory is returned by History, WriteTrace and WriteSnapshot's
// device_traces when the device never recorded: open it WithHistory or call
// Device.StartHistory first. (WriteSnapshot still writes the segments.)
var ErrNoHistory = errors.New("gpumem: no history recorded (open the device WithHistory or call Device.StartHistory)")

// History is a copy of the device's recording.
type History struct {
	Options   HistoryOptions
	Recording bool   // false: stopped by StopHistory
	Recorded  uint64 // entries recorded since the recording started
	// Dropped counts the oldest entries the ring no longer holds: Recorded
	// − len(Entries).
	Dropped uint64
	Entries []HistoryEntry
}

// HistoryEntry is one thing the device's memory did. Which fields are set
// depends on Kind:
//
//	HistoryAlloc        Stream, Buffer, Size (requested), Address, Stack (with Stacks)
//	HistoryAllocFailed  Stream, Buffer (never handed out), Size (requested),
//	                    OutOfMemory, DeviceBytes, InUseBytes, Capacity
//	HistoryFree         Stream, Buffer, Size, Held (its memory stays bound until its HistoryRelease)
//	HistoryRelease      Stream, Buffer, Size: a held free's memory left its last binding
//	HistoryWindow       Stream, Mode (Auto: the innermost window closed)
//	HistoryCapture      Stream, Phase (prepare, begin, end, abort, launch, close), Graph
//	HistoryCleanup      Stream, Explicit (false: the reclaim a failed reservation ran)
//	HistoryGrowth       Stream, Size (the new page size), Request (the allocation that grew it)
//	HistoryRelocation   Stream, Reason, Outcome, Moves, Size (bytes moved)
//	HistoryMove         Stream, Size, Address (old), To (new)
//	HistoryPageAlloc    Stream, Address, Size, Granular (a reservation: its granules map later)
//	HistoryPageFree     Stream, Address, Size, Granular, Held (it had been held: a HistoryHeld came first)
//	HistoryMap, Unmap   Stream, Address (of the first granule), Size (their bytes), Granules, Held (an unmap that had been held)
//	HistoryHeld         Stream, Address (of the page, or of the first granule), Size, Granular (an unmap, else a deallocation)
//	HistoryPassed       Stream: held releases of the stream went back (or were withdrawn)
//	HistoryDefragment   Size (DefragOptions.MaxBytes), Moves (DefragOptions.MaxMoves): a Defragment returned (its moves come before)
//
// Time is since the recording started, from the monotonic clock; it never
// decreases along a history. Addresses are the history's own numbering of
// device memory (history.go), not the driver's.
type HistoryEntry struct {
	Kind        HistoryKind
	Time        time.Duration
	Stream      int
	Buffer      BufferID
	Size        uint64
	Address     uint64
	To          uint64
	Request     uint64
	Mode        Mode
	Phase       string
	Graph       int
	Explicit    bool
	Reason      RelocationReason
	Outcome     RelocationOutcome
	Moves       int
	Granular    bool
	Granules    uint64
	OutOfMemory bool
	Held        bool
	DeviceBytes uint64 // bytes held from storage when the Alloc failed
	InUseBytes  uint64 // Stats.BytesInUse then: requested bytes of buffers not yet freed
	Capacity    uint64 // the device's capacity (0: none set)
	Stack       []runtime.Frame
}

// histView is a recording copied under the device lock, for formatting
// outside it.
type histView struct {
	opts      HistoryOptions
	recording bool
	recorded  uint64
	dropped   uint64
	entries   []histEntry
	stacks    [][]uintptr
	bases     map[storage.ID]uint64 // live storage allocations' addresses
}

// historyLocked returns the running or last recording, or nil.
func (d *Device) historyLocked() *history {
	if d.hist != nil {
		return d.hist
	}
	return d.stopped
}

// viewLocked copies h.
func viewLocked(h *history, recording bool) *histView {
	v := &histView{opts: h.opts, recording: recording, recorded: h.next, dropped: h.dropped(), bases: make(map[storage.ID]uint64, len(h.bases))}
	v.entries, v.stacks = h.entries()
	for id, a := range h.bases {
		v.bases[id] = a
	}
	return v
}

// addresses returns a function giving the address of (storage ID, offset):
// bases from the entries' page records first (a page freed since), then
// the live ones.
func (v *histView) addresses() func(storage.ID, uint64) uint64 {
	bases := make(map[storage.ID]uint64)
	for _, e := range v.entries {
		switch e.kind {
		case HistoryPageAlloc, HistoryPageFree, HistoryMap, HistoryUnmap:
			bases[storage.ID(e.id)] = e.a
		}
	}
	return func(id storage.ID, off uint64) uint64 {
		if a, ok := bases[id]; ok {
			return a + off
		}
		if a, ok := v.bases[id]; ok {
			return a + off
		}
		return 0 // unknown: a buffer the history saw land nowhere
	}
}

// History returns a copy of the device's recording (the running one, or
// the last one StopHistory ended), or ErrNoHistory. The ring is copied
// under the device lock; stacks are symbolised after it is released.
func (d *Device) History() (History, error) {
	borrowed := d.lockOrBorrow()
	h := d.historyLocked()
	if h == nil {
		d.unlock(borrowed)
		return History{}, ErrNoHistory
	}
	v := viewLocked(h, h == d.hist)
	d.unlock(borrowed)
	return v.public(), nil
}

// public converts the view's entries.
func (v *histView) public() History {
	addr := v.addresses()
	out := History{Options: v.opts, Recording: v.recording, Recorded: v.recorded, Dropped: v.dropped, Entries: make([]HistoryEntry, len(v.entries))}
	for i, e := range v.entries {
		p := HistoryEntry{Kind: e.kind, Time: time.Duration(e.t), Stream: int(e.stream)}
		switch e.kind {
		case HistoryAlloc:
			p.Buffer, p.Size, p.Address = BufferID(e.id), e.size, addr(storage.ID(e.a), e.b)
			if v.stacks != nil {
				p.Stack = symbolise(v.stacks[i])
			}
		case HistoryAllocFailed:
			p.Buffer, p.Size, p.OutOfMemory = BufferID(e.id), e.size, e.aux2 == 1
			p.DeviceBytes, p.InUseBytes, p.Capacity = e.a, e.b, e.c
		case HistoryFree:
			p.Buffer, p.Size, p.Held = BufferID(e.id), e.size, e.aux == 1
		case HistoryRelease:
			p.Buffer, p.Size = BufferID(e.id), e.size
		case HistoryHeld:
			p.Address, p.Size, p.Granular = e.a, e.size, e.aux == 1
		case HistoryWindow:
			p.Mode = Mode(e.aux)
		case HistoryCapture:
			p.Phase, p.Graph = capturePhase(e.aux).String(), int(e.id)
		case HistoryCleanup:
			p.Explicit = e.aux == 1
		case HistoryGrowth:
			p.Size, p.Request = e.size, e.a
		case HistoryRelocation:
			p.Reason, p.Outcome, p.Moves, p.Size = RelocationReason(e.aux), RelocationOutcome(e.aux2), int(e.a), e.size
		case HistoryMove:
			p.Size, p.Address, p.To = e.size, addr(storage.ID(e.a), e.b), addr(storage.ID(e.c), e.id)
		case HistoryPageAlloc:
			p.Address, p.Size, p.Granular = e.a, e.size, e.aux == 1
		case HistoryPageFree:
			p.Address, p.Size, p.Granular, p.Held = e.a, e.size, e.aux == 1, e.aux2 == 1
		case HistoryMap, HistoryUnmap:
			granule := e.size / max(e.c, 1)
			p.Address, p.Size, p.Granules, p.Held = e.a+e.b*granule, e.size, e.c, e.aux2 == 1
		case HistoryDefragment:
			p.Size, p.Moves = e.size, int(e.a)
		}
		out.Entries[i] = p
	}
	return out
}

// symbolise turns recorded program counters into frames.
func symbolise(pcs []uintptr) []runtime.Frame {
	if len(pcs) == 0 {
		return nil
	}
	frames := runtime.CallersFrames(pcs)
	var out []runtime.Frame
	for {
		f, more := frames.Next()
		out = append(out, f)
		if !more {
			return out
		}
	}
}
