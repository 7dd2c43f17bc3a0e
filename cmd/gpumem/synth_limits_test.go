package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -allocs 2000000000000 wrote 8.4 GB until it was killed: it is a usage
// error now, before anything is written, and so is a negative count.
func TestSynthRefusesAnAllocCountPastTheLimit(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"2000000000000", "10000001", "-5"} {
		path := filepath.Join(dir, "x.jsonl")
		_, _, err := runCmd(t, "synth", "-workload", "churn", "-allocs", n, "-o", path)
		if !errors.Is(err, errUsage) || exitCode(err) != 2 || !strings.Contains(err.Error(), "-allocs") || !strings.Contains(err.Error(), "10000000") {
			t.Errorf("-allocs %s: got %v (exit %d), want a usage error naming -allocs and its limit", n, err, exitCode(err))
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("-allocs %s: an output file was left: %v", n, err)
		}
	}
}

// -max-output stops the writing before the output passes it, says which
// flag to raise, and leaves no partial file.
func TestSynthStopsAtMaxOutputAndRemovesThePartialFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.jsonl")
	_, _, err := runCmd(t, "synth", "-workload", "churn", "-allocs", "5000", "-max-output", "64KiB", "-o", path)
	if !errors.Is(err, errOutputLimit) || exitCode(err) != 1 || !strings.Contains(err.Error(), "-max-output 64KiB") {
		t.Fatalf("got %v (exit %d), want the output limit naming -max-output 64KiB", err, exitCode(err))
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a partial output was left: %v", err)
	}
	mustRun(t, "synth", "-workload", "churn", "-allocs", "50", "-max-output", "64KiB", "-o", path)
	if fi, err := os.Stat(path); err != nil || fi.Size() > 64<<10 || fi.Size() == 0 {
		t.Fatalf("a small trace under the limit: %v, %v", fi, err)
	}
}
