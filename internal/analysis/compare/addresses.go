package compare

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
	"github.com/gpumem/gpumem/internal/units"
)

// AddressDependence is how much a torch policy's smallest capacity depends
// on the addresses the model invents for segments no recording places
// (internal/analysis/trace/torch/addresses.go): at another capacity or other
// settings than the recording's, or in a trace without addresses, the
// model's segments leave the recorded ones, and among equal-size free
// blocks PyTorch takes the lowest address. Synthetic counts the segments
// the model placed at invented addresses in the replays at the smallest
// capacity and 1 MiB below it; Rising is the smallest capacity under the
// convention the report uses (invented addresses above the recorded ones,
// rising), Falling under the other (below them, falling; 0 when no
// capacity up to the search's bound ran clean), and Change is Falling's
// difference from Rising as a fraction of Rising.
type AddressDependence struct {
	Synthetic int     `json:"synthetic_segments"`
	Rising    uint64  `json:"rising_min_capacity_bytes"`
	Falling   uint64  `json:"falling_min_capacity_bytes"`
	Change    float64 `json:"change"`
}

// Depends reports whether the smallest capacity differs between the two
// conventions.
func (d *AddressDependence) Depends() bool { return d != nil && d.Rising != d.Falling }

// addressDependence is a torch policy's AddressDependence at its smallest
// capacity (found with rising addresses), nil when the replays there and
// 1 MiB below placed every segment where the recording did: the
// convention then played no part. Otherwise the search runs again with
// falling addresses.
func addressDependence(ctx context.Context, name string, events []trace.Event, c *Comparison, capacity, peakUnlimited uint64, how deviceOptions, progress func(string) func(int, int)) (*AddressDependence, error) {
	settings, err := torchSettings(name, how.torchBase)
	if err != nil {
		return nil, err
	}
	synthetic := 0
	for _, at := range []uint64{capacity, capacity - min(capacity, capacityGranule)} {
		if at == 0 {
			continue
		}
		res, err := torch.Replay(slices.Values(events), torch.Config{Capacity: at, Settings: settings, Recorded: how.torchRecorded, FailFast: true})
		if err != nil {
			return nil, err
		}
		synthetic = max(synthetic, res.Stats.SyntheticSegments)
	}
	if synthetic == 0 {
		return nil, nil
	}
	falling := how
	falling.torchAddresses = torch.AddressesFalling
	capRes, _, err := minCapacity(ctx, name, events, c.PeakLive, peakUnlimited, c.MaxPage, falling, progress)
	if err != nil {
		return nil, err
	}
	d := &AddressDependence{Synthetic: synthetic, Rising: capacity}
	if capRes != nil {
		d.Falling = capRes.capacity
		d.Change = (float64(d.Falling) - float64(d.Rising)) / float64(d.Rising)
	}
	return d, nil
}

// writeAddressNote says, under a torch policy's note, how much its
// smallest capacity depends on the invented addresses: when it does, or,
// for a snapshot (whose addresses the model otherwise follows), when the
// model invented any there.
func (c *Comparison) writeAddressNote(b *strings.Builder, p PolicyResult) {
	d := p.Addresses
	if d == nil || (!d.Depends() && c.PyTorch == nil) {
		return
	}
	segs := fmt.Sprintf("%d segments", d.Synthetic)
	if d.Synthetic == 1 {
		segs = "1 segment"
	}
	if !d.Depends() {
		fmt.Fprintf(b, "  its smallest capacity does not depend on the addresses it invents for %s no recording places: %s with them rising (the convention) or falling\n",
			segs, units.Bytes(d.Rising))
		return
	}
	falling := "no capacity found"
	if d.Falling > 0 {
		falling = fmt.Sprintf("%s falling (%+.1f %%)", units.Bytes(d.Falling), 100*d.Change)
	}
	fmt.Fprintf(b, "  its smallest capacity depends on the addresses it invents for %s no recording places (PyTorch takes the lowest of equal-size free blocks): %s with them rising (the convention), %s\n",
		segs, units.Bytes(d.Rising), falling)
}
