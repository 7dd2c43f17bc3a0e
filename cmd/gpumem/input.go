package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/replay"
	"github.com/gpumem/gpumem/trace"
	"github.com/gpumem/gpumem/trace/compare"
)

// loadSource reads FILE (a .jsonl trace, or a PyTorch snapshot: pickle or
// JSON, optionally gzipped, at most maxSnapshot bytes decompressed), or the
// embedded default trace when path is "".
func loadSource(path string, maxSnapshot int64) (compare.Source, error) {
	if path == "" {
		name, data := trace.Default()
		return decodeJSONL(name+" (embedded)", bytes.NewReader(data))
	}
	f, err := os.Open(path)
	if err != nil {
		return compare.Source{}, err
	}
	defer f.Close()
	if strings.HasSuffix(path, ".jsonl") {
		return decodeJSONL(filepath.Base(path), f)
	}
	snap, err := trace.ReadSnapshot(f, trace.SnapshotOptions{MaxBytes: maxSnapshot})
	if err != nil {
		return compare.Source{}, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	src := compare.Source{Name: filepath.Base(path), Events: snap.Events, Recorded: snap.PeakReserved, Warnings: map[string]int{}}
	for _, p := range snap.Reserved {
		src.RecordedTimeline = append(src.RecordedTimeline, replay.Point{Event: p.Event, Device: p.Bytes})
	}
	c := snap.Counts
	for k, v := range map[string]int{
		"ignored_frees": c.IgnoredFrees, "implied_frees": c.ImpliedFrees, "prelude_allocs": c.Prelude,
		"pending_frees_at_end": c.PendingAtEnd, "oom_entries": c.OOMs, "skipped_actions": c.SkippedTotal,
		"unmatched_free_requests": c.UnmatchedFreeRequests, "missing_times": c.MissingTimes,
	} {
		if v > 0 {
			src.Warnings[k] = v
		}
	}
	return src, nil
}

func decodeJSONL(name string, r io.Reader) (compare.Source, error) {
	var events []trace.Event
	for e, err := range trace.Decode(r) {
		if err != nil {
			return compare.Source{}, fmt.Errorf("reading %s: %w", name, err)
		}
		events = append(events, e)
	}
	return compare.Source{Name: name, Events: slices.Clip(events)}, nil
}
