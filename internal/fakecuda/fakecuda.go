// Package fakecuda builds the fake CUDA driver (cuda/testdata/fakecuda.c, a
// libcuda.so.1 on host memory) for tests: package cuda's own, the CLI's and
// the examples'. It is a test helper, written once, so that every test
// builds the driver with the same compiler flags.
//
// It owns only the build; what the fake implements is described in
// fakecuda.c, and binding it is package cuda's.
package fakecuda

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Source is the fake driver's C source, found from this file's place in
// the module (tests run in their own package's directory).
func Source(t testing.TB) string {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("fakecuda: cannot locate the module's source")
	}
	return filepath.Join(filepath.Dir(here), "..", "..", "cuda", "testdata", "fakecuda.c")
}

// Build compiles the fake driver with the given -D switches (FAKE_NO_VMM,
// FAKE_NO_MEMSET, FAKE_NO_PARAM_INFO, FAKE_NO_LIBRARY,
// FAKE_OMIT_GRAPH_LAUNCH) into the test's temporary directory and returns
// the library's path. It skips the test off linux or without gcc.
func Build(t testing.TB, defines ...string) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the fake CUDA driver is a linux shared object")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build the fake CUDA driver (cuda/testdata/fakecuda.c); install gcc to run the CUDA tests")
	}
	out := filepath.Join(t.TempDir(), "libcuda.so.1")
	args := []string{"-std=c11", "-O1", "-Wall", "-Wno-format-zero-length", "-Werror", "-fPIC", "-shared",
		"-fvisibility=hidden", "-Wl,-Bsymbolic", "-pthread", "-o", out}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	args = append(args, Source(t))
	if msg, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, msg)
	}
	return out
}
