package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// scripts/policy-sweep.sh is how a placement or make-room change is judged
// (a rule tuned to a few traces shows on the others): these run it on a
// few generated traces, the working tree against itself (nothing may move)
// and against a base whose every figure is 1 MiB (every figure rose, and
// the script fails).
func TestPolicySweepScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and replays generated traces: not under -short")
	}
	if runtime.GOOS == "windows" {
		t.Skip("a bash script")
	}
	for _, tool := range []string{"bash", "python3", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("policy-sweep.sh needs %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	sweep := func(t *testing.T, base string) (string, int) {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join(root, "scripts/policy-sweep.sh"),
			"-seeds", "1", "-forward-seeds", "2", "-policies", "adaptive-pages", "-snapshots", t.TempDir(), "-j", "2", base)
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("policy-sweep.sh: %v\n%s", err, errs.String())
		}
		if strings.Contains(errs.String(), "no figures") || strings.Contains(out.String(), "no figures") {
			t.Fatalf("a replay gave no figures:\n%s%s", out.String(), errs.String())
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
	// One row a group: the forward seeds in two halves and one per other
	// workload, each with its one trace (two for forward, one a half).
	groups := []string{"capture", "churn", "forward 1-1", "forward 2-2", "growth", "llm-server", "metadata", "multistream", "transformer"}

	t.Run("the working tree against itself", func(t *testing.T) {
		out, code := sweep(t, ".")
		if code != 0 {
			t.Fatalf("exit %d, want 0 (no figure rose):\n%s", code, out)
		}
		for _, g := range groups {
			if !strings.Contains(out, g+strings.Repeat(" ", 16-len(g))+" adaptive-pages         1         0 (-0)         0 (+0)") {
				t.Errorf("no unchanged row for %s:\n%s", g, out)
			}
		}
		if strings.Contains(out, "rose:") {
			t.Errorf("figures rose against themselves:\n%s", out)
		}
	})

	t.Run("a base whose figures are all 1 MiB", func(t *testing.T) {
		fake := filepath.Join(t.TempDir(), "gpumem")
		script := `#!/bin/sh
echo '{"policies": [{"name": "adaptive-pages", "min_capacity_bytes": 1048576}, {"name": "torch", "min_capacity_bytes": 1048576}]}'
`
		if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		out, code := sweep(t, fake)
		if code != 1 {
			t.Fatalf("exit %d, want 1 (figures rose):\n%s", code, out)
		}
		for _, g := range []string{"capture-1 adaptive-pages: 1 -> ", "forward-2 adaptive-pages: 1 -> "} {
			if !strings.Contains(out, "  "+g) {
				t.Errorf("%q not listed among the figures that rose:\n%s", g, out)
			}
		}
		if !strings.Contains(out, "smallest capacity, MiB: base "+fake+" against the working tree") {
			t.Errorf("the base is not named:\n%s", out)
		}
	})
}
