package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// advise -torch-conf names the settings the workload runs with now: the
// answer judges them, marks their row, and a bad line is a usage error
// naming the flag.
func TestAdviseTorchConfIsTheSettingsJudgedAsItIs(t *testing.T) {
	tr := filepath.Join(t.TempDir(), "churn.jsonl")
	mustRun(t, "synth", "-workload", "churn", "-allocs", "200", "-seed", "3", "-o", tr)
	out := strings.Join(strings.Fields(mustRun(t, "advise", "-quiet", "-capacity", "64GiB", "-torch-conf", "max_split_size_mb:100", tr)), " ")
	for _, want := range []string{"the -torch-conf settings (max_split_size_mb:100) fit", "max_split_size_mb:100 (now)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
	if _, _, err := runCmd(t, "advise", "-quiet", "-torch-conf", "bad:1", tr); exitCode(err) != 2 || !strings.Contains(err.Error(), "-torch-conf") {
		t.Fatalf("advise -torch-conf bad:1 = %v (exit %d), want a usage error naming -torch-conf", err, exitCode(err))
	}
}
