package trace

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpythonLoad times CPython's C unpickler on the pickle read from standard
// input, restricted as gpumem's is (find_class raises, so no global is
// ever looked up), on bytes already in memory, and prints the best of at
// least five loads (more within a second) in seconds.
const cpythonLoad = `
import io, pickle, sys, time
data = sys.stdin.buffer.read()
class Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError("global %s.%s refused" % (module, name))
best, runs, start = float("inf"), 0, time.perf_counter()
while runs < 5 or (runs < 100 and time.perf_counter() - start < 1.0):
    t = time.perf_counter()
    Restricted(io.BytesIO(data)).load()
    best = min(best, time.perf_counter() - t)
    runs += 1
print(best)
`

// timeCPython returns CPython's best time to load data, or why it could not
// be measured.
func timeCPython(data []byte) (time.Duration, string) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return 0, "python3 not found: CPython not measured, no x-cpython ratio"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", cpythonLoad)
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		return 0, "python3 failed (" + err.Error() + "): CPython not measured, no x-cpython ratio"
	}
	sec, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || sec <= 0 {
		return 0, "python3 printed " + strconv.Quote(string(out)) + ": CPython not measured"
	}
	return time.Duration(sec * float64(time.Second)), ""
}

// BenchmarkReadSnapshot reads the shared full-step snapshot (the synthetic
// fixture when the shared traces are absent) from memory, pickle to native
// events, and reports x-cpython: gpumem's best time for a read over
// CPython's best time to merely unpickle the same bytes (gpumem also
// converts), both measured in this run, CPython before and after gpumem's
// loop, so the ratio, not the absolute time, carries to another machine and
// a busy machine skews neither side. best-ms and cpython-ms are the two
// times; ns/op is gpumem's mean. Without python3 the ratio is left out and
// a message says so.
//
//	go test -run '^$' -bench ReadSnapshot -benchmem ./trace/
func BenchmarkReadSnapshot(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(sharedTraces, "transformer-ctx128-fullstep.pickle"))
	if err != nil {
		b.Logf("shared traces absent (%v): reading the synthetic fixture", err)
		data = readFixture(b, "synthetic-p4.pickle")
	}
	py, why := timeCPython(data)
	if why != "" {
		b.Log(why)
	}
	var events, entries int
	best := time.Duration(math.MaxInt64)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		start := time.Now()
		s, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{})
		if err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(start))
		events += len(s.Events)
		entries += s.Counts.Entries
	}
	if py > 0 {
		if again, _ := timeCPython(data); again > 0 {
			py = min(py, again)
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(events)/sec, "events/s")
	b.ReportMetric(float64(entries)/sec, "entries/s")
	b.ReportMetric(best.Seconds()*1e3, "best-ms")
	if py > 0 {
		b.ReportMetric(py.Seconds()*1e3, "cpython-ms")
		b.ReportMetric(best.Seconds()/py.Seconds(), "x-cpython")
	}
}

// BenchmarkReadFrames reads again, as a report naming a failing
// allocation does, the stack frames of one alloc entry of the shared
// full-step snapshot (the synthetic fixture when absent): the middle
// one, whose read stops halfway, and the last, which reads the whole
// input. best-ms is the best read of each.
//
//	go test -run '^$' -bench ReadFrames -benchmem ./trace/
func BenchmarkReadFrames(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(sharedTraces, "transformer-ctx128-fullstep.pickle"))
	if err != nil {
		b.Logf("shared traces absent (%v): reading the synthetic fixture", err)
		data = readFixture(b, "synthetic-p4.pickle")
	}
	s := mustSnapshot(b, data, SnapshotOptions{})
	var allocs []int
	for i, ref := range s.frames {
		if ref.n > 0 {
			allocs = append(allocs, i)
		}
	}
	if len(allocs) == 0 {
		b.Skip("no entry has frames")
	}
	for _, at := range []struct {
		name  string
		entry int
	}{{"middle", allocs[len(allocs)/2]}, {"last", allocs[len(allocs)-1]}} {
		b.Run(at.name, func(b *testing.B) {
			best := time.Duration(math.MaxInt64)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				start := time.Now()
				m, err := s.ReadFrames(bytes.NewReader(data), []int{at.entry})
				if err != nil || len(m[at.entry]) == 0 {
					b.Fatalf("entry %d: %v, %d frames", at.entry, err, len(m[at.entry]))
				}
				best = min(best, time.Since(start))
			}
			b.ReportMetric(best.Seconds()*1e3, "best-ms")
		})
	}
}
