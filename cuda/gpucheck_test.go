//go:build linux

package cuda

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The Go parts of scripts/gpu-check.sh run against the fake driver here,
// so the script's GPU run finds them working: each benchmark it times runs
// once and reports the metrics the script prints against their floors.
func TestGPUCheckBenchmarksReportTheirFloors(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every gpu-check benchmark once")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found: the benchmarks fall back to the fake driver, which needs it")
	}
	bt := flag.Lookup("test.benchtime")
	old := bt.Value.String()
	if err := bt.Value.Set("1x"); err != nil {
		t.Fatal(err)
	}
	defer bt.Value.Set(old)
	for _, bc := range []struct {
		name    string
		fn      func(*testing.B)
		metrics []string
	}{
		{"RelocationThroughput/16MiB", func(b *testing.B) {
			c, err := openContext(Options{Library: buildFake(b).path})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			benchRelocation(b, c, c.drv.Path, 16<<20)
		}, []string{"B/s", "floor-B/s", "x-floor", "x-copy-free-floor", "x-floor-less-release", "cleanup-ns/op", "copy-ns/op", "release-ns/op", "floor-copy-ns/op", "floor-free-ns/op"}},
		{"AllocFree", BenchmarkAllocFree, nil}, // sub-benchmarks: checked by running
		{"GraphLaunch", BenchmarkGraphLaunch, []string{"direct-ns/op", "x-floor"}},
	} {
		r := testing.Benchmark(bc.fn)
		if r.N == 0 {
			t.Fatalf("%s did not run (failed or skipped)", bc.name)
		}
		for _, m := range bc.metrics {
			if v, ok := r.Extra[m]; !ok || !(v > 0) {
				t.Errorf("%s reports %s = %v (present %v); want a positive figure", bc.name, m, v, ok)
			}
		}
	}
}

// The script itself parses.
func TestGPUCheckScriptParses(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not found")
	}
	script := filepath.Join("..", "scripts", "gpu-check.sh")
	if _, err := os.Stat(script); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", script, err, out)
	}
}
