package compare

import (
	"context"
	"slices"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
)

// Breakdown is where a policy's reserved bytes sat at its peak: Live plus
// the named parts add up to Reserved exactly. gpumem policies fill the
// page parts; the torch model the segment parts.
type Breakdown struct {
	Event    int    `json:"event"`
	Reserved uint64 `json:"reserved_bytes"`
	Live     uint64 `json:"live_bytes"`
	// Rounding is alignment padding of live slices (gpumem) or the
	// rounding of requests up to block sizes, unsplit remainders included
	// (PyTorch).
	Rounding uint64 `json:"alignment_and_rounding_bytes"`
	// FreeInCurrentPages is free room in the pages of the current page
	// size (and the persistent and dedicated pools) on storage that backs
	// pages whole.
	FreeInCurrentPages uint64 `json:"free_in_current_pages_bytes"`
	// FreeInOutdatedPages is free room in pages of an outdated size.
	FreeInOutdatedPages uint64 `json:"free_in_outdated_pages_bytes"`
	// GranuleRounding is free room in mapped granules of current pages on
	// granular storage: the rounding of live slices up to whole granules (a
	// granule is mapped whole once a live slice touches it) and free
	// granules still mapped, which a cleanup gives back.
	GranuleRounding uint64 `json:"free_in_mapped_granules_bytes"`
	// FreeInSegments is free blocks in PyTorch segments that also hold
	// live blocks; CachedSegments whole segments with no live block.
	FreeInSegments uint64 `json:"free_in_segments_bytes"`
	CachedSegments uint64 `json:"cached_segments_bytes"`
	// Other is what no part accounts for (storage rounding of the
	// device's own allocations).
	Other uint64 `json:"other_bytes"`
}

// Parts are the breakdown's named parts, in report order, without Live.
func (b *Breakdown) Parts() []BreakdownPart {
	return []BreakdownPart{
		{"alignment and rounding", b.Rounding},
		{"free room in current pages", b.FreeInCurrentPages},
		{"free in mapped granules", b.GranuleRounding},
		{"outdated pages", b.FreeInOutdatedPages},
		{"free blocks in used segments", b.FreeInSegments},
		{"cached segments", b.CachedSegments},
		{"other", b.Other},
	}
}

// BreakdownPart is one named part of a Breakdown.
type BreakdownPart struct {
	Name  string
	Bytes uint64
}

// breakdownAt replays events up to and including event at and reports
// where the policy's reserved bytes sat then (nil when at < 0). Replays
// are deterministic, so this is the state at the unlimited replay's peak.
func breakdownAt(ctx context.Context, name string, events []trace.Event, at int, maxPage uint64, how deviceOptions) (*Breakdown, error) {
	if at < 0 || at >= len(events) {
		return nil, nil
	}
	prefix := events[:at+1]
	if isTorch(name) {
		settings, err := torchSettings(name, how.torchBase)
		if err != nil {
			return nil, err
		}
		res, err := torch.Replay(slices.Values(prefix), torch.Config{Settings: settings, Recorded: how.torchRecorded})
		if err != nil {
			return nil, err
		}
		b := &Breakdown{Event: at, Reserved: res.FinalReserved, Live: res.Stats.Requested}
		b.Rounding = res.FinalAllocated - min(res.FinalAllocated, b.Live)
		b.FreeInSegments = min(res.Stats.InactiveSplit, b.Reserved-min(b.Reserved, res.FinalAllocated))
		b.CachedSegments = b.Reserved - min(b.Reserved, res.FinalAllocated+b.FreeInSegments)
		return b, nil
	}
	dev, err := openPolicy(name, 0, maxPage, how)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	rep, err := replay.Run(ctx, dev, slices.Values(prefix), replay.Options{Total: len(prefix)})
	if err != nil {
		return nil, err
	}
	b := &Breakdown{Event: at, Reserved: dev.BytesAllocated(), Live: rep.FinalLive}
	granular := name == Adaptive || name == AdaptiveNoRelocate
	for _, s := range dev.Report().Streams {
		add := func(p gpumem.PoolReport, outdated bool) {
			u := p.Usage
			b.Rounding += u.BytesPadding
			free := u.BytesMapped() - min(u.BytesMapped(), u.BytesOccupied())
			switch {
			case outdated:
				b.FreeInOutdatedPages += free
			case granular && u.BytesUnmapped > 0:
				b.GranuleRounding += free
			default:
				b.FreeInCurrentPages += free
			}
		}
		add(s.Persistent, false)
		add(s.Dedicated, false)
		// Adaptive memory lists its tiny and small pools, then the arena's
		// current pool (Kind "adaptive"), then the arena's outdated pools:
		// every pool after the adaptive one is outdated.
		afterArena := false
		for _, p := range s.Dynamic {
			add(p, afterArena)
			afterArena = afterArena || p.Kind == "adaptive"
		}
	}
	sum := b.Live + b.Rounding + b.FreeInCurrentPages + b.FreeInOutdatedPages + b.GranuleRounding
	b.Other = b.Reserved - min(b.Reserved, sum)
	return b, nil
}
