package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// The stacks below are shaped as the shared snapshots' are (innermost
// first): the unwinder, the caching allocator, tensor creation and the
// dispatcher, then CPython's frames interleaved with Python ones, nn.Module's
// wrappers between the user's.
var (
	unwinderFrames = []TorchFrame{
		{Name: "torch::unwind::unwind()", Filename: "??"},
		{Name: "torch::CapturedTraceback::gather(bool, bool, bool)", Filename: "??"},
		{Name: "torch::cuda::(anonymous namespace)::gather_with_cpp()", Filename: "memory_snapshot.cpp"},
		{Name: "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", Filename: "CUDACachingAllocator.cpp"},
		{Name: "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", Filename: ""},
		{Name: "at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)", Filename: ""},
		{Name: "at::detail::empty_cuda(c10::ArrayRef<long>, c10::TensorOptions const&)", Filename: "??"},
		{Name: "at::(anonymous namespace)::create_out(c10::ArrayRef<long>, c10::ArrayRef<long>, c10::TensorOptions const&)", Filename: "RegisterCUDA.cpp"},
		{Name: "at::TensorIteratorBase::allocate_or_resize_outputs()", Filename: "??"},
		{Name: "c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<c10::CompileTimeFunctionPointer<at::Tensor (at::Tensor const&, at::Tensor const&)>>>::call(c10::OperatorKernel*)", Filename: "RegisterCUDA.cpp"},
		{Name: "at::_ops::add_Tensor::call(at::Tensor const&, at::Tensor const&, c10::Scalar const&)", Filename: "??"},
	}
	pythonStack = append(slices.Clone(unwinderFrames),
		TorchFrame{Name: "torch::autograd::THPVariable_add(_object*, _object*, _object*)", Filename: "python_variable_methods.cpp"},
		TorchFrame{Name: "PyNumber_Add", Filename: "??"},
		TorchFrame{Name: "forward", Filename: "/home/u/model.py", Line: 55},
		TorchFrame{Name: "_PyEval_EvalFrameDefault", Filename: "??"},
		TorchFrame{Name: "_call_impl", Filename: "/venv/lib/python3.13/site-packages/torch/nn/modules/module.py", Line: 1750},
		TorchFrame{Name: "_wrapped_call_impl", Filename: "/venv/lib/python3.13/site-packages/torch/nn/modules/module.py", Line: 1739},
		TorchFrame{Name: "forward", Filename: "/home/u/model.py", Line: 243},
		TorchFrame{Name: "_call_impl", Filename: "/venv/lib/python3.13/site-packages/torch/nn/modules/module.py", Line: 1750},
		TorchFrame{Name: "_wrapped_call_impl", Filename: "/venv/lib/python3.13/site-packages/torch/nn/modules/module.py", Line: 1739},
		TorchFrame{Name: "train_step", Filename: "/home/u/train.py", Line: 12},
		TorchFrame{Name: "decorate_context", Filename: "/venv/lib/python3.13/site-packages/torch/utils/_contextlib.py", Line: 116},
		TorchFrame{Name: "<module>", Filename: "/home/u/train.py", Line: 40},
		TorchFrame{Name: "Py_RunMain", Filename: "??"},
		TorchFrame{Name: "__libc_start_main", Filename: "??"},
		TorchFrame{Name: "_start", Filename: "??"},
	)
	// An allocation on the autograd engine's thread: no Python frame.
	autogradStack = append(slices.Clone(unwinderFrames[:7]),
		TorchFrame{Name: "at::native::zeros_symint(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)", Filename: "??"},
		TorchFrame{Name: "at::_ops::zeros::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)", Filename: "??"},
		TorchFrame{Name: "void at::meta::common_checks_baddbmm_bmm<at::meta::structured_bmm>(at::meta::structured_bmm&, at::Tensor const&)", Filename: ""},
		TorchFrame{Name: "torch::autograd::VariableType::(anonymous namespace)::select_backward(c10::DispatchKeySet, at::Tensor const&)", Filename: "VariableType_1.cpp"},
		TorchFrame{Name: "torch::autograd::generated::SelectBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)", Filename: "??"},
		TorchFrame{Name: "torch::autograd::Node::operator()(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)", Filename: ""},
		TorchFrame{Name: "torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*)", Filename: "??"},
		TorchFrame{Name: "torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)", Filename: "??"},
		TorchFrame{Name: "execute_native_thread_routine", Filename: "thread48.o"},
		TorchFrame{Name: "pthread_condattr_setpshared", Filename: "??"},
	)
)

func TestUserFramesPutsTheUsersPythonFramesFirst(t *testing.T) {
	names := func(fs []TorchFrame) []string {
		var out []string
		for _, f := range fs {
			out = append(out, fmt.Sprintf("%s:%d %s", f.Filename, f.Line, f.Name))
		}
		return out
	}
	for _, tc := range []struct {
		what  string
		stack []TorchFrame
		n     int
		want  []string
	}{
		// The unwinder's, the allocator's, the dispatcher's and CPython's
		// frames go, and so do nn.Module's and no_grad's wrappers.
		{"python", pythonStack, 5, []string{"/home/u/model.py:55 forward", "/home/u/model.py:243 forward", "/home/u/train.py:12 train_step", "/home/u/train.py:40 <module>"}},
		{"python, 2", pythonStack, 2, []string{"/home/u/model.py:55 forward", "/home/u/model.py:243 forward"}},
		// No Python frame: the C++ frames that say which operator, without
		// the machinery, the autograd engine's loop and the thread's start.
		{"autograd thread", autogradStack, 5, []string{
			"??:0 at::native::zeros_symint(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>)",
			"VariableType_1.cpp:0 torch::autograd::VariableType::(anonymous namespace)::select_backward(c10::DispatchKeySet, at::Tensor const&)",
			"??:0 torch::autograd::generated::SelectBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
		}},
		// Python frames that are all wrappers are still the Python frames.
		{"wrappers only", append(slices.Clone(unwinderFrames), pythonStack[15]), 5, []string{"/venv/lib/python3.13/site-packages/torch/nn/modules/module.py:1750 _call_impl"}},
		// Nothing but machinery: the stack's top, as recorded.
		{"machinery only", unwinderFrames[:3], 2, []string{"??:0 torch::unwind::unwind()", "??:0 torch::CapturedTraceback::gather(bool, bool, bool)"}},
		{"none asked", pythonStack, 0, nil},
		{"no stack", nil, 5, nil},
	} {
		if got := names(UserFrames(tc.stack, tc.n)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got\n%s\nwant\n%s", tc.what, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
	// The stack itself is not changed.
	before := slices.Clone(pythonStack)
	if UserFrames(pythonStack, 3)[0] = (TorchFrame{}); !slices.Equal(pythonStack, before) {
		t.Fatal("UserFrames returned a view of the stack")
	}
}

// framesSnapshot is a snapshot written by WriteTorchSnapshot (frame dicts
// built inline in every frames list): a segment whose block has frames,
// then entries 0 segment_alloc, 1 alloc (pythonStack), 2 alloc
// (autogradStack), 3 free_requested of 1, 4 alloc without frames, and pad
// more allocs of three frames each after them.
func framesSnapshot(t testing.TB, pad int) []byte {
	t.Helper()
	frames := func(tag string, n int) []TorchFrame {
		var fs []TorchFrame
		for i := range n {
			fs = append(fs, TorchFrame{Name: fmt.Sprintf("%s_%d", tag, i), Filename: "/pad.py", Line: i + 1})
		}
		return fs
	}
	s := &TorchSnapshot{
		Segments: []TorchSegment{{Address: 1 << 30, TotalSize: 20 << 20, SegmentType: "large", Blocks: []TorchBlock{
			{Address: 1 << 30, Size: 20 << 20, State: "inactive", Frames: frames("block", 4)},
		}}},
		Traces: [][]TorchTraceEntry{{
			{Action: "segment_alloc", Addr: 1 << 30, Size: 20 << 20, TimeUS: 1, Frames: unwinderFrames[:4]},
			{Action: "alloc", Addr: 1 << 30, Size: 1 << 20, TimeUS: 2, Frames: pythonStack},
			{Action: "alloc", Addr: 1<<30 + 1<<20, Size: 1 << 20, TimeUS: 3, Frames: autogradStack},
			{Action: "free_requested", Addr: 1 << 30, Size: 1 << 20, TimeUS: 4, Frames: pythonStack},
			{Action: "alloc", Addr: 1<<30 + 2<<20, Size: 512, TimeUS: 5},
		}},
	}
	for i := range pad {
		s.Traces[0] = append(s.Traces[0], TorchTraceEntry{Action: "alloc", Addr: 2<<30 + uint64(i)<<10, Size: 512, TimeUS: int64(6 + i), Frames: frames(fmt.Sprintf("pad%d", i), 3)})
	}
	var b bytes.Buffer
	if err := WriteTorchSnapshot(&b, s); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// byteCounter counts the bytes read through it.
type byteCounter struct {
	r io.Reader
	n int
}

func (c *byteCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// ReadFrames gives the chosen entries their frames as recorded, nothing
// for an entry without frames or out of range, and reads a pickle only up
// to the last wanted entry's frames.
func TestReadFramesGivesTheChosenEntriesTheirStacks(t *testing.T) {
	data := framesSnapshot(t, 20000)
	s := mustSnapshot(t, data, SnapshotOptions{})
	if s.Counts.Entries != 20005 {
		t.Fatalf("%d entries", s.Counts.Entries)
	}
	r := &byteCounter{r: bytes.NewReader(data)}
	got, err := s.ReadFrames(r, []int{2, 1, 4, 1, -1, 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int][]TorchFrame{1: pythonStack, 2: autogradStack}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %d entries' frames (%v), want entries 1 and 2", len(got), slices.Sorted(mapKeys(got)))
	}
	// The read stopped right after entry 2's frames: a window and a
	// buffer past them, not the twenty thousand entries after.
	t.Logf("read %d of %d bytes for entries 1 and 2", r.n, len(data))
	if r.n > 512<<10 || r.n*4 > len(data) {
		t.Fatalf("read %d of %d bytes for the first entries' frames", r.n, len(data))
	}
	// The last entry's frames need the whole input; a byte at a time gives
	// the same.
	last := s.Counts.Entries - 1
	got, err = s.ReadFrames(iotest.OneByteReader(bytes.NewReader(data)), []int{last, 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Equal(got[3], pythonStack) || len(got[last]) != 3 || got[last][2].Name != fmt.Sprintf("pad%d_2", 20000-1) {
		t.Fatalf("last entry: %v; entry 3: %d frames", got[last], len(got[3]))
	}
	// Gzipped, the same.
	got, err = s.ReadFrames(bytes.NewReader(gzipBytes(t, data)), []int{1})
	if err != nil || !slices.Equal(got[1], pythonStack) {
		t.Fatalf("gzipped: %v, %d frames", err, len(got[1]))
	}
	// Nothing asked, nothing read.
	if got, err := s.ReadFrames(iotest.ErrReader(errors.New("read")), []int{4, -3}); err != nil || len(got) != 0 {
		t.Fatalf("no frames asked: %v, %v", got, err)
	}
}

func mapKeys(m map[int][]TorchFrame) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// The hand-made pickle's frames lists (APPENDS of memo references and
// inline dicts, a memo reference to an earlier list, the fast path's MARK
// GET… APPENDS, APPEND) read back as built.
func TestReadFramesOfMemoSharedAndFastPathLists(t *testing.T) {
	data := snapshotWithFrames()
	s := mustSnapshot(t, data, SnapshotOptions{})
	got, err := s.ReadFrames(bytes.NewReader(data), []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"a b a", "a b a", "a b a b"} {
		var names []string
		for _, f := range got[i] {
			if f.Line != 7 || f.Filename != "" {
				t.Errorf("entry %d: frame %+v, want line 7 and no file", i, f)
			}
			names = append(names, f.Name)
		}
		if strings.Join(names, " ") != want {
			t.Errorf("entry %d: frames %v, want %s", i, names, want)
		}
	}
}

// A JSON snapshot's frames are read the same way (decoded whole).
func TestReadFramesOfAJSONSnapshot(t *testing.T) {
	frame := func(name, file string, line int) map[string]any {
		return map[string]any{"name": name, "filename": file, "line": line}
	}
	a := ent("alloc", 1<<30, 1<<20, 0, 1)
	a["frames"] = []map[string]any{frame("torch::unwind::unwind()", "??", 0), frame("step", "/home/u/train.py", 9)}
	b := ent("alloc", 2<<30, 1<<20, 0, 2)
	data := snapshotJSON(t, nil, []map[string]any{a, b})
	s := mustSnapshot(t, data, SnapshotOptions{})
	got, err := s.ReadFrames(bytes.NewReader(data), []int{0, 1})
	want := map[int][]TorchFrame{0: {{Name: "torch::unwind::unwind()", Filename: "??"}, {Name: "step", Filename: "/home/u/train.py", Line: 9}}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v", got, err)
	}
}

// Another input than the one read is refused, not read for another
// allocation's stack; and the second read keeps the first one's limits.
func TestReadFramesRefusesAnotherInputAndKeepsTheLimits(t *testing.T) {
	data := framesSnapshot(t, 10)
	s := mustSnapshot(t, data, SnapshotOptions{MaxBytes: int64(len(data))})
	other := bytes.Replace(framesSnapshot(t, 10), []byte("/home/u/train.py"), []byte("/home/u/other.py"), 1)
	if _, err := s.ReadFrames(bytes.NewReader(other), []int{1}); err != nil {
		t.Fatalf("same shape, other names: %v (read as recorded: only lengths are checked)", err)
	}
	// Entry 1 with one frame more: refused.
	longer := &TorchSnapshot{Traces: [][]TorchTraceEntry{{
		{Action: "segment_alloc", Addr: 1 << 30, Size: 20 << 20, Frames: unwinderFrames[:4]},
		{Action: "alloc", Addr: 1 << 30, Size: 1 << 20, Frames: append(slices.Clone(pythonStack), TorchFrame{Name: "x"})},
	}}}
	var b bytes.Buffer
	if err := WriteTorchSnapshot(&b, longer); err != nil {
		t.Fatal(err)
	}
	// (The segment's block frames are missing here, so the lists are
	// numbered differently too: either way, not this snapshot.)
	if _, err := s.ReadFrames(bytes.NewReader(b.Bytes()), []int{1}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "not") {
		t.Fatalf("another snapshot: %v, want an ErrSnapshot", err)
	}
	// A larger input than MaxBytes allowed the first read is refused.
	big := framesSnapshot(t, 5000)
	if _, err := s.ReadFrames(bytes.NewReader(big), []int{13}); err == nil {
		t.Fatal("a larger input read past the first read's MaxBytes")
	} else if tl := (*TooLargeError)(nil); !errors.As(err, &tl) {
		t.Fatalf("larger input: %v, want a *TooLargeError", err)
	}
}

// On the shared snapshots every alloc entry's frames read back (the lists
// numbered as in the first read: their lengths are checked), each begins
// with the unwinder's frame, and on the forward pass every one has a
// Python frame to show first.
func TestReadFramesOfSharedSnapshots(t *testing.T) {
	for _, name := range []string{"transformer-ctx128-forward.pickle", "unet-snapshot.pickle"} {
		data := openShared(t, name)
		s := mustSnapshot(t, data, SnapshotOptions{})
		var allocs []int
		for i, ref := range s.frames {
			if ref.n > 0 && i%7 == 0 {
				allocs = append(allocs, i)
			}
		}
		got, err := s.ReadFrames(bytes.NewReader(data), allocs)
		if err != nil {
			t.Fatal(err)
		}
		python := 0
		for _, i := range allocs {
			stack := got[i]
			if len(stack) == 0 || stack[0].Name != "torch::unwind::unwind()" {
				t.Fatalf("%s entry %d: %d frames, first %+v", name, i, len(stack), stack[0])
			}
			if top := UserFrames(stack, 5); len(top) > 0 && strings.HasSuffix(top[0].Filename, ".py") {
				python++
			}
		}
		if name == "transformer-ctx128-forward.pickle" && python != len(allocs) {
			t.Errorf("%s: %d of %d stacks show a Python frame first", name, python, len(allocs))
		}
		t.Logf("%s: %d stacks read, %d with Python frames", name, len(allocs), python)
	}
}

// A frames list appended to after a later one began (a hand-made pickle;
// Python's pickler builds each list whole) is read whole: the second read
// does not stop early for it.
func TestReadFramesOfAListThatGrowsLate(t *testing.T) {
	p := pk{}.op('}', 0x94).str("device_traces").op(0x94, ']', 0x94, ']', 0x94) // 0 top, 1 key, 2 outer, 3 trace
	p = p.op('}', '(').str("action").str("alloc").str("addr").int1(1).str("size").int1(2)
	p = p.str("frames").op(']', 0x94, '(').frameDict("a").op('e', 'u', 'a') // 4: entry 0's list, 5: a
	p = p.op('}', '(').str("action").str("alloc").str("addr").int1(3).str("size").int1(2)
	p = p.str("frames").op(']', '(').frameDict("b").op('e', 'u', 'a') // 6: b
	p = p.get(4).frameDict("c").op('a', '0')                          // entry 0's list grows: [a, c]
	p = p.op('a', 's')
	data := p.done()
	s := mustSnapshot(t, data, SnapshotOptions{})
	if !s.framesLate || s.frames[0].n != 2 {
		t.Fatalf("late growth not seen: %v, entry 0 has %d frames", s.framesLate, s.frames[0].n)
	}
	got, err := s.ReadFrames(bytes.NewReader(data), []int{0})
	if err != nil || len(got[0]) != 2 || got[0][0].Name != "a" || got[0][1].Name != "c" {
		t.Fatalf("entry 0: %v, %v; want frames a and c", got[0], err)
	}
	// A snapshot as Python writes it never sets it.
	if s := mustSnapshot(t, framesSnapshot(t, 3), SnapshotOptions{}); s.framesLate {
		t.Fatal("a whole-built snapshot counted as growing late")
	}
}

// R5: a snapshot in which a stack frame is not a dict (here 4 bytes, as
// the fuzzer found it) is accepted by ReadSnapshot, which never decodes
// frames; ReadFrames used to refuse it ("stack frame 0 is bytes of 4, not
// a dict"), so the snapshot's frames could not be read at all. Now the
// item keeps its place as an Unreadable frame naming it, the stack keeps
// its recorded depth and its other frames, and UserFrames passes over
// it; a stack of nothing else shows it, as the stack's first frames. The
// same holds for a JSON snapshot (a string where a frame stands).
func TestReadFramesKeepsAnItemThatIsNotAFrameInItsPlace(t *testing.T) {
	user := TorchFrame{Name: "f", Filename: "x.py", Line: 3}
	bad := TorchFrame{Name: "(not a frame: bytes of 4)"}
	pickled := []byte("\x80\x04\x95\x9a\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x0ddevice_traces\x94]\x94]\x94}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94M\x00\x10\x8c\x04size\x94M\x00\x02\x8c\x06stream\x94K\x00\x8c\x06frames\x94]\x94(C\x04abcd\x94}\x94(\x8c\x04name\x94\x8c\x01f\x94\x8c\x08filename\x94\x8c\x04x.py\x94\x8c\x04line\x94K\x03ueuaa\x8c\x08segments\x94]\x94u.")
	a := ent("alloc", 1<<30, 1<<20, 0, 1)
	a["frames"] = []any{"abcd", map[string]any{"name": "f", "filename": "x.py", "line": 3}}
	// A string that reads as a C++ name is not taken for one.
	if u := UserFrames([]TorchFrame{{Name: `(not a frame: "at::native::f")`}, {Name: "at::native::g()", Filename: "??"}}, 3); len(u) != 1 || u[0].Name != "at::native::g()" {
		t.Fatalf("UserFrames passing over an unreadable item: %+v", u)
	}
	for name, c := range map[string]struct {
		data []byte
		bad  TorchFrame
	}{
		"pickle": {pickled, bad},
		"JSON":   {snapshotJSON(t, nil, []map[string]any{a}), TorchFrame{Name: `(not a frame: "abcd")`}},
	} {
		s := mustSnapshot(t, c.data, SnapshotOptions{})
		got, err := s.ReadFrames(bytes.NewReader(c.data), []int{0})
		if err != nil {
			t.Fatalf("%s: the frames of a snapshot ReadSnapshot accepted: %v", name, err)
		}
		if want := []TorchFrame{c.bad, user}; !reflect.DeepEqual(got[0], want) {
			t.Fatalf("%s: frames %+v, want %+v", name, got[0], want)
		}
		if !unreadable(got[0][0]) || unreadable(got[0][1]) {
			t.Fatalf("%s: unreadable: %v, %v; want true, false", name, unreadable(got[0][0]), unreadable(got[0][1]))
		}
		if u := UserFrames(got[0], 3); !reflect.DeepEqual(u, []TorchFrame{user}) {
			t.Fatalf("%s: UserFrames %+v, want the one frame", name, u)
		}
		if u := UserFrames(got[0][:1], 3); !reflect.DeepEqual(u, []TorchFrame{c.bad}) {
			t.Fatalf("%s: UserFrames of the item alone %+v, want it", name, u)
		}
	}
}
