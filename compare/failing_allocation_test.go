package compare

import (
	"context"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/trace"
)

// The allocation a policy fails at is named as the snapshot has it: its
// device_traces entry (not the replay's event number, which the prelude
// and entries that emit nothing shift), its size and PyTorch's stream; an
// allocation the prelude rebuilt says so.
func TestOutOfMemoryNamesTheSnapshotEntry(t *testing.T) {
	js := `{"segments": [{"device": 0, "address": 1048576, "total_size": 2097152, "stream": 7, "blocks": [{"address": 1048576, "size": 1048576, "state": "active_allocated"}]}],
 "device_traces": [[
  {"action": "segment_alloc", "addr": 8388608, "size": 4194304, "stream": 7, "time_us": 1},
  {"action": "alloc", "addr": 8388608, "size": 2097152, "stream": 7, "time_us": 2},
  {"action": "free_requested", "addr": 8388608, "size": 2097152, "stream": 7, "time_us": 3},
  {"action": "alloc", "addr": 16777216, "size": 33554432, "stream": 7, "time_us": 4}]]}`
	snap, err := trace.ReadSnapshot(strings.NewReader(js), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromSnapshot("tiny", snap)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive, Torch}, SkipCapacity: true, Capacity: 24 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Policies {
		a := p.Verdict.Allocation
		if p.Verdict.Fits || a == nil || a.Entry == nil || *a.Entry != 3 || a.Size != 32<<20 || a.PyTorchStream == nil || *a.PyTorchStream != 7 || a.Prelude {
			t.Fatalf("%s: verdict %+v, allocation %+v; want entry 3, 32 MiB, PyTorch stream 7", p.Name, p.Verdict, a)
		}
		if s := a.String(); !strings.Contains(s, "device_traces entry 3") || !strings.Contains(s, "32.00 MiB") || !strings.Contains(s, "0x7") {
			t.Fatalf("%s: %q", p.Name, s)
		}
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil || !strings.Contains(text.String(), "out of memory at device_traces entry 3 (event") {
		t.Fatalf("the report does not name the entry (%v):\n%s", err, text.String())
	}
	// At 512 KiB the prelude's 1 MiB block itself fails: said as such.
	c, err = Run(context.Background(), src, Options{Policies: []string{Adaptive}, SkipCapacity: true, Capacity: 1 << 19})
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Policies[0].Verdict.Allocation; a == nil || !a.Prelude || a.Entry != nil || !strings.Contains(a.String(), "before the trace's first entry") {
		t.Fatalf("the prelude's block: %+v", a)
	}
}
