//go:build linux

package cuda

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/cuda/internal/driver"
	"github.com/gpumem/gpumem/internal/fakecuda"
)

// fakeDriver is a copy of testdata/fakecuda.c built into a test's temporary
// directory as libcuda.so.1, with its test controls bound. Each test builds
// its own, so no state leaks between tests.
type fakeDriver struct {
	path string

	setNextError   func(fn string, code int32)
	setTotalMem    func(n uint64)
	setDeviceCount func(n int32)
	setAttribute   func(attr, value int32)
	logCopy        func(buf *byte, capacity uintptr) uintptr
	logClear       func()
	live           func(kind string) int32
	mappedBytes    func() uint64
}

// buildFake builds the fake driver with the given -D switches
// (fakecuda.Build) and binds its test controls. It skips the test when gcc
// is missing.
func buildFake(t testing.TB, defines ...string) *fakeDriver {
	t.Helper()
	out := fakecuda.Build(t, defines...)
	lib, err := driver.LoadLibrary(out)
	if err != nil {
		t.Fatalf("loading the fake driver: %v", err)
	}
	f := &fakeDriver{path: out}
	for _, b := range []struct {
		fptr   any
		symbol string
	}{
		{&f.setNextError, "fake_set_next_error"},
		{&f.setTotalMem, "fake_set_total_mem"},
		{&f.setDeviceCount, "fake_set_device_count"},
		{&f.setAttribute, "fake_set_attribute"},
		{&f.logCopy, "fake_log"},
		{&f.logClear, "fake_log_clear"},
		{&f.live, "fake_live"},
		{&f.mappedBytes, "fake_mapped_bytes"},
	} {
		addr := driver.LookupSymbol(lib, b.symbol)
		if addr == 0 {
			t.Fatalf("fake driver lacks %s", b.symbol)
		}
		driver.RegisterFunc(b.fptr, addr)
	}
	return f
}

// open opens device 0 of the fake and closes it when the test ends.
func (f *fakeDriver) open(t *testing.T) *primaryContext {
	t.Helper()
	c, err := openContext(Options{Library: f.path})
	if err != nil {
		t.Fatalf("Open(fake): %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// call is one line of the fake's call log.
type call struct {
	name string
	tid  int
	args map[string]string
	rc   int
}

func (c call) String() string {
	var b strings.Builder
	b.WriteString(c.name)
	for k, v := range c.args {
		b.WriteString(" " + k + "=" + v)
	}
	return b.String() + " rc=" + strconv.Itoa(c.rc)
}

// calls returns the fake's log since the last clear.
func (f *fakeDriver) calls(t *testing.T) []call {
	t.Helper()
	n := f.logCopy(nil, 0)
	buf := make([]byte, n+1)
	f.logCopy(&buf[0], uintptr(len(buf)))
	var out []call
	for _, line := range strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n") {
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		c := call{name: fields[0], args: map[string]string{}}
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("malformed log line %q", line)
			}
			switch k {
			case "tid":
				c.tid, _ = strconv.Atoi(v)
			case "rc":
				c.rc, _ = strconv.Atoi(v)
			default:
				c.args[k] = v
			}
		}
		out = append(out, c)
	}
	return out
}

// named returns the logged calls of one function.
func (f *fakeDriver) named(t *testing.T, name string) []call {
	t.Helper()
	var out []call
	for _, c := range f.calls(t) {
		if c.name == name {
			out = append(out, c)
		}
	}
	return out
}

// last returns the last logged call of name, failing the test if none.
func (f *fakeDriver) last(t *testing.T, name string) call {
	t.Helper()
	cs := f.named(t, name)
	if len(cs) == 0 {
		t.Fatalf("no %s call in the fake's log", name)
	}
	return cs[len(cs)-1]
}

// liveCount returns the fake's count of live objects of a kind.
func (f *fakeDriver) liveCount(t *testing.T, kind string) int {
	t.Helper()
	n := int(f.live(kind))
	if n < 0 {
		t.Fatalf("fake_live: unknown kind %q", kind)
	}
	return n
}

// hex formats a pointer as the fake logs it.
func hex(p uintptr) string { return "0x" + strconv.FormatUint(uint64(p), 16) }

// tidOf returns the OS thread id of an executor's worker, asked on it.
func tidOf(t *testing.T, e *executor) int {
	t.Helper()
	var tid int
	if err := e.Do(func() error { tid = threadID(); return nil }); err != nil {
		t.Fatal(err)
	}
	return tid
}

// inheritedLibrary is $GPUMEM_LIBCUDA as the test binary found it: the real
// driver tests honour it, the others choose their driver themselves.
var inheritedLibrary string

func TestMain(m *testing.M) {
	inheritedLibrary = os.Getenv(EnvLibrary)
	os.Unsetenv(EnvLibrary)
	os.Exit(m.Run())
}
