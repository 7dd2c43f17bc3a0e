package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// A window that opens with an empty_cache: the comparison's PyTorch figure
// is the window's own peak, not the trace's (whose reserve belonged to an
// earlier experiment), and the torch model, replaying from empty, agrees
// with it; the text says both.
func TestPyTorchFigureIsTheWindowsOwnAfterAnEmptyCache(t *testing.T) {
	const MiB = 1 << 20
	type m = map[string]any
	var entries []m
	for i := range 40 {
		entries = append(entries, m{"action": "segment_free", "addr": 0x90_0000_0000 + i<<32, "size": 100 * MiB, "stream": 0, "time_us": i})
	}
	// The window: PyTorch's own segment sizes for each request (20 MiB for
	// 1–10 MiB, the request rounded to 2 MiB above).
	addr := uint64(0x10_0000_0000)
	var segments []m
	for i, size := range []uint64{4 * MiB, 18 * MiB, 30 * MiB} {
		segSize := uint64(20 * MiB)
		if size >= 10*MiB {
			segSize = (size + 2*MiB - 1) / (2 * MiB) * (2 * MiB)
		}
		entries = append(entries,
			m{"action": "segment_alloc", "addr": addr, "size": segSize, "stream": 0, "time_us": 100 + 3*i},
			m{"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": 101 + 3*i})
		segments = append(segments, m{"device": 0, "address": addr, "total_size": segSize, "stream": 0, "segment_type": "large",
			"blocks": []m{{"address": addr, "size": size, "requested_size": size, "state": "active_allocated"}}})
		addr += 1 << 32
	}
	data, err := json.Marshal(m{"segments": segments, "device_traces": [][]m{entries}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := trace.ReadSnapshot(bytes.NewReader(data), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromSnapshot("emptied", snap)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Run(context.Background(), src, Options{Policies: []string{Torch}, SkipCapacity: true})
	if err != nil {
		t.Fatal(err)
	}
	const window = 20*MiB + 18*MiB + 30*MiB
	if c.PyTorch.PeakReserved != window || *c.Recorded != window || c.PyTorch.TracePeakReserved != 4000*MiB {
		t.Fatalf("PyTorch peak %d (want the window's %d), trace peak %d", c.PyTorch.PeakReserved, window, c.PyTorch.TracePeakReserved)
	}
	model := float64(c.Policies[0].PeakReserved)
	if d := model/window - 1; d > 0.02 || d < -0.02 {
		t.Fatalf("torch model %v B, PyTorch's window %d B", model, window)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PyTorch reserved 68.00 MiB at its peak from the trace's first allocation on", "belongs to an earlier experiment", "+0.00 % against PyTorch's"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("text lacks %q:\n%s", want, text.String())
		}
	}
}
