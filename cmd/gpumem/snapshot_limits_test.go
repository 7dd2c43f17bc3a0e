package main

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A small gzip file whose pickle is far denser than a real snapshot (the
// issue's list of None, here 8 MiB decompressed from 40 KB) is refused by
// the held-bytes limit with exit 1, a message saying why and the flag to
// raise, for replay, advise and convert alike; it used to be decoded whole
// (at some 20 bytes of memory per input byte) and, at 1.5 GiB, crashed the
// process out of memory.
func TestDenseSnapshotIsRefusedNamingMaxSnapshot(t *testing.T) {
	dir := t.TempDir()
	snap := filepath.Join(dir, "dense.pickle.gz")
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte("\x80\x02]"))
	zw.Write(bytes.Repeat([]byte("Na"), 4<<20))
	zw.Write([]byte("."))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snap, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"replay", "-quiet", "-no-search", "-max-snapshot", "16MiB", snap},
		{"advise", "-max-snapshot", "16MiB", snap},
		{"convert", snap, "-o", filepath.Join(dir, "o.jsonl"), "-max-snapshot", "16MiB"},
	} {
		_, _, err := runCmd(t, args...)
		if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "decoded values hold about") ||
			!strings.Contains(err.Error(), "far denser than a real snapshot") || !strings.HasSuffix(err.Error(), "(raise -max-snapshot to read it)") {
			t.Fatalf("gpumem %s: exit %d: %v", strings.Join(args, " "), exitCode(err), err)
		}
	}
}
