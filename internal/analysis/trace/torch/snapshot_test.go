package torch

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// sharedTraces is where the real PyTorch snapshots live, relative to the
// package directory (the test's working directory).
var sharedTraces = filepath.Join("..", "..", "..", "..", "..", "shared", "traces")

// TestModelReproducesPyTorchReservedBytesOnSharedTraces replays every shared
// snapshot's converted events (prelude included) through the model and
// compares with what PyTorch recorded, under the settings the snapshot
// recorded (allocator_settings). From an empty allocator,
// the peak reserved bytes must be within 2 % (the notes' bar). Starting from
// the segments PyTorch held when the window began (Config.Cached, the notes'
// protocol), the reserved bytes before the window and at every segment entry
// must be within 2 %, and the segments allocated inside the window must have
// PyTorch's sizes in PyTorch's order.
func TestModelReproducesPyTorchReservedBytesOnSharedTraces(t *testing.T) {
	for _, name := range []string{"transformer-ctx128-forward.pickle", "transformer-ctx128-fullstep.pickle", "unet-snapshot.pickle"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(sharedTraces, name))
			if errors.Is(err, os.ErrNotExist) {
				t.Skipf("shared PyTorch traces not present at %s (they live outside the repository)", sharedTraces)
			}
			if err != nil {
				t.Fatal(err)
			}
			s, err := trace.ReadSnapshot(bytes.NewReader(data), trace.SnapshotOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// The settings PyTorch recorded (the two transformer
			// snapshots record the defaults; the U-Net's PyTorch recorded
			// none, which means the defaults).
			var settings Settings
			if s.AllocatorSettings != nil {
				if settings, err = SettingsFromSnapshot(s.AllocatorSettings); err != nil {
					t.Fatal(err)
				}
			} else if name != "unet-snapshot.pickle" {
				t.Fatal("the snapshot's allocator_settings were not read")
			}
			empty, err := Replay(slices.Values(s.Events), Config{Settings: settings})
			if err != nil {
				t.Fatal(err)
			}
			var cached []CachedSegment
			var cachedBytes uint64
			for _, seg := range s.StartSegments {
				cached = append(cached, CachedSegment{Size: seg.Size, Stream: seg.Stream, Small: seg.Small, Addr: seg.Address})
				cachedBytes += seg.Size
			}
			r, err := Replay(slices.Values(s.Events), Config{Cached: cached, Settings: settings})
			if err != nil {
				t.Fatal(err)
			}
			within := func(what string, model, torch uint64) {
				t.Helper()
				d := float64(model) - float64(torch)
				if d < 0 {
					d = -d
				}
				if d > 0.02*float64(torch) {
					t.Fatalf("%s: model %d, PyTorch %d (%.2f %% off)", what, model, torch, 100*d/float64(torch))
				}
			}
			within("peak reserved from empty", empty.PeakReserved, s.PeakReserved)
			within("peak reserved from start segments", r.PeakReserved, s.PeakReserved)

			// reservedAfter[i] is the model's reserved bytes after event i.
			reservedAfter := make([]uint64, len(s.Events))
			cur := cachedBytes
			k := 0
			for i := range s.Events {
				for ; k < len(r.Segments) && r.Segments[k].Event == i; k++ {
					if r.Segments[k].Release {
						cur -= r.Segments[k].Size
					} else {
						cur += r.Segments[k].Size
					}
				}
				reservedAfter[i] = cur
			}
			prelude := s.Counts.Prelude
			if prelude > 0 {
				within("reserved before the window", reservedAfter[prelude-1], s.ReservedAtStart)
			}
			// PyTorch logs segment_alloc just before the alloc entry that
			// needed it, so its point p matches the model after event p.Event.
			var worst float64
			for _, p := range s.Reserved {
				if p.Event < len(s.Events) {
					within("reserved at entry", reservedAfter[p.Event], p.Bytes)
					worst = max(worst, abs(float64(reservedAfter[p.Event])-float64(p.Bytes))/float64(p.Bytes))
				}
			}
			var modelSegs, torchSegs []uint64
			for _, e := range r.Segments {
				if e.Event >= prelude && !e.Release {
					modelSegs = append(modelSegs, e.Size)
				}
			}
			prev := s.ReservedAtStart
			for _, p := range s.Reserved {
				if p.Bytes > prev {
					torchSegs = append(torchSegs, p.Bytes-prev)
				}
				prev = p.Bytes
			}
			if !slices.Equal(modelSegs, torchSegs) {
				t.Fatalf("segment sizes in the window differ: model %d segments, PyTorch %d", len(modelSegs), len(torchSegs))
			}
			t.Logf("%s: peak reserved PyTorch %d, model from empty %d, from start segments %d; before window PyTorch %d, model %d; %d window segments identical; worst point %.3f %%; peak live %d",
				name, s.PeakReserved, empty.PeakReserved, r.PeakReserved, s.ReservedAtStart, reservedAfter[max(prelude-1, 0)], len(modelSegs), 100*worst, s.PeakLive)
		})
	}
}

func BenchmarkReplayTorch(b *testing.B) {
	seq, err := trace.Synth("churn", 1, trace.SynthParams{Allocs: 20000})
	if err != nil {
		b.Fatal(err)
	}
	events := slices.Collect(seq)
	b.ResetTimer()
	for b.Loop() {
		if _, err := ReplayTorch(slices.Values(events), 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(events)*b.N)/b.Elapsed().Seconds(), "events/s")
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
