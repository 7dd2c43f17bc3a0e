package compare

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/units"
)

// Verdict says whether a policy fits the capacity asked about
// (Options.Capacity less Options.Overhead, the allocator's share).
type Verdict struct {
	Fits     bool   `json:"fits"`
	Capacity uint64 `json:"allocator_capacity_bytes"`
	// PeakReserved is the peak at that capacity; Headroom what was left
	// of the capacity then (fits only).
	PeakReserved uint64 `json:"peak_reserved_bytes"`
	Headroom     uint64 `json:"headroom_bytes"`
	// OutOfMemory is the first failed allocation, explained (does not fit
	// only).
	OutOfMemory *OutOfMemory `json:"out_of_memory,omitempty"`
	// Margin is the capacity less the policy's smallest device
	// (PolicyResult.MinDevice): the room the workload could still grow
	// into, where Headroom is only what was left at this run's peak — a
	// policy that keeps releasing its cache shows headroom it cannot grow
	// into. Negative when the capacity is below the smallest device;
	// absent when the smallest capacity was not searched.
	Margin *int64 `json:"margin_bytes,omitempty"`
	// SlowPath is what fitting this capacity cost (up to the failed
	// allocation when it does not fit).
	SlowPath *SlowPath `json:"slow_path,omitempty"`
	// Allocation is the failed allocation in the trace's own terms (does
	// not fit only).
	Allocation *FailingAllocation `json:"failing_allocation,omitempty"`
}

// FailingAllocation names the allocation a policy ran out of memory at as
// a user finds it: for a snapshot, its device_traces entry (the replay's
// event numbers differ from the entries: entries that emit nothing,
// implied frees, the prelude) and PyTorch's stream handle.
type FailingAllocation struct {
	Event int    `json:"event"`
	Size  uint64 `json:"size_bytes"`
	// Stream is the trace's dense stream number; PyTorchStream the raw
	// stream handle the snapshot recorded (snapshots only).
	Stream        int     `json:"stream"`
	PyTorchStream *uint64 `json:"pytorch_stream,omitempty"`
	// Entry is the index in device_traces (snapshots only; absent for an
	// allocation of the prelude, which rebuilds blocks live before the
	// trace began).
	Entry *int `json:"device_traces_entry,omitempty"`
	// Prelude says the allocation is one the snapshot's prelude rebuilt
	// (a block live before its trace began), with no entry of its own.
	Prelude bool `json:"prelude,omitempty"`
	// Frames are the top of the stack the snapshot recorded for the
	// entry, at most Options.Frames of them, the user's Python frames
	// first (trace.UserFrames), innermost first; StackDepth is how many
	// frames the whole stack has. Both absent without frames (a native
	// trace, a snapshot recorded without stacks, Options.Frames 0).
	Frames     []Frame `json:"frames,omitempty"`
	StackDepth int     `json:"stack_depth,omitempty"`
}

// Frame is one stack frame: a Python frame's file and line, or a C++
// frame's source file (often "??") with line 0, and the function's name.
type Frame struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Name string `json:"name"`
}

// String is "file:line  name", the file alone when there is no line, the
// name alone when the file is unknown. Two spaces part the place from the
// name, so the report never wraps a frame's line between them.
func (f Frame) String() string {
	name := f.Name
	if f.Line == 0 {
		name = cppWithoutArgs(name)
	}
	if r := []rune(name); len(r) > maxFrameName {
		name = string(r[:maxFrameName]) + "…"
	}
	switch {
	case f.Line > 0:
		return fmt.Sprintf("%s:%d  %s", f.File, f.Line, name)
	case f.File != "" && f.File != "??":
		return f.File + "  " + name
	}
	return name
}

// framesNote says which frames of the stack Frames are.
func (a *FailingAllocation) framesNote() string {
	which := "its Python frames, PyTorch's own wrappers left out"
	if !strings.HasSuffix(a.Frames[0].File, ".py") {
		which = "no Python frame recorded: its C++ frames, the allocator's and the dispatcher's left out"
	}
	return fmt.Sprintf("%d of the stack's %d frames: %s", len(a.Frames), a.StackDepth, which)
}

// cppWithoutArgs shortens a C++ function's name for the reports: its
// argument list, which repeats the types the name already implies, becomes
// "(…)" ("f(at::Tensor const&, long)" → "f(…)"); template arguments and
// a return type stay. A name without a top-level argument list is kept.
func cppWithoutArgs(name string) string {
	depth := 0
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '<':
			depth++
		case '>':
			depth = max(depth-1, 0)
		case '(':
			if depth > 0 {
				continue
			}
			if strings.HasSuffix(name[:i], "operator") && strings.HasPrefix(name[i:], "()") {
				i++ // operator()'s own parentheses
				continue
			}
			if strings.HasPrefix(name[i:], "(anonymous namespace)") {
				i += len("(anonymous namespace)") - 1
				continue
			}
			if end := strings.LastIndexByte(name, ')'); end > i+1 {
				return name[:i] + "(…)" + name[end+1:]
			}
			return name
		}
	}
	return name
}

// maxFrameName bounds a frame's name in the reports (C++ template
// instantiations run to a thousand characters; the JSON keeps them whole).
const maxFrameName = 160

// addFrames gives every failing allocation with a snapshot entry, and every
// one of the largest live allocations at a failure, the top n frames of its
// stack, read once for all of c's policies through
// src.Frames. Frames are an aid, not the verdict: an error reading them is
// kept in c.FramesError and the report goes on without them.
func (c *Comparison) addFrames(src Source, n int) {
	if n <= 0 || src.Frames == nil {
		return
	}
	var entries []int
	var allocs []*FailingAllocation
	for _, p := range c.Policies {
		v := p.Verdict
		if v == nil {
			continue
		}
		named := []*FailingAllocation{v.Allocation}
		if v.OutOfMemory != nil {
			named = append(named, v.OutOfMemory.LargestLive...)
		}
		for _, a := range named {
			if a != nil && a.Entry != nil {
				allocs = append(allocs, a)
				entries = append(entries, *a.Entry)
			}
		}
	}
	if len(entries) == 0 {
		return
	}
	slices.Sort(entries)
	stacks, err := src.Frames(slices.Compact(entries))
	if err != nil {
		c.FramesError = err.Error()
		return
	}
	for _, a := range allocs {
		stack := stacks[*a.Entry]
		a.StackDepth = len(stack)
		a.Frames = nil
		for _, f := range trace.UserFrames(stack, n) {
			a.Frames = append(a.Frames, Frame{File: f.Filename, Line: f.Line, Name: f.Name})
		}
	}
}

// failingAllocation describes src's event i (an alloc).
func failingAllocation(src Source, i int) *FailingAllocation {
	if i < 0 || i >= len(src.Events) {
		return nil
	}
	e := src.Events[i]
	a := &FailingAllocation{Event: i, Size: e.Size, Stream: e.Stream}
	if e.Stream < len(src.StreamHandles) {
		h := src.StreamHandles[e.Stream]
		a.PyTorchStream = &h
	}
	if i < len(src.EventEntries) {
		if n := int(src.EventEntries[i]); n >= 0 {
			a.Entry = &n
		} else {
			a.Prelude = true
		}
	}
	return a
}

// shortPlace names the allocation where the user finds it, in a few
// words: "device_traces entry 12643" for a snapshot's (the event number
// only in the longer forms, beside it), "event 40" for a native trace's,
// "event 3, a block live before the trace" for the prelude's.
func (a *FailingAllocation) shortPlace() string {
	switch {
	case a.Entry != nil:
		return fmt.Sprintf("device_traces entry %d", *a.Entry)
	case a.Prelude:
		return fmt.Sprintf("event %d, a block live before the trace", a.Event)
	}
	return fmt.Sprintf("event %d", a.Event)
}

// oomPlace is shortPlace of the verdict's failing allocation, or its event
// when it has none.
func (v *Verdict) oomPlace() string {
	if v.Allocation != nil {
		return v.Allocation.shortPlace()
	}
	return fmt.Sprintf("event %d", v.OutOfMemory.Event)
}

// String names the allocation: "device_traces entry 12643: 16.00 MiB on
// stream 0 (PyTorch stream 0x…)", or by event for a native trace.
func (a *FailingAllocation) String() string {
	var b strings.Builder
	switch {
	case a.Entry != nil:
		fmt.Fprintf(&b, "device_traces entry %d (event %d)", *a.Entry, a.Event)
	case a.Prelude:
		fmt.Fprintf(&b, "event %d, a block live before the trace's first entry (the snapshot's segments)", a.Event)
	default:
		fmt.Fprintf(&b, "event %d", a.Event)
	}
	fmt.Fprintf(&b, ": an allocation of %s on stream %d", units.Bytes(a.Size), a.Stream)
	if a.PyTorchStream != nil {
		fmt.Fprintf(&b, " (PyTorch stream %#x)", *a.PyTorchStream)
	}
	return b.String()
}

// setMargin sets Margin for a device of capacity bytes and the policy's
// smallest device.
func (v *Verdict) setMargin(capacity, minDevice uint64) {
	m := int64(capacity) - int64(minDevice)
	v.Margin = &m
}

// verdictAt replays events at capacity, stopping at the first failed
// allocation, and says whether the policy fits.
func verdictAt(ctx context.Context, name string, events []trace.Event, capacity, maxPage uint64, how deviceOptions, progress func(done, total int)) (*Verdict, error) {
	rep, err := replayOnce(ctx, name, events, capacity, maxPage, how, failFastReplay, 0, progress)
	if err != nil {
		return nil, err
	}
	v := &Verdict{Capacity: capacity, PeakReserved: rep.PeakDevice, SlowPath: slowPathOf(name, rep)}
	if rep.FailedAllocs == 0 {
		v.Fits = true
		v.Headroom = capacity - min(capacity, rep.PeakDevice)
		return v, nil
	}
	v.OutOfMemory = &OutOfMemory{FailureState: replay.FailureState{Event: rep.FirstFailure}}
	if f := rep.FirstFailureState; f != nil {
		v.OutOfMemory.FailureState = *f
	}
	for kind := range rep.FailedAllocsByKind {
		if kind != "out_of_memory" { // fail-fast: the one failure's kind
			v.OutOfMemory.Refusal = kind + ": " + rep.FirstFailureError
		}
	}
	return v, nil
}
