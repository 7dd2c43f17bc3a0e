package compare

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

const causeMiB = 1 << 20

// causeTrace builds a native trace from (op, id, MiB, stream) steps, one
// microsecond apart; a capture step takes its phase as op and the graph as
// id.
func causeTrace(steps ...[4]any) Source {
	var events []trace.Event
	for i, s := range steps {
		e := trace.Event{T: int64(i), Stream: s[3].(int)}
		switch op := s[0].(string); op {
		case "alloc":
			e.Op, e.ID, e.Size = trace.OpAlloc, uint64(s[1].(int)), uint64(s[2].(int))*causeMiB
		case "free":
			e.Op, e.ID = trace.OpFree, uint64(s[1].(int))
		default:
			e.Op, e.Phase, e.Graph = trace.OpCapture, op, s[1].(int)
		}
		events = append(events, e)
	}
	return Source{Name: "fixture", Events: events}
}

func verdictOf(t *testing.T, c *Comparison, policy string) *Verdict {
	t.Helper()
	for _, p := range c.Policies {
		if p.Name == policy {
			if p.Verdict == nil {
				t.Fatalf("%s: no verdict", policy)
			}
			return p.Verdict
		}
	}
	t.Fatalf("no policy %s", policy)
	return nil
}

// Two 40 MiB tensors live at once cannot fit 64 MiB under any allocator:
// exhaustion, shed at least the 16 MiB the peak passes the capacity by,
// with both tensors listed as live (the one live at the failure) and no
// policy offered instead.
func TestOutOfMemoryCauseExhaustion(t *testing.T) {
	src := causeTrace(
		[4]any{"alloc", 1, 8, 0}, [4]any{"alloc", 2, 40, 0}, [4]any{"free", 1, 0, 0},
		[4]any{"alloc", 3, 40, 0}, [4]any{"free", 2, 0, 0}, [4]any{"free", 3, 0, 0})
	c, err := Run(context.Background(), src, Options{Policies: []string{Torch, Adaptive}, SkipCapacity: true, Capacity: 64 * causeMiB})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Torch, Adaptive} {
		o := verdictOf(t, c, name).OutOfMemory
		if o == nil || o.Cause != CauseExhaustion || o.Shed != 16*causeMiB || o.Event != 3 || o.Live != 40*causeMiB || o.Request != 40*causeMiB {
			t.Fatalf("%s: %+v; want exhaustion at event 3, shed 16 MiB", name, o)
		}
		if o.LiveAllocations != 1 || len(o.LargestLive) != 1 || o.LargestLive[0].Event != 1 || o.LargestLive[0].Size != 40*causeMiB || len(o.FitsInstead) != 0 {
			t.Fatalf("%s: live %d %+v, fits instead %v; want the 40 MiB of event 1, none", name, o.LiveAllocations, o.LargestLive, o.FitsInstead)
		}
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cause: exhaustion", "shed at least 16.00 MiB", "the 1 largest of the 1 allocations live then", "40.00 MiB  event 1, stream 0"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("the report lacks %q:\n%s", want, text.String())
		}
	}
}

// A 200 MiB segment cut into ten 20 MiB blocks, every other one freed:
// 100 MiB live and 140 MiB free under 240 MiB, but PyTorch's model holds
// the free half as 20 MiB holes in a segment it cannot release, and 40 MiB
// on the device, so 60 MiB fails: fragmentation. Expandable segments unmap
// the holes' pages and map them again where the request needs them, and
// gpumem's granular pages do the same: both fit, each checked by a replay
// of its own since the comparison ran only the torch policy.
func TestOutOfMemoryCauseFragmentation(t *testing.T) {
	steps := [][4]any{{"alloc", 100, 200, 0}, {"free", 100, 0, 0}}
	for i := 1; i <= 10; i++ {
		steps = append(steps, [4]any{"alloc", i, 20, 0})
	}
	for i := 1; i <= 10; i += 2 {
		steps = append(steps, [4]any{"free", i, 0, 0})
	}
	steps = append(steps, [4]any{"alloc", 50, 60, 0})
	src := causeTrace(steps...)
	c, err := Run(context.Background(), src, Options{Policies: []string{Torch}, SkipCapacity: true, Capacity: 240 * causeMiB})
	if err != nil {
		t.Fatal(err)
	}
	o := verdictOf(t, c, Torch).OutOfMemory
	if o == nil || o.Cause != CauseFragmentation || o.Live != 100*causeMiB || o.FreeOnDevice != 40*causeMiB || o.FreeInPages != 100*causeMiB || o.LargestFree != 20*causeMiB || o.Held != 0 {
		t.Fatalf("torch: %+v; want fragmentation with 100 MiB live, 40 MiB free on the device, 100 MiB in 20 MiB holes", o)
	}
	if strings.Join(o.FitsInstead, ",") != Adaptive+","+TorchExpandable {
		t.Fatalf("fits instead %v; want adaptive and torch-expandable, each replayed", o.FitsInstead)
	}
	if o.LiveAllocations != 5 || len(o.LargestLive) != 5 || o.LargestLive[0].Size != 20*causeMiB {
		t.Fatalf("live %d %+v; want the five 20 MiB blocks", o.LiveAllocations, o.LargestLive)
	}
	// With the policies that fit in the comparison, they are named from
	// its own verdicts.
	c, err = Run(context.Background(), src, Options{Policies: []string{Torch, TorchExpandable}, SkipCapacity: true, Capacity: 240 * causeMiB})
	if err != nil {
		t.Fatal(err)
	}
	if o := verdictOf(t, c, Torch).OutOfMemory; strings.Join(o.FitsInstead, ",") != TorchExpandable {
		t.Fatalf("fits instead %v; want torch-expandable", o.FitsInstead)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cause: fragmentation", "40.00 MiB free on the device, 100.00 MiB free in reserved memory (largest free block 20.00 MiB)", "Fits instead at 240.00 MiB (each replayed there): torch-expandable."} {
		if !strings.Contains(strings.Join(strings.Fields(text.String()), " "), want) {
			t.Fatalf("the report lacks %q:\n%s", want, text.String())
		}
	}
}

// A graph captured on stream 1 (after its warmup) allocates and frees
// 60 MiB and lives on: PyTorch's model keeps the segment in the graph's
// private pool, which its out-of-memory path leaves alone, and gpumem keeps
// the slice the graph binds, so 80 MiB on stream 0 fails under 120 MiB with
// nothing live: cache, 60 MiB held. Released, it would fit.
func TestOutOfMemoryCauseCache(t *testing.T) {
	src := causeTrace(
		[4]any{trace.PhasePrepare, 1, 0, 1}, [4]any{"alloc", 3, 60, 1}, [4]any{"free", 3, 0, 1},
		[4]any{trace.PhaseBegin, 1, 0, 1}, [4]any{"alloc", 1, 60, 1}, [4]any{"free", 1, 0, 1}, [4]any{trace.PhaseEnd, 1, 0, 1},
		[4]any{"alloc", 2, 80, 0}, [4]any{"free", 2, 0, 0})
	c, err := Run(context.Background(), src, Options{Policies: []string{Torch, Adaptive}, SkipCapacity: true, Capacity: 120 * causeMiB})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Torch, Adaptive} {
		o := verdictOf(t, c, name).OutOfMemory
		if o == nil || o.Cause != CauseCache || o.Held != 60*causeMiB || o.Live != 0 || o.FreeOnDevice != 60*causeMiB || o.Event != 7 || o.Refusal != "" {
			t.Fatalf("%s: %+v; want cache at event 7, 60 MiB held, 60 MiB free on the device", name, o)
		}
		if o.LiveAllocations != 0 || len(o.LargestLive) != 0 {
			t.Fatalf("%s: live %d %+v; want none", name, o.LiveAllocations, o.LargestLive)
		}
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(text.String()), " "), "cause: cache. 0 B live and 80.00 MiB requested fit in 120.00 MiB, and the request would fit in the 60.00 MiB free on the device once the 60.00 MiB") {
		t.Fatalf("the report does not explain the cache:\n%s", text.String())
	}
	// JSON: the explanation's fields under verdict.out_of_memory.
	var buf strings.Builder
	if err := c.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Policies []struct {
			Verdict struct {
				OutOfMemory map[string]any `json:"out_of_memory"`
			} `json:"verdict"`
		} `json:"policies"`
	}
	if err := json.Unmarshal([]byte(buf.String()), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Policies[0].Verdict.OutOfMemory
	for _, k := range []string{"cause", "live_bytes", "request_bytes", "free_on_device_bytes", "free_in_pages_bytes", "held_bytes", "largest_live", "live_allocations"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("out_of_memory lacks %q: %v", k, m)
		}
	}
	if m["cause"] != CauseCache || m["largest_live"] == nil {
		t.Fatalf("out_of_memory %v; want cause cache and largest_live [] (not null)", m)
	}
}

// The shared snapshots' verdicts read right: the forward pass at 18 GiB
// (peak live 18.02 GiB) is exhaustion even where PyTorch's model fails
// early for want of a block, shed 24 MiB; the compression run at 4.2 GiB
// (4509715661 B, as -capacity 4.2GiB reads; peak live 4.05 GiB) is fragmentation under PyTorch's defaults, with
// expandable segments and gpumem's adaptive policy fitting instead.
func TestOutOfMemoryCauseOnSharedSnapshots(t *testing.T) {
	fwd := sharedSource(t, "transformer-ctx128-forward.pickle")
	c, err := Run(context.Background(), fwd, Options{Policies: []string{Torch}, SkipCapacity: true, Capacity: 18 << 30})
	if err != nil {
		t.Fatal(err)
	}
	o := verdictOf(t, c, Torch).OutOfMemory
	if o == nil || o.Cause != CauseExhaustion || o.Shed != c.PeakLive-18<<30 || o.Live+o.Request > 18<<30 || len(o.LargestLive) != largestLiveShown {
		t.Fatalf("forward at 18 GiB: %+v", o)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil || !strings.Contains(strings.Join(strings.Fields(text.String()), " "), "fit, but the peak is still to come") {
		t.Fatalf("forward at 18 GiB (%v):\n%s", err, text.String())
	}
	comp := sharedSource(t, "llm-compression-empty-cache.pickle")
	c, err = Run(context.Background(), comp, Options{Policies: []string{Torch}, SkipCapacity: true, Capacity: 4509715661})
	if err != nil {
		t.Fatal(err)
	}
	o = verdictOf(t, c, Torch).OutOfMemory
	if o == nil || o.Cause != CauseFragmentation || strings.Join(o.FitsInstead, ",") != Adaptive+","+TorchExpandable || o.LargestFree == 0 || o.LargestFree >= o.Request {
		t.Fatalf("compression at 4.2 GiB: %+v", o)
	}
}
