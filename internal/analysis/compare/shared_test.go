package compare

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// sharedSource reads one shared PyTorch snapshot, or skips when ../shared is
// not beside the checkout.
func sharedSource(t *testing.T, name string) Source {
	t.Helper()
	path := filepath.Join("..", "..", "..", "..", "shared", "traces", name)
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("shared snapshot %s not available (../shared beside the checkout): %v", name, err)
	}
	defer f.Close()
	snap, err := trace.ReadSnapshot(f, trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := FromSnapshot(name, snap)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// The figures the replay tool exists to show: on every shared snapshot the
// granular adaptive memory needs less than PyTorch reserved, at its smallest
// capacity no more than it does with its pages the largest page (pool PL31:
// 1.0007, 1.0012 and 1.0073 × peak live; issue 23 asks for the U-Net
// within 1.01; with tiled pages they were 1.000, 1.003 and 1.046), and its
// peak reserved stays below PyTorch's.
func TestAdaptiveNeedsLessThanPyTorchReservedOnSharedSnapshots(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxOverPeak float64
	}{
		{"transformer-ctx128-fullstep.pickle", 1.001},
		{"transformer-ctx128-forward.pickle", 1.0015},
		{"unet-snapshot.pickle", 1.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := sharedSource(t, tc.name)
			c, err := Run(context.Background(), src, Options{Policies: []string{Adaptive}})
			if err != nil {
				t.Fatal(err)
			}
			p := c.Policies[0]
			if p.FailedAllocs != 0 || p.MinCapacity == 0 {
				t.Fatalf("adaptive failed %d allocations; min capacity %d", p.FailedAllocs, p.MinCapacity)
			}
			if p.MinCapacityOver > tc.maxOverPeak {
				t.Errorf("smallest capacity %.4f × peak live, want ≤ %.4f", p.MinCapacityOver, tc.maxOverPeak)
			}
			if p.MinCapacity >= src.PyTorch.PeakReserved {
				t.Errorf("smallest capacity %d not below PyTorch's recorded reserve %d", p.MinCapacity, src.PyTorch.PeakReserved)
			}
			if p.PeakReserved >= src.PyTorch.PeakReserved {
				t.Errorf("peak reserved %d not below PyTorch's recorded reserve %d", p.PeakReserved, src.PyTorch.PeakReserved)
			}
		})
	}
}

// Whole pages beat PyTorch (issue 13): on every shared snapshot
// adaptive-pages, the adaptive memory on storage without virtual memory,
// reserves no more than PyTorch did in the trace's window, at unlimited
// capacity and at its smallest capacity; and where relocation matters (it
// ran at the smallest capacity) it needs less than the same memory without
// relocation.
func TestWholePagesNeedNoMoreThanPyTorchReservedOnSharedSnapshots(t *testing.T) {
	for _, name := range []string{"transformer-ctx128-fullstep.pickle", "transformer-ctx128-forward.pickle", "unet-snapshot.pickle"} {
		t.Run(name, func(t *testing.T) {
			src := sharedSource(t, name)
			c, err := Run(context.Background(), src, Options{Policies: []string{AdaptivePages, AdaptivePagesNoRelocate}})
			if err != nil {
				t.Fatal(err)
			}
			pages, norelocate := c.Policies[0], c.Policies[1]
			pytorch := src.PyTorch.PeakReserved
			for _, p := range []PolicyResult{pages, norelocate} {
				if p.FailedAllocs != 0 || p.MinCapacity == 0 {
					t.Fatalf("%s failed %d allocations; min capacity %d", p.Name, p.FailedAllocs, p.MinCapacity)
				}
				if p.PeakReserved > pytorch {
					t.Errorf("%s peak reserved %d above PyTorch's recorded reserve %d", p.Name, p.PeakReserved, pytorch)
				}
				if p.MinCapacity > pytorch {
					t.Errorf("%s smallest capacity %d above PyTorch's recorded reserve %d", p.Name, p.MinCapacity, pytorch)
				}
			}
			if pages.MinCapacity > norelocate.MinCapacity {
				t.Errorf("relocation raised the smallest capacity: %d, %d without", pages.MinCapacity, norelocate.MinCapacity)
			}
			if pages.MinCapacityRelocations > 0 && pages.MinCapacity >= norelocate.MinCapacity {
				t.Errorf("%d relocations at the smallest capacity %d bought nothing: %d without relocation", pages.MinCapacityRelocations, pages.MinCapacity, norelocate.MinCapacity)
			}
			t.Logf("PyTorch %d; %s %d / %d; %s %d / %d (unlimited / smallest)", pytorch, pages.Name, pages.PeakReserved, pages.MinCapacity, norelocate.Name, norelocate.PeakReserved, norelocate.MinCapacity)
		})
	}
}

// Issue 23's target for granules: on every shared snapshot adaptive needs
// no larger a device than PyTorch under any setting of advise's grid
// (expandable segments needed 2 MiB less on the forward pass and the same
// on the U-Net while the granular arena tiled its page sizes; with the
// largest page, pool PL31, 18,478 vs 18,500 MiB and 104 vs 108 MiB).
func TestAdaptiveNeedsNoMoreThanAnyAdvisedSettingOnSharedSnapshots(t *testing.T) {
	if raceDetector {
		t.Skip("checked by go test without -race: the grid's 14 replays and searches per snapshot take minutes under the race detector")
	}
	for _, name := range []string{"transformer-ctx128-forward.pickle", "transformer-ctx128-fullstep.pickle", "unet-snapshot.pickle"} {
		t.Run(name, func(t *testing.T) {
			a, err := Advise(context.Background(), sharedSource(t, name), Options{})
			if err != nil {
				t.Fatal(err)
			}
			adaptive := policyOf(t, a, Adaptive)
			for _, p := range a.Comparison.Policies {
				if isTorch(p.Name) && p.MinCapacity > 0 && adaptive.MinCapacity > p.MinCapacity {
					t.Errorf("adaptive needs %d MiB, %s %d MiB", adaptive.MinCapacity>>20, p.Name, p.MinCapacity>>20)
				}
			}
		})
	}
}

// The torch model places its segments where the recording put them
// (Source.TorchRecorded), so best fit breaks ties between equal-size free
// blocks by PyTorch's own addresses, as PyTorch does: on the compression
// snapshot, whose real addresses fall over the run, the model reserved
// 7.1 % above PyTorch's recorded peak with addresses of its own. Its peak
// is PyTorch's to the byte once the recording's addresses are used.
func TestTorchModelReservesWhatPyTorchRecordedWithTheRecordedAddresses(t *testing.T) {
	src := sharedSource(t, "llm-compression-empty-cache.pickle")
	if len(src.TorchRecorded) == 0 {
		t.Fatal("the snapshot's segment placements did not reach the source")
	}
	c, err := Run(context.Background(), src, Options{Policies: []string{"torch"}, SkipCapacity: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Policies[0].PeakReserved, src.PyTorch.PeakReserved; got != want {
		t.Fatalf("torch model peak reserved %d, PyTorch recorded %d (%+.2f%%)", got, want, 100*(float64(got)/float64(want)-1))
	}
	if p := c.PyTorch; p.ModelError == nil || *p.ModelError != 0 || p.ModelPeakReserved != p.PeakReserved {
		t.Fatalf("pytorch.model_peak_reserved_bytes %d, model_error %v; want %d and 0", p.ModelPeakReserved, p.ModelError, p.PeakReserved)
	}
	if src.PyTorch.ModelError != nil {
		t.Fatal("the comparison wrote its model accuracy into the source's PyTorch figures")
	}
	src.TorchRecorded = nil
	c, err = Run(context.Background(), src, Options{Policies: []string{"torch"}, SkipCapacity: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Policies[0].PeakReserved == src.PyTorch.PeakReserved {
		t.Fatal("without the recorded addresses the model reserves PyTorch's peak too: the test no longer shows what the addresses decide")
	}
}

// A snapshot whose trace holds no allocation (the segments list) has no
// model accuracy: nothing for a model to replay.
func TestNoModelAccuracyWithoutAnAllocationInTheTrace(t *testing.T) {
	src := sharedSource(t, "diffusion-device1-segments-list.pkl")
	c, err := Run(context.Background(), src, Options{Policies: []string{"torch"}, SkipCapacity: true})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.PyTorch; p.ModelError != nil || p.ModelPeakReserved != 0 {
		t.Fatalf("model_error set: %v, model_peak_reserved_bytes %d on a trace without allocations; want none", p.ModelError != nil, p.ModelPeakReserved)
	}
	var b strings.Builder
	if err := c.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "the trace holds no allocation: no model accuracy") {
		t.Fatalf("the report does not say there is no model accuracy:\n%s", b.String())
	}
}
