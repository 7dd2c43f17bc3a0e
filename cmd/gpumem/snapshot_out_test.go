package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
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
	if !strings.HasPrefix(s.WrittenBy, "gpumem") {
		t.Fatalf("the snapshot does not say gpumem wrote it: WrittenBy %q", s.WrittenBy)
	}
	// Replayed, the report calls the recorded reserve gpumem's, never
	// PyTorch's.
	out := mustRun(t, "replay", "-quiet", "-no-search", "-policies", "adaptive,torch", path)
	if !strings.Contains(out, "written by gpumem") || strings.Contains(out, "PyTorch reserved") || strings.Contains(out, "against PyTorch's recorded") {
		t.Fatalf("the report of a gpumem snapshot:\n%s", out)
	}
	html := filepath.Join(t.TempDir(), "r.html")
	mustRun(t, "replay", "-quiet", "-no-search", "-policies", "adaptive", "-html", html, path)
	if page, err := os.ReadFile(html); err != nil || strings.Contains(string(page), "PyTorch&#39;s recorded reserve") || strings.Contains(string(page), "PyTorch's recorded reserve") {
		t.Fatalf("the HTML report of a gpumem snapshot calls its reserve PyTorch's (%v)", err)
	}
	if _, _, err := runCmd(t, "replay", "-quiet", "-no-search", "-snapshot-policy", "torch", "-snapshot-out", path); !errors.Is(err, errUsage) {
		t.Fatalf("-snapshot-policy torch: %v, want a usage error", err)
	}
}
