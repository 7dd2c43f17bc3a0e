// Stack frames of chosen trace entries (design §13.2).
//
// ReadSnapshot keeps no stack frames: a pickle's frames lists are elided as
// they are built (pickle.go), and reading stays as fast as CPython's
// unpickler because of it. What it keeps instead is, for every entry of
// the chosen trace, where its frames lie (framesRef): the ordinal of its
// elided list among the input's frames lists (every "frames" value, of
// segments and blocks too, in the order the pickle builds them) and how
// many frames it held. Snapshot.ReadFrames then reads
// the input a second time asking the unpickler to keep the lists of the
// wanted ordinals only (keptFrames) and to stop as soon as a later frames
// list begins: a
// failing allocation's frames cost one partial read, only when asked for,
// within the same limits as the first (a kept list counts against the
// held-bytes budget like any other). A JSON snapshot, whose frames
// encoding/json decodes anyway, is read whole and the entries looked up.
//
// UserFrames picks from a recorded stack the frames a user reads as where
// the allocation came from: PyTorch records the unwinder's own frames, the
// caching allocator's and the dispatcher's first, and the user's Python
// frames tens of frames down.

package trace

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// framesRef locates one trace entry's frames in the input, as the elided
// list's two counts: seq its ordinal among the input's frames lists (-1: a
// JSON snapshot's list, which is not numbered), n its frames (-1: the
// entry has no frames list). A snapshot so holds 8 bytes an entry and none
// of its frames: a value, not a pointer to the list, which cost a few per
// cent of reading in write barriers and marking.
type framesRef struct{ seq, n int32 }

// framesRefOf is where the frames of the trace entry d lie.
func framesRefOf(d *pyDict) framesRef {
	v, _ := d.get("frames")
	switch x := v.(type) {
	case *framesList:
		return framesRef{seq: x.seq, n: x.n}
	case *keptFrames: // a release's, kept by the first read
		return framesRef{seq: x.seq, n: int32(min(len(x.items), math.MaxInt32))}
	case *pyList:
		return framesRef{seq: -1, n: int32(min(len(x.items), math.MaxInt32))}
	}
	return framesRef{seq: -1, n: -1}
}

// frameKeep asks a pickle's read to keep the frames lists of the ordinals
// in want (pushFrames), filling lists, and to stop with errFramesKept once
// a frames list past last, the highest of them, begins. decodeSnapshot
// sets pickle when the input is a pickle (a JSON one is decoded whole).
type frameKeep struct {
	want   map[int]bool // nil: keep none (the first read)
	last   int
	lists  map[int]*keptFrames
	pickle bool
	// late is set by the read when an elided frames list was appended to
	// after a later one began (a hand-made pickle: Python's pickler builds
	// each list whole): stopping after the last wanted list would then
	// miss frames, so ReadFrames reads to the end.
	late bool
}

// errFramesKept stops a read whose wanted frames lists are all complete.
var errFramesKept = errors.New("every wanted frames list was read")

// ReadFrames reads the stack frames of the given entries of s's device
// trace (indices into device_traces[s.Device], as EventEntries gives them)
// from r, which must yield the bytes s was read from, with the same
// MaxBytes: ReadSnapshot keeps no frames, so this is a second read (see
// the file comment), a pickle's stopping right after the last wanted
// entry's frames. Each entry's frames come as PyTorch recorded them,
// innermost first ([UserFrames] picks the ones to show), an item that is
// not a frame dict kept in its place as an unreadable frame
// that says what it is; an entry without
// frames (none recorded, or an empty list), or out of range, is absent
// from the map. Input that no longer
// matches s (a frames list of another length) is an [ErrSnapshot]; the
// errors and limits are otherwise ReadSnapshot's.
func (s *Snapshot) ReadFrames(r io.Reader, entries []int) (map[int][]TorchFrame, error) {
	out := map[int][]TorchFrame{}
	keep := &frameKeep{want: map[int]bool{}, last: -1, lists: map[int]*keptFrames{}}
	var wanted []int
	for _, i := range entries {
		if i < 0 || i >= len(s.frames) || s.frames[i].n <= 0 {
			continue
		}
		wanted = append(wanted, i)
		if seq := int(s.frames[i].seq); seq >= 0 {
			keep.want[seq] = true
			keep.last = max(keep.last, seq)
		}
	}
	if len(wanted) == 0 {
		return out, nil
	}
	if s.framesLate {
		keep.last = math.MaxInt
	}
	limit := s.maxBytes
	if limit <= 0 {
		limit = DefaultMaxSnapshotBytes
	}
	root, err := readRoot(r, limit, keep)
	if err != nil {
		return nil, err
	}
	slices.Sort(wanted)
	for _, i := range slices.Compact(wanted) {
		ref := s.frames[i]
		var items []any
		if keep.pickle {
			if ref.seq < 0 {
				continue // not an elided list: nothing was recorded
			}
			l, ok := keep.lists[int(ref.seq)]
			if !ok {
				return nil, fmt.Errorf("%w: entry %d: its frames list (the %d-th) is not in the input: not the snapshot read before", ErrSnapshot, i, ref.seq+1)
			}
			items = l.items
		} else {
			l, err := jsonEntryFrames(root, s.Device, i)
			if err != nil {
				return nil, err
			}
			items = l
		}
		if len(items) != int(ref.n) {
			return nil, fmt.Errorf("%w: entry %d has %d stack frames, %d when the snapshot was read: not the same input", ErrSnapshot, i, len(items), ref.n)
		}
		out[i] = framesOf(items)
	}
	return out, nil
}

// jsonEntryFrames is the frames list of entry i of device's trace in a
// decoded (JSON) snapshot.
func jsonEntryFrames(root any, device, i int) ([]any, error) {
	bad := fmt.Errorf("%w: device_traces[%d][%d] has no frames list: not the snapshot read before", ErrSnapshot, device, i)
	top, ok := root.(*pyDict)
	if !ok {
		return nil, bad
	}
	tv, _ := top.get("device_traces")
	traces, _ := asList(tv)
	if device >= len(traces) {
		return nil, bad
	}
	trace, _ := asList(traces[device])
	if i >= len(trace) {
		return nil, bad
	}
	d, ok := trace[i].(*pyDict)
	if !ok {
		return nil, bad
	}
	fv, _ := d.get("frames")
	l, ok := asList(fv)
	if !ok {
		return nil, bad
	}
	return l, nil
}

// notAFrame opens the Name of a frame that stands for an item of a
// recorded stack that is not a frame dict: "(not a frame: bytes of 4)".
const notAFrame = "(not a frame: "

// unreadable reports whether f stands for an item of a recorded stack that
// is not a frame (framesOf keeps such an item in its place): its Name says
// what the item is, "(not a frame: bytes of 4)", and its Filename and Line
// are empty.
func unreadable(f TorchFrame) bool {
	return f.Filename == "" && f.Line == 0 && strings.HasPrefix(f.Name, notAFrame)
}

// framesOf converts one entry's decoded frames: dicts of name, filename
// and line, a missing or mistyped field left zero. An item that is not a
// dict is kept in its place as an Unreadable frame naming what it is: the
// stack keeps its recorded depth and the frames around it, as PyTorch's
// memory_viz shows what it can of a stack. A frame is a dict as PyTorch
// records it, but ReadSnapshot, which never decodes frames, accepted the
// snapshot, and frames are an aid to reading a failing allocation, no
// reason to refuse the snapshot at the second read.
func framesOf(items []any) []TorchFrame {
	out := make([]TorchFrame, len(items))
	for j, v := range items {
		d, ok := v.(*pyDict)
		if !ok {
			out[j].Name = notAFrame + describe(v) + ")"
			continue
		}
		nv, _ := d.get("name")
		out[j].Name, _ = nv.(string)
		fv, _ := d.get("filename")
		out[j].Filename, _ = fv.(string)
		if lv, ok := d.get("line"); ok {
			if n, ok := lv.(int64); ok && n >= 0 && n <= math.MaxInt32 {
				out[j].Line = int(n)
			}
		}
	}
	return out
}

// UserFrames returns at most n frames of stack (as PyTorch records it,
// innermost first) that say where an allocation came from, in stack order:
//
//  1. its Python frames (a filename ending in ".py"), less those of
//     PyTorch's own Python wrappers that only pass a call on
//     (pythonWrappers: nn.Module's _call_impl and _wrapped_call_impl, the
//     optimizer's step wrappers, torch.no_grad's decorator, …), or the
//     wrappers themselves when the Python frames are nothing else;
//  2. when it has none (an allocation on the autograd engine's thread, or
//     a stack recorded with C++ frames only), its C++ frames less the
//     machinery every allocation passes through (nativeMachinery: the
//     unwinder that recorded the stack, the caching allocator, the
//     dispatcher, tensor creation, the operator registry's wrappers, the
//     autograd engine's loop, the thread's start), and less C functions
//     of unknown source (no "::" in the name, file "??" or ""), which are
//     the interpreter's and the C library's;
//  3. when that leaves nothing either, the stack's first n frames
//     (Unreadable ones, which the first two rules pass over, included).
//
// The rule comes from the shared snapshots' stacks (design §13.2): 25 to 96
// frames an allocation, the first Python frame 17 to 39 frames down, the
// Python frames interleaved with CPython's own (_PyEval_EvalFrameDefault,
// …) and nn.Module's wrappers, and half the allocations of a training step
// (3534 of 6771; 1331 of 1935 in the U-Net's) made on the autograd
// engine's thread, with no Python frame at all.
func UserFrames(stack []TorchFrame, n int) []TorchFrame {
	if n <= 0 || len(stack) == 0 {
		return nil
	}
	var python, user, native []TorchFrame
	for _, f := range stack {
		switch {
		case unreadable(f):
			// Not a frame: shown only by rule 3, when nothing else is.
		case strings.HasSuffix(f.Filename, ".py"):
			python = append(python, f)
			if !isPythonWrapper(f) {
				user = append(user, f)
			}
		case !isNativeMachinery(f):
			native = append(native, f)
		}
	}
	pick := user
	switch {
	case len(user) > 0:
	case len(python) > 0:
		pick = python
	case len(native) > 0:
		pick = native
	default:
		pick = stack
	}
	return slices.Clone(pick[:min(n, len(pick))])
}

// pythonWrappers are PyTorch's Python functions that only pass a call on,
// by the end of their file's path and their name.
var pythonWrappers = []struct{ file, name string }{
	{"torch/nn/modules/module.py", "_call_impl"},
	{"torch/nn/modules/module.py", "_wrapped_call_impl"},
	{"torch/optim/optimizer.py", "wrapper"},
	{"torch/optim/optimizer.py", "_use_grad"},
	{"torch/utils/_contextlib.py", "decorate_context"},
	{"torch/_tensor.py", "wrapped"},
	{"torch/_jit_internal.py", "fn"},
}

func isPythonWrapper(f TorchFrame) bool {
	file := strings.ReplaceAll(f.Filename, `\`, "/")
	for _, w := range pythonWrappers {
		if f.Name == w.name && (file == w.file || strings.HasSuffix(file, "/"+w.file)) {
			return true
		}
	}
	return false
}

// nativeMachinery are the C++ name prefixes of the code between an
// operator and the allocation it makes, and of the recording itself: the
// unwinder (torch::unwind::, torch::CapturedTraceback::, the snapshot's
// gather in memory_snapshot.cpp), the caching allocator and the dispatcher
// (c10::), tensor creation (at::detail::), the operator registry and the
// kernels' registered wrappers (at::_ops::, at::(anonymous namespace)::),
// TensorIterator's output allocation and structured kernels' meta
// functions (at::meta::: shape checks that allocate the output), the
// autograd engine's loop and node call, and the C++ library (std::).
var nativeMachinery = []string{
	"torch::unwind::",
	"torch::CapturedTraceback::",
	"torch::cuda::(anonymous namespace)::gather",
	"c10::",
	"at::detail::",
	"at::_ops::",
	"at::(anonymous namespace)::",
	"at::TensorIteratorBase::",
	"torch::autograd::Engine::",
	"torch::autograd::python::PythonEngine::",
	"torch::autograd::Node::",
	"at::meta::",
	"std::",
}

// threadStart are the C functions that start a thread (the autograd
// engine's): the bottom of its stacks, whatever their source file.
var threadStart = []string{"execute_native_thread_routine", "start_thread", "clone", "clone3", "__clone", "__clone3"}

func isNativeMachinery(f TorchFrame) bool {
	name := f.Name
	// A leading return type ("at::TensorBase at::detail::…", "void …"):
	// a first word without a parenthesis or template bracket.
	if sp := strings.IndexByte(name, ' '); sp > 0 && !strings.ContainsAny(name[:sp], "(<") {
		name = name[sp+1:]
	}
	for _, p := range nativeMachinery {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	if slices.Contains(threadStart, name) {
		return true
	}
	return !strings.Contains(name, "::") && (f.Filename == "??" || f.Filename == "")
}
