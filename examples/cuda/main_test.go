package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/cuda"
)

// buildFakeDriver compiles package cuda's fake driver (a libcuda.so.1 on
// host memory, which runs this example's kernels by name) into a temporary
// directory, skipping the test without gcc.
func buildFakeDriver(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the fake CUDA driver is a linux shared object")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build the fake CUDA driver (cuda/testdata/fakecuda.c)")
	}
	src, err := filepath.Abs(filepath.Join("..", "..", "cuda", "testdata", "fakecuda.c"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "libcuda.so.1")
	cmd := exec.Command(gcc, "-std=c11", "-O1", "-Wall", "-Wno-format-zero-length", "-Werror", "-fPIC", "-shared",
		"-fvisibility=hidden", "-Wl,-Bsymbolic", "-pthread", "-o", out, src)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, msg)
	}
	return out
}

// The example runs against the fake driver: its kernels run, relocations
// happen between steps, the captured step replays, and every result
// checks out on the host (run fails otherwise).
func TestExampleChecksItsResultsOnTheFakeDriver(t *testing.T) {
	dev, err := cuda.OpenDevice(cuda.Options{Library: buildFakeDriver(t)})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(dev, &out, 20); err != nil {
		dev.Close()
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "every result checked on the host: ok") {
		t.Fatalf("output:\n%s", out.String())
	}
	t.Log(out.String())
}
