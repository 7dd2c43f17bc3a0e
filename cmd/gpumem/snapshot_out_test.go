package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumem/gpumem/trace"
)

// replay -snapshot-out writes the chosen policy's replay as a PyTorch
// snapshot that reads back; a PyTorch policy there is a usage error.
func TestReplaySnapshotOutWritesAReadableSnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "adaptive.pickle")
	mustRun(t, "replay", "-quiet", "-no-search", "-policies", "adaptive", "-snapshot-out", path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := trace.ReadSnapshot(f, trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Counts.Allocs == 0 || s.Counts.Prelude != 0 {
		t.Fatalf("snapshot: %d allocs, %d prelude", s.Counts.Allocs, s.Counts.Prelude)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-snapshot-policy", "torch", "-snapshot-out", path); !errors.Is(err, errUsage) {
		t.Fatalf("-snapshot-policy torch: %v, want a usage error", err)
	}
}
