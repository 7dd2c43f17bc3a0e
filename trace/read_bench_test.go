package trace

import (
	"bytes"
	"context"
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
// events, and reports x-cpython: gpumem's mean time per read over CPython's
// best time to merely unpickle the same bytes, both measured in this run
// (so the ratio, not the absolute time, carries to another machine; the
// mean against the best leans against gpumem). Without python3 the ratio is
// left out and a message says so.
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
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		s, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{})
		if err != nil {
			b.Fatal(err)
		}
		events += len(s.Events)
		entries += s.Counts.Entries
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(events)/sec, "events/s")
	b.ReportMetric(float64(entries)/sec, "entries/s")
	if py > 0 {
		perOp := b.Elapsed().Seconds() / float64(b.N)
		b.ReportMetric(py.Seconds()*1e3, "cpython-ms")
		b.ReportMetric(perOp/py.Seconds(), "x-cpython")
	}
}
