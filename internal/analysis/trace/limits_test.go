package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// heapUse measures f's memory with runtime/metrics: allocated is every heap
// byte f allocated (/gc/heap/allocs:bytes, which bounds its peak heap from
// above whatever the collector did), peak the highest live heap
// (/memory/classes/heap/objects:bytes) a goroutine sampled meanwhile, over
// what was live before (the sample can miss a short peak: assert on
// allocated).
func heapUse(f func()) (allocated, peak uint64) {
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	read := func() (allocs, live uint64) {
		metrics.Read(samples)
		return samples[0].Value.Uint64(), samples[1].Value.Uint64()
	}
	runtime.GC()
	allocs0, live0 := read()
	var mu sync.Mutex
	top := live0
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(100 * time.Microsecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			mu.Lock()
			top = max(top, s[0].Value.Uint64())
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	<-stopped
	allocs1, _ := read()
	mu.Lock()
	defer mu.Unlock()
	return allocs1 - allocs0, top - live0
}

// allocatedBy is the heap bytes f allocated (/gc/heap/allocs:bytes),
// without the collection heapUse starts with, for the fuzzers: it bounds
// f's peak heap from above, to within the runtime's per-span accounting.
func allocatedBy(f func()) uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	f()
	metrics.Read(s)
	return s[0].Value.Uint64() - before
}

// gzipped is body compressed, level 1 (the tests' inputs are repetitive).
func gzipped(t *testing.T, body ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range body {
		if _, err := zw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wantHeldLimit checks that err is the held-bytes *TooLargeError for the
// limit, refused after reading less than readAtMost input bytes.
func wantHeldLimit(t *testing.T, err error, limit, readAtMost int64) {
	t.Helper()
	var tl *TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrSnapshot) || tl.Held == 0 || tl.Limit != limit {
		t.Fatalf("got %v, want the held-bytes TooLargeError for the limit %d", err, limit)
	}
	if tl.Read > readAtMost {
		t.Fatalf("refused after %d bytes of input, want at most %d: %v", tl.Read, readAtMost, err)
	}
	if !strings.Contains(err.Error(), "decoded values hold about") || !strings.Contains(err.Error(), "far denser than a real snapshot") || !strings.Contains(err.Error(), "unless it was recorded without stack frames") {
		t.Fatalf("message: %v", err)
	}
}

// The reproducer, scaled down: a gzip stream of a pickle list of
// None ("\x80\x02]" + "Na"×N + "."), 12 MiB decompressed under a 16 MiB
// limit, used to be held whole at 16 to 22 bytes of memory per input byte
// (264 MB here; 1.5 GiB of it exhausted a 4 GB machine before the 1 GiB
// limit refused it). Now the held-bytes limit refuses it within the first
// MiB and the read allocates a few MiB in all.
func TestPickleListOfNoneIsRefusedWithinTheHeldLimit(t *testing.T) {
	const limit = 16 << 20
	z := gzipped(t, []byte("\x80\x02]"), bytes.Repeat([]byte("Na"), 6<<20), []byte("."))
	var err error
	allocated, peak := heapUse(func() {
		_, err = ReadSnapshot(bytes.NewReader(z), SnapshotOptions{MaxBytes: limit})
	})
	t.Logf("%d-byte gzip, %d bytes decompressed: allocated %d bytes, sampled peak %d", len(z), 12<<20, allocated, peak)
	if allocated > 16<<20 {
		t.Fatalf("reading allocated %d bytes (sampled peak %d), want under 16 MiB", allocated, peak)
	}
	wantHeldLimit(t, err, limit, 1<<20)
}

// Other shapes of hostile pickle, each far denser than a real snapshot:
// a stack of empty dicts (80 bytes per input byte), of None (16), a list of
// small integers (about 11), of empty tuples (48), a run of marks (8), of
// far memo entries (10), a dict of integer keys (8: each is appended, as
// snapshot readers look keys up by string only). Each is refused early, allocating a small part of what holding it
// whole would take.
func TestDensePicklesAreRefusedWithinTheHeldLimit(t *testing.T) {
	const limit = 16 << 20
	far := []byte{}
	for i := range 1 << 20 {
		far = append(far, 'r', byte(i), byte(i>>8), byte(i>>16), 0x40)
	}
	for name, body := range map[string][]byte{
		"dicts":        bytes.Repeat([]byte("}"), 8<<20),
		"nones":        bytes.Repeat([]byte("N"), 8<<20),
		"small ints":   append([]byte("]"), bytes.Repeat([]byte("K\x07a"), 3<<20)...),
		"marks":        bytes.Repeat([]byte("("), 8<<20),
		"far memo":     append([]byte("N"), far...),
		"empty tuples": bytes.Repeat([]byte(")"), 8<<20),
		"int keys":     append([]byte("}"), bytes.Repeat([]byte("K\x01Ns"), 2<<20)...),
		"one key":      append([]byte("}"), bytes.Repeat([]byte("\x8c\x01aNs"), 2<<20)...),
	} {
		data := append(append([]byte("\x80\x04"), body...), '.')
		var err error
		allocated, _ := heapUse(func() {
			_, err = ReadSnapshot(bytes.NewReader(data), SnapshotOptions{MaxBytes: limit})
		})
		if name == "one key" {
			// One key replaced over and over: it holds nothing, and reads.
			if !errors.Is(err, ErrNotSnapshot) || !strings.Contains(err.Error(), `dict of 1 key ("a"), without segments or device_traces`) {
				t.Fatalf("%s: %v", name, err)
			}
			continue
		}
		if allocated > 32<<20 {
			t.Fatalf("%s: reading allocated %d bytes of %d input bytes, want under 32 MiB", name, allocated, len(data))
		}
		wantHeldLimit(t, err, limit, 2<<20)
	}
}

// A JSON snapshot of white space: it used to be read whole (and copied as
// the buffer grew) before the size limit refused it; now a run of white
// space is kept as one byte, so it costs nothing held, whether the limit
// refuses the input or not.
func TestJSONWhiteSpaceIsNotHeld(t *testing.T) {
	const limit = 16 << 20
	ws := bytes.Repeat([]byte(" \n\t"), 2<<20) // 6 MiB
	for name, c := range map[string]struct {
		data []byte
		over bool
	}{
		"under the limit": {gzipped(t, []byte(`{"device_traces":`), ws, []byte(`[], "segments": [`), ws, []byte(`]}`)), false},
		"over the limit":  {gzipped(t, []byte(`{"device_traces": [`), ws, ws, ws, []byte(`]}`)), true},
	} {
		var s *Snapshot
		var err error
		allocated, peak := heapUse(func() {
			s, err = ReadSnapshot(bytes.NewReader(c.data), SnapshotOptions{MaxBytes: limit})
		})
		t.Logf("%s: allocated %d bytes, sampled peak %d", name, allocated, peak)
		if allocated > 4<<20 {
			t.Fatalf("%s: reading allocated %d bytes, want under 4 MiB", name, allocated)
		}
		if c.over {
			var tl *TooLargeError
			if !errors.As(err, &tl) || tl.Held != 0 || tl.Limit != limit {
				t.Fatalf("%s: got %v, want the input-size TooLargeError", name, err)
			}
		} else if err != nil || s.Counts.Entries != 0 {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// readJSONText keeps what white space means: the first byte of each run
// outside strings (so "1 2" stays two numbers), strings as they are, escapes
// included, however the reader splits the input.
func TestJSONWhiteSpaceKeepsItsMeaning(t *testing.T) {
	in := "{\"a  b\" :\t\n \"x\\\"  \\\\\"  ,  \"c\":[1  2, tru e]}  \n"
	want := "{\"a  b\" :\t\"x\\\"  \\\\\" , \"c\":[1 2, tru e]} "
	for how, r := range map[string]func() *bufio.Reader{
		"whole":    func() *bufio.Reader { return bufio.NewReader(strings.NewReader(in)) },
		"one byte": func() *bufio.Reader { return bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(in)), 16) },
	} {
		got, err := readJSONText(r(), 0, 1<<20)
		if err != nil || string(got) != want {
			t.Fatalf("%s: got %q, %v; want %q", how, got, err, want)
		}
	}
	if _, err := ReadSnapshot(strings.NewReader(`{"device_traces": [[1   2]]}`), SnapshotOptions{}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "json: invalid character '2'") {
		t.Fatalf("[1   2]: %v", err)
	}
}

// Dense JSON (an array of zeros: 2 input bytes, some 64 bytes of decoded
// values each) is refused by the held-bytes limit before it is decoded.
func TestDenseJSONIsRefusedWithinTheHeldLimit(t *testing.T) {
	const limit = 16 << 20
	data := gzipped(t, []byte(`{"device_traces": [[`), bytes.Repeat([]byte("0,"), 6<<20), []byte(`0]]}`))
	var err error
	allocated, _ := heapUse(func() {
		_, err = ReadSnapshot(bytes.NewReader(data), SnapshotOptions{MaxBytes: limit})
	})
	if allocated > 8<<20 {
		t.Fatalf("reading allocated %d bytes, want under 8 MiB", allocated)
	}
	wantHeldLimit(t, err, limit, 1<<20)
}

// The held-bytes limit tells real snapshots from hostile input of the same
// size: each real one with stack frames reads at a limit of its own size
// (the floor then 1 MiB, the smallest, so its density, not the floor, lets
// it through), while a pickle list of None as long is refused under that
// limit. A snapshot written without stack frames, the densest real shape
// (about 5.5 held bytes per input byte against the 4 allowed), reads at
// the default limit, whose floor covers it, and is refused at a limit of
// its own size, the message naming that shape; its
// JSON form (12 against the 24 allowed) reads at its own size.
func TestHeldLimitTellsRealFromHostile(t *testing.T) {
	var entries []TorchTraceEntry
	for i := range 100_000 {
		addr := uint64(0x7f0000000000 + (i%5000)*4096)
		entries = append(entries,
			TorchTraceEntry{Action: "alloc", Addr: addr, Size: uint64(512 * (i%300 + 1)), Stream: uint64(i % 3), TimeUS: int64(i * 10)},
			TorchTraceEntry{Action: "free_completed", Addr: addr, Size: uint64(512 * (i%300 + 1)), Stream: uint64(i % 3), TimeUS: int64(i*10 + 5)})
	}
	var frameless bytes.Buffer
	if err := WriteTorchSnapshot(&frameless, &TorchSnapshot{Traces: [][]TorchTraceEntry{entries}}); err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	js.WriteString(`{"device_traces": [[`)
	for i, e := range entries {
		if i > 0 {
			js.WriteString(", ")
		}
		fmt.Fprintf(&js, `{"action": %q, "addr": %d, "size": %d, "stream": %d, "time_us": %d, "frames": []}`, e.Action, e.Addr, e.Size, e.Stream, e.TimeUS)
	}
	js.WriteString(`]], "segments": []}`)
	if s, err := ReadSnapshot(bytes.NewReader(frameless.Bytes()), SnapshotOptions{}); err != nil || s.Counts.Entries != len(entries) {
		t.Fatalf("frameless written (%d bytes) at the default limit: %v", frameless.Len(), err)
	}
	_, err := ReadSnapshot(bytes.NewReader(frameless.Bytes()), SnapshotOptions{MaxBytes: int64(frameless.Len())})
	wantHeldLimit(t, err, int64(frameless.Len()), int64(frameless.Len()))
	inputs := map[string][]byte{"frameless JSON": js.Bytes()}
	for _, name := range []string{"transformer-ctx128-forward.pickle", "transformer-ctx128-fullstep.pickle", "unet-snapshot.pickle", "llm-compression-empty-cache.pickle"} {
		if data := openSharedOrNil(t, name); data != nil {
			inputs[name] = data
		}
	}
	for name, data := range inputs {
		s, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{MaxBytes: int64(len(data))})
		if err != nil {
			t.Fatalf("%s (%d bytes) at a limit of its size: %v", name, len(data), err)
		}
		if s.Counts.Entries == 0 {
			t.Fatalf("%s: no entries", name)
		}
		hostile := append(append([]byte("\x80\x02]"), bytes.Repeat([]byte("Na"), (len(data)-4)/2)...), '.')
		_, err = ReadSnapshot(bytes.NewReader(hostile), SnapshotOptions{MaxBytes: int64(len(data))})
		wantHeldLimit(t, err, int64(len(data)), int64(len(data)))
	}
}

// openSharedOrNil reads a real PyTorch snapshot, or logs that the shared
// traces are absent and returns nil.
func openSharedOrNil(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(sharedTraces, name))
	if errors.Is(err, os.ErrNotExist) {
		t.Logf("shared PyTorch traces not present at %s (they live outside the repository): %s not read", sharedTraces, name)
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// memoRefsPickle is the R6 reproducer's pickle: a list of three integers
// stored in the memo, then a list of n references to it (BINGET 0), two
// input bytes each.
func memoRefsPickle(n int) []byte {
	return slices.Concat([]byte("\x80\x02](K\x01K\x02K\x03eq\x00]("), bytes.Repeat([]byte("h\x00"), n), []byte("e."))
}

// smallDictsPickle is a snapshot-shaped pickle of n small trace-entry
// dicts (nine keys, memoized once and then referenced, their values
// inline), 50 input bytes each and appended a thousand at a time, as
// Python's pickler writes a list: as dense as a real snapshot recorded
// without stack frames, and not one PyTorch wrote (its actions are not
// strings).
func smallDictsPickle(n int) []byte {
	p := pk{}.op('}', '(').str("device_traces").op(']', ']', 'q', 0, '(', '}', '(')
	for i, k := range []string{"action", "addr", "size", "stream", "time_us", "frames", "device_free", "total", "compile_context"} {
		p = p.str(k).op('q', byte(i+1)).int1(0)
	}
	p = p.op('u')
	one := []byte("}(h\x01K\x00h\x02J\x00\x10\x00\x00h\x03M\x00\x02h\x04K\x00h\x05\x8a\x06\x01\x02\x03\x04\x05\x06h\x06]h\x07J\x01\x02\x03\x04h\x08K\x07h\x09Nu")
	for i := 0; i < n; i += 1000 {
		p = append(p, bytes.Repeat(one, min(1000, n-i))...)
		p = p.op('e', '(')
	}
	return p.op('e', 'a').str("segments").op(']', 'u').done()
}

// Values pushed by memo references are held like any other (R6): a list
// of 8 million references to one stored list (16 MB of pickle, 4 KB of
// gzip), read under a 64 MiB limit, was charged by the stack's height
// while it was built and by the list's capacity once APPENDS moved it,
// never both, at exactly the 8 bytes per input byte then allowed, so it
// read whole (some 700 MB allocated: the stack grew by a quarter at a
// time) before "top level is list". A file of small trace-entry dicts is
// as dense as a real snapshot without frames, and read whole under the
// allowance of 8. Now the stack counts by its capacity and the allowance
// is 4: each is refused by the held-bytes limit within its first quarter,
// allocating about its input's size (twice what it held: the stack's and
// the list's arrays before they doubled).
func TestMemoReferencesAndSmallDictsAreRefusedEarly(t *testing.T) {
	for name, c := range map[string]struct {
		data  []byte
		limit int64
	}{
		"memo references": {memoRefsPickle(8 << 20), 64 << 20},
		"small dicts":     {smallDictsPickle(480_000), 32 << 20},
	} {
		z := gzipped(t, c.data)
		var err error
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err = ReadSnapshot(bytes.NewReader(z), SnapshotOptions{MaxBytes: c.limit})
		runtime.ReadMemStats(&after)
		allocated := after.TotalAlloc - before.TotalAlloc
		ratio := float64(allocated) / float64(len(c.data))
		t.Logf("%s: %d bytes of gzip, %d decompressed: %v; allocated %d bytes, %.2f per input byte", name, len(z), len(c.data), err, allocated, ratio)
		wantHeldLimit(t, err, c.limit, int64(len(c.data))/4)
		if ratio > 1.5 {
			t.Errorf("%s: reading allocated %.2f bytes per input byte (%d in all), want at most 1.5", name, ratio, allocated)
		}
	}
}
