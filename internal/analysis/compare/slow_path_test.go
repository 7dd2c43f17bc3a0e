package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// eventLog builds a hand-written trace: one event per call, a microsecond
// apart, on stream 0.
type eventLog []trace.Event

func (l *eventLog) alloc(id, size uint64) {
	*l = append(*l, trace.Event{Op: trace.OpAlloc, T: int64(len(*l)), ID: id, Size: size})
}

func (l *eventLog) free(id uint64) {
	*l = append(*l, trace.Event{Op: trace.OpFree, T: int64(len(*l)), ID: id})
}

// A 20 MiB block is freed (its segment stays cached) and a 30 MiB one
// asked for on a 40 MiB device: PyTorch's allocator finds no cached block
// large enough, is refused a 30 MiB segment (20 + 30 > 40), releases the
// cached 20 MiB segment and retries — one num_alloc_retries, two
// cudaMalloc calls and one cudaFree, counted by hand from
// CUDACachingAllocator's malloc path. The verdict's slow path says so, and
// the JSON carries only the figures each kind of policy has: PyTorch's
// counters for the model, cleanups and relocations for gpumem.
func TestSlowPathCountsPyTorchsRetryAndDeviceCalls(t *testing.T) {
	var l eventLog
	l.alloc(1, 20<<20)
	l.free(1)
	l.alloc(2, 30<<20)
	l.free(2)
	c, err := Run(context.Background(), Source{Name: "retry", Events: l}, Options{
		Policies: []string{defaultsPolicy, Adaptive}, Capacity: 40 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	torch, adaptive := c.Policies[0], c.Policies[1]
	if torch.Verdict == nil || !torch.Verdict.Fits {
		t.Fatalf("the model does not fit 40 MiB: %+v", torch.Verdict)
	}
	s := torch.Verdict.SlowPath
	if s == nil || s.AllocRetries == nil || s.DeviceAllocs == nil || s.DeviceFrees == nil {
		t.Fatalf("the model's slow path is not measured: %+v", s)
	}
	if *s.AllocRetries != 1 || *s.DeviceAllocs != 2 || *s.DeviceFrees != 1 {
		t.Fatalf("at 40 MiB: %d retries, %d cudaMalloc, %d cudaFree; want 1, 2, 1", *s.AllocRetries, *s.DeviceAllocs, *s.DeviceFrees)
	}
	if s.Cleanups != nil || s.Relocations != nil || s.BytesMoved != nil {
		t.Fatalf("the model reports gpumem's figures: %+v", s)
	}
	// At the smallest capacity, 30 MiB (the peak live bytes), the same
	// retry is what makes it fit.
	if m := torch.MinCapacitySlowPath; torch.MinCapacity != 30<<20 || m == nil || m.AllocRetries == nil || *m.AllocRetries != 1 {
		t.Fatalf("at the smallest capacity %d: slow path %+v, want the retry (30 MiB fits only after the 20 MiB segment goes back)", torch.MinCapacity, m)
	}
	g := adaptive.Verdict.SlowPath
	if g == nil || g.Cleanups == nil || g.Relocations == nil || g.BytesMoved == nil || g.AllocRetries != nil || g.DeviceAllocs != nil {
		t.Fatalf("gpumem's slow path: %+v, want cleanups and relocations only", g)
	}

	var js bytes.Buffer
	if err := c.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Policies []struct {
			Name    string `json:"name"`
			Verdict struct {
				SlowPath map[string]json.RawMessage `json:"slow_path"`
				Margin   *int64                     `json:"margin_bytes"`
			} `json:"verdict"`
			MinSlow map[string]json.RawMessage `json:"min_capacity_slow_path"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(js.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		defaultsPolicy: {"num_alloc_retries", "num_device_alloc", "num_device_free"},
		Adaptive:       {"cleanups", "relocations", "bytes_moved"},
	}
	for _, p := range out.Policies {
		keys := want[p.Name]
		for _, m := range []map[string]json.RawMessage{p.Verdict.SlowPath, p.MinSlow} {
			if len(m) != len(keys) {
				t.Fatalf("%s: slow path keys %v, want exactly %v (absent, not 0, where not measured)", p.Name, m, keys)
			}
			for _, k := range keys {
				if _, ok := m[k]; !ok {
					t.Fatalf("%s: slow path %v lacks %s", p.Name, m, k)
				}
			}
		}
		if p.Verdict.Margin == nil {
			t.Fatalf("%s: no margin_bytes in the verdict", p.Name)
		}
	}
	if *out.Policies[0].Verdict.Margin != int64(40<<20)-int64(torch.MinDevice) {
		t.Fatalf("margin %d, want the capacity less the smallest device %d", *out.Policies[0].Verdict.Margin, torch.MinDevice)
	}

	var text bytes.Buffer
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "the slow path") || !strings.Contains(text.String(), "cudaMalloc") {
		t.Fatalf("no slow-path table in the report:\n%s", text.String())
	}
}
