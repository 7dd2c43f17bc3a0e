package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

func writeGzip(t *testing.T, path string, content []byte) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A trace is read as a trace whatever its name: gzipped, upper-case, or
// with no .jsonl at all; before, a gzipped .jsonl failed as "bad snapshot:
// no device_traces".
func TestTracesAreReadByContentNotName(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "churn.jsonl")
	mustRun(t, "synth", "-workload", "churn", "-allocs", "60", "-seed", "3", "-o", plain)
	content, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	var want replayJSON
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-no-search", plain), &want)
	for _, name := range []string{"churn.jsonl.gz", "CHURN.JSONL", "churn.JSONL.GZ", "churn.trace"} {
		path := filepath.Join(dir, name)
		if strings.HasSuffix(strings.ToLower(name), ".gz") {
			writeGzip(t, path, content)
		} else if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		var got replayJSON
		decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-no-search", path), &got)
		if got.Events != want.Events || got.PeakLive != want.PeakLive {
			t.Errorf("%s: %d events, peak live %d; the plain trace has %d, %d", name, got.Events, got.PeakLive, want.Events, want.PeakLive)
		}
	}
}

// A gzipped trace is bounded like a snapshot: past -max-snapshot bytes
// decompressed it is refused with the flag named, exit 1.
func TestGzippedTraceIsBoundedByMaxSnapshot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.jsonl.gz")
	writeGzip(t, path, bytes.Repeat([]byte(`{"op":"cleanup","t":0,"stream":0}`+"\n"), 1000))
	_, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-max-snapshot", "10KiB", path)
	var tooLarge *trace.TooLargeError
	if !errors.As(err, &tooLarge) || exitCode(err) != 1 || !strings.Contains(err.Error(), "-max-snapshot") || !strings.Contains(err.Error(), "10240 bytes") {
		t.Fatalf("got %v (exit %d), want a TooLargeError naming -max-snapshot and 10240 bytes, exit 1", err, exitCode(err))
	}
}

// A file that is neither a snapshot nor a trace says so, and lists what is
// read; named .jsonl it is decoded as a trace, so the bad line is named.
func TestNeitherSnapshotNorTraceSaysWhatIsRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(path, []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCmd(t, "replay", "-quiet", path)
	if !errors.Is(err, trace.ErrUnknownFormat) || exitCode(err) != 1 || !strings.Contains(err.Error(), "notes.txt") || !strings.Contains(err.Error(), "JSONL trace") {
		t.Fatalf("got %v, want ErrUnknownFormat naming the file and the formats", err)
	}
	bad := filepath.Join(dir, "bad.JSONL")
	if err := os.WriteFile(bad, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", bad); !errors.Is(err, trace.ErrInvalidEvent) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a .JSONL of text: got %v, want the bad line named", err)
	}
}
