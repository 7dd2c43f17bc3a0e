package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// advise -require-fit, as replay's: exit 3 (after the advice is written)
// when no PyTorch setting of the grid fits -capacity, 0 when one does, and
// a usage error without -capacity.
func TestAdviseRequireFitExitsThreeWhenNoSettingFits(t *testing.T) {
	tr := filepath.Join(t.TempDir(), "churn.jsonl")
	mustRun(t, "synth", "-workload", "churn", "-allocs", "200", "-seed", "3", "-o", tr)

	out, _, err := runCmd(t, "advise", "-quiet", "-require-fit", "-capacity", "1MiB", tr)
	if !errors.Is(err, errNoFit) || exitCode(err) != 3 {
		t.Fatalf("-require-fit at 1 MiB: %v (exit %d), want exit 3", err, exitCode(err))
	}
	if !strings.Contains(out, "no PyTorch setting of the grid fits 1.00 MiB") {
		t.Fatalf("the advice was not written before the exit:\n%s", out)
	}
	out, _, err = runCmd(t, "advise", "-quiet", "-require-fit", "-capacity", "64GiB", tr)
	if err != nil || !strings.Contains(out, "the defaults already fit") {
		t.Fatalf("-require-fit at 64 GiB: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "advise", "-quiet", "-require-fit", tr); exitCode(err) != 2 || !strings.Contains(err.Error(), "-require-fit needs -capacity") {
		t.Fatalf("-require-fit without -capacity: %v (exit %d), want a usage error", err, exitCode(err))
	}
}
