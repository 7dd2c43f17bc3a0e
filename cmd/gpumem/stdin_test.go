package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// withStdin runs fn with data as standard input.
func withStdin(t *testing.T, data []byte, fn func()) {
	t.Helper()
	old := stdin
	stdin = bytes.NewReader(data)
	defer func() { stdin = old }()
	fn()
}

// FILE "-" is standard input, for replay, advise, convert and diff alike,
// snapshot or trace, gzipped or not, read as the file would be (its stack
// frames too), and named "standard input"; it is bounded by -max-snapshot.
func TestDashReadsStandardInput(t *testing.T) {
	snapPath := framesSnapshot(t)
	snap, err := os.ReadFile(snapPath)
	if err != nil {
		t.Fatal(err)
	}
	fromFile := mustRun(t, "replay", "-quiet", "-no-search", "-policies", "adaptive", "-capacity", "24MiB", snapPath)
	var fromStdin string
	withStdin(t, snap, func() {
		fromStdin = mustRun(t, "replay", "-quiet", "-no-search", "-policies", "adaptive", "-capacity", "24MiB", "-")
	})
	if want := strings.Replace(fromFile, "trace frames.pickle:", "trace standard input:", 1); fromStdin != want {
		t.Fatalf("replay - differs from replay FILE but for the name:\n%s\nwant\n%s", fromStdin, want)
	}
	if !strings.Contains(fromStdin, "    /home/u/model.py:147  attention\n") {
		t.Fatalf("replay - lost the failing allocation's frames:\n%s", fromStdin)
	}

	var z bytes.Buffer
	writeGzipTo(t, &z, snap)
	withStdin(t, z.Bytes(), func() {
		out := mustRun(t, "advise", "-quiet", "-capacity", "24MiB", "-frames", "1", "-")
		if !strings.Contains(out, "trace standard input:") || !strings.Contains(out, "out of memory at device_traces entry 3") {
			t.Fatalf("advise - of a gzipped snapshot:\n%s", out)
		}
	})

	dir := t.TempDir()
	out := filepath.Join(dir, "s.jsonl")
	withStdin(t, snap, func() { mustRun(t, "convert", "-", "-o", out) })
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), `"source":"standard input"`) || strings.Count(string(b), `"op":"alloc"`) != 2 {
		t.Fatalf("convert - wrote %q (%v)", b, err)
	}

	// A gpumem trace on standard input, and diff reading one side there.
	withStdin(t, b, func() {
		if out := mustRun(t, "replay", "-quiet", "-no-search", "-policies", "torch", "-"); !strings.Contains(out, "trace standard input: 2 events") {
			t.Fatalf("replay - of a trace:\n%s", out)
		}
	})
	withStdin(t, snap, func() {
		out := mustRun(t, "diff", "-quiet", "-no-search", "-policies", "torch", "-b-torch-conf", "expandable_segments:True", "-")
		if !strings.Contains(out, "A: standard input,") || !strings.Contains(out, "B: standard input,") {
			t.Fatalf("diff - with two settings:\n%s", out)
		}
	})
	withStdin(t, snap, func() {
		out := mustRun(t, "diff", "-quiet", "-no-search", "-policies", "torch", "-", snapPath)
		if !strings.Contains(out, "A: standard input,") || !strings.Contains(out, "B: frames.pickle,") {
			t.Fatalf("diff - FILE:\n%s", out)
		}
	})

	withStdin(t, snap, func() {
		_, _, err := runCmd(t, "replay", "-quiet", "-max-snapshot", "100", "-")
		if !errors.Is(err, errStdinTooLarge) || exitCode(err) != 1 || !strings.Contains(err.Error(), "raise -max-snapshot") {
			t.Fatalf("standard input past -max-snapshot: %v", err)
		}
	})
	withStdin(t, nil, func() {
		_, _, err := runCmd(t, "replay", "-quiet", "-")
		if err == nil || !strings.Contains(err.Error(), "reading standard input: neither a PyTorch memory snapshot") || !strings.Contains(err.Error(), "empty input") {
			t.Fatalf("empty standard input: %v", err)
		}
	})
}

// writeGzipTo gzips content into w.
func writeGzipTo(t *testing.T, w io.Writer, content []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "z.gz")
	writeGzip(t, path, content)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
}
