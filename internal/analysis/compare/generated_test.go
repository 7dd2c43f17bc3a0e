package compare

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// Whole pages need no more than PyTorch's model on generated workloads
// (issue 23's target): on seeds 1–11 of six workloads and the
// transformer's 3, as `gpumem synth -workload W -seed N` writes them
// (2,000 allocations), `adaptive-pages`' smallest capacity is at or below
// the `torch` model's. docs/results/generated-workloads.md and the design
// (§5.3) give the figures; held-out seeds 12–31 are measured there too but
// not pinned, so a rule tuned to this test shows there.
func TestWholePagesNeedNoMoreThanTheTorchModelOnGeneratedWorkloads(t *testing.T) {
	if raceDetector {
		t.Skip("checked by go test without -race: 69 capacity searches take minutes under the race detector")
	}
	if testing.Short() {
		t.Skip("69 capacity searches; run without -short")
	}
	t.Parallel()
	type tr struct {
		workload string
		seeds    int
	}
	for _, w := range []tr{{"capture", 11}, {"churn", 11}, {"growth", 11}, {"llm-server", 11}, {"metadata", 11}, {"multistream", 11}, {"transformer", 3}} {
		t.Run(w.workload, func(t *testing.T) {
			t.Parallel()
			for seed := uint64(1); seed <= uint64(w.seeds); seed++ {
				name := fmt.Sprintf("%s-%d", w.workload, seed)
				res, err := Run(context.Background(), Source{Name: name, Events: synthEvents(t, w.workload, seed, trace.SynthParams{})},
					Options{Policies: []string{AdaptivePages, Torch}})
				if err != nil {
					t.Fatal(err)
				}
				pages, torch := res.Policies[0], res.Policies[1]
				if pages.Name != AdaptivePages || torch.Name != Torch {
					t.Fatalf("%s: policies %s, %s in that order, want %s, %s", name, pages.Name, torch.Name, AdaptivePages, Torch)
				}
				if pages.MinCapacity == 0 || torch.MinCapacity == 0 {
					t.Fatalf("%s: no smallest capacity (%d, %d)", name, pages.MinCapacity, torch.MinCapacity)
				}
				if pages.MinCapacity > torch.MinCapacity {
					t.Errorf("%s: whole pages need %d MiB, the torch model %d MiB", name, pages.MinCapacity>>20, torch.MinCapacity>>20)
				}
			}
		})
	}
}
