package compare

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/replay"
)

// SnapshotPolicies lists the policies WriteSnapshot can draw: every gpumem
// policy of Policies (the PyTorch ones have no device to draw).
func SnapshotPolicies() []string {
	var out []string
	for _, p := range Policies() {
		if !isTorch(p) {
			out = append(out, p)
		}
	}
	return out
}

// WriteSnapshot replays src under one gpumem policy, recording the device's
// history, and writes the device at the end of the replay with that history
// as PyTorch's memory snapshot (gpumem.Device.WriteSnapshot), for
// pytorch.org/memory_viz. The device opens as Run's replay at unlimited
// capacity does (with the settings Run takes from a trace's recording
// device), or at opts.Capacity − opts.Overhead when a capacity is set (the
// recording device's when opts sets none)
// (so the viewer shows the out-of-memory points of the device judged).
// Torch policies are refused (ErrUnknownPolicy): PyTorch's model has no
// gpumem device to draw. The history holds every entry of the replay (its
// ring is sized from the trace).
func WriteSnapshot(ctx context.Context, src Source, policy string, opts Options, w io.Writer) error {
	if !slices.Contains(SnapshotPolicies(), policy) {
		return fmt.Errorf("%w: %q: a snapshot needs a gpumem policy (one of %s)", ErrUnknownPolicy, policy, strings.Join(SnapshotPolicies(), ", "))
	}
	if len(src.Events) == 0 {
		return fmt.Errorf("%w: %s", ErrEmptyTrace, src.Name)
	}
	how := opts.device()
	maxPage, _ := recordedSettings(src, &opts, &how)
	var capacity uint64
	if opts.Capacity > 0 {
		capacity = opts.Capacity - min(opts.Overhead, opts.Capacity)
	}
	dev, err := openPolicy(policy, capacity, maxPage, how)
	if err != nil {
		return err
	}
	defer dev.Close()
	// A replayed event records a handful of entries (the call, the pages and
	// granules it maps, a relocation's moves): 8 per event keeps them all on
	// the traces seen so far.
	if err := dev.StartHistory(gpumem.HistoryOptions{MaxEntries: 8*len(src.Events) + 1024}); err != nil {
		return err
	}
	if _, err := replay.Run(ctx, dev, slices.Values(src.Events), replay.Options{Total: len(src.Events)}); err != nil {
		return err
	}
	return dev.WriteSnapshot(w)
}
