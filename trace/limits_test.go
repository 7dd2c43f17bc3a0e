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
	if !strings.Contains(err.Error(), "decoded values hold about") || !strings.Contains(err.Error(), "far denser than a real snapshot") {
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
			if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), "no device_traces") {
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
// size: each real one reads at a limit of its own size (the floor then
// 1 MiB, the smallest, so its density, not the floor, lets it through),
// while a pickle list of None as long is refused under that limit.
// The real ones include a snapshot written without stack frames, the
// densest real shape (about 5 held bytes per input byte against the 8
// allowed), and its JSON form.
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
	inputs := map[string][]byte{"frameless written": frameless.Bytes(), "frameless JSON": js.Bytes()}
	for _, name := range []string{"transformer-ctx128-forward.pickle", "transformer-ctx128-fullstep.pickle", "unet-snapshot.pickle"} {
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
