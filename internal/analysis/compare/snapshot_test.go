package compare

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// The snapshot of a policy's replay reads back through trace.ReadSnapshot
// to the trace's allocations (every alloc, every free, no prelude).
func TestWriteSnapshotOfAReplayReadsBackToItsAllocations(t *testing.T) {
	events, err := trace.Synth("multistream", 1, trace.SynthParams{Allocs: 300})
	if err != nil {
		t.Fatal(err)
	}
	var evs []trace.Event
	allocs := 0
	for e := range events {
		evs = append(evs, e)
		if e.Op == trace.OpAlloc {
			allocs++
		}
	}
	var buf bytes.Buffer
	if err := WriteSnapshot(context.Background(), Source{Name: "multistream", Events: evs}, Adaptive, Options{}, &buf); err != nil {
		t.Fatal(err)
	}
	s, err := trace.ReadSnapshot(bytes.NewReader(buf.Bytes()), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Counts.Allocs < allocs || s.Counts.Prelude != 0 || s.Segments == 0 {
		t.Fatalf("read back %d allocs (trace: %d), %d prelude, %d segments", s.Counts.Allocs, allocs, s.Counts.Prelude, s.Segments)
	}
	if err := WriteSnapshot(context.Background(), Source{Events: evs}, Torch, Options{}, &buf); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("WriteSnapshot(torch): %v, want ErrUnknownPolicy", err)
	}
}

// Every gpumem policy can be drawn (adaptive-pages-norelocate was
// refused), none of PyTorch's.
func TestEveryGpumemPolicyCanBeDrawn(t *testing.T) {
	want := 0
	for _, p := range Policies() {
		if !isTorch(p) {
			want++
		}
	}
	got := SnapshotPolicies()
	if len(got) != want {
		t.Fatalf("SnapshotPolicies = %v, want the %d gpumem policies of %v", got, want, Policies())
	}
	events := []trace.Event{{Op: trace.OpAlloc, T: 0, ID: 1, Size: 3 << 20}, {Op: trace.OpFree, T: 1, ID: 1}}
	for _, p := range got {
		var buf bytes.Buffer
		if err := WriteSnapshot(context.Background(), Source{Name: "one", Events: events}, p, Options{}, &buf); err != nil || buf.Len() == 0 {
			t.Errorf("WriteSnapshot(%s): %v, %d bytes", p, err, buf.Len())
		}
	}
}
