package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Messages speak of flags, files and settings, not Go packages: no
// "trace: ", "compare: " or "torch: " prefix reaches the user, and a bad
// torch:CONF names the setting as a usage error.
func TestMessagesCarryNoPackagePrefixes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		args []string
		want string
		exit int
	}{
		{[]string{"replay", "-policies", "torch:foo:1"}, `policy "torch:foo:1": unknown PYTORCH_CUDA_ALLOC_CONF key: foo`, 2},
		{[]string{"replay", "-policies", "nosuch"}, `unknown policy "nosuch"`, 2},
		{[]string{"replay", "-torch-conf", "bad:1"}, "unknown PYTORCH_CUDA_ALLOC_CONF key", 2},
		{[]string{"replay", write("a.jsonl", `{"op":"alloc","t":1}`+"\n")}, `line 1: invalid trace event: alloc without "id"`, 1},
		{[]string{"replay", write("e.pickle", "\x80\x02}q\x00.")}, "bad PyTorch snapshot: no device_traces", 1},
		{[]string{"replay", write("t.txt", "hello\n")}, "neither a PyTorch memory snapshot", 1},
		{[]string{"synth", "-workload", "nosuch", "-o", filepath.Join(dir, "x.jsonl")}, "unknown synthetic workload", 2},
	} {
		_, _, err := runCmd(t, c.args...)
		if err == nil || exitCode(err) != c.exit || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (exit %d), want %q, exit %d", c.args, err, exitCode(err), c.want, c.exit)
			continue
		}
		for _, prefix := range []string{"trace: ", "compare: ", "torch: "} {
			if strings.Contains(err.Error(), prefix) {
				t.Errorf("%v: %q carries the package prefix %q", c.args, err, prefix)
			}
		}
	}
}
