package gpumem

import (
	"errors"
	"expvar"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/gpumem/gpumem/internal/relocation"
)

// ErrPublished is returned by Device.Publish for an expvar name already in
// use: expvar names are process-wide and cannot be taken back.
var ErrPublished = errors.New("gpumem: expvar name already published")

// Metric is one figure of Stats under the names a Go service publishes it
// by: Name in expvar and slog, Prometheus the metric name for an exporter
// of the user's choice (counters end in _total), Labels its one label,
// when it has one.
type Metric struct {
	Name       string
	Prometheus string
	Counter    bool // a monotonic counter; else a gauge
	Label      string
	LabelValue string
	Value      uint64
	Help       string
}

// Metrics lists the figures of s, named, in a fixed order: what Publish
// and LogValue show and docs/guide/metrics.md documents.
func (s Stats) Metrics() []Metric {
	g := func(name, help string, v uint64) Metric {
		return Metric{Name: name, Prometheus: "gpumem_" + name, Value: v, Help: help}
	}
	c := func(name, help string, v uint64) Metric {
		return Metric{Name: name, Prometheus: "gpumem_" + name + "_total", Counter: true, Value: v, Help: help}
	}
	out := []Metric{
		g("bytes_allocated", "bytes held from the device (storage)", s.BytesAllocated),
		g("bytes_reserved", "bytes held by pools (pages' address space)", s.BytesReserved),
		g("bytes_in_use", "requested bytes of buffers not yet freed", s.BytesInUse),
		g("bytes_pending_free", "bytes of freed buffers another stream's queued op, a mapping, a capture or a graph still binds", s.BytesPendingFree),
		g("guarded_pages", "page and allocation guards of sealed graphs", s.GuardedPages),
		c("allocs", "allocations served", s.AllocNr),
		c("growths", "arena page-size growths", s.Growths),
		c("storage_allocs", "device allocations (pages, dedicated buffers)", s.StorageAllocs),
		c("storage_deallocs", "device deallocations", s.StorageDeallocs),
		c("reserve_retries", "reservations retried after a cleanup", s.ReserveRetries),
		c("explicit_cleanups", "Cleanup calls", s.ExplicitCleanups),
		c("relocation_moves", "allocations moved by relocation", s.Relocation.Moves),
		c("relocation_bytes_moved", "bytes copied by relocation", s.Relocation.BytesMoved),
		c("relocation_pages_released", "outdated pages given back after a relocation", s.Relocation.PagesReleased),
		c("relocation_bytes_released", "bytes of those pages", s.Relocation.BytesReleased),
		c("relocation_nothing_to_move", "relocations whose plan was empty", s.Relocation.NothingToMove),
		c("relocation_abandoned", "relocations abandoned", s.Relocation.Abandoned),
		c("relocation_leaked", "relocations leaked after a failed wait", s.Relocation.Leaked),
		c("compaction_moves", "allocations moved by compaction (also in relocation_moves)", s.Relocation.CompactMoves),
		c("compaction_bytes_moved", "bytes copied by compaction (also in relocation_bytes_moved)", s.Relocation.CompactBytesMoved),
		c("compaction_pages_freed", "current pages compaction emptied and gave back", s.Relocation.CompactPagesFreed),
		c("compaction_bytes_freed", "bytes of those pages (mapped bytes on granular storage), net of repacks' new pages", s.Relocation.CompactBytesFreed),
		c("compaction_pages_repacked", "of compaction_pages_freed, pages replaced by a new page of their packed live bytes", s.Relocation.CompactPagesRepacked),
		c("dedicated_fallbacks", "reservations served at their own size because no page fitted", s.DedicatedFallbacks),
		c("own_size_pages", "pool pages taken at a reservation's own size because the device refused a page of the current size", s.OwnSizePages),
		c("captures_sealed", "captures sealed into graphs", s.Captures.Sealed),
		c("captures_doomed", "captures that failed", s.Captures.Doomed),
		c("captures_abandoned", "captures abandoned", s.Captures.Abandoned),
		c("captures_reused", "buffers a recording allocated and freed whose slices served its later allocations", s.Captures.Reused),
		c("captures_reused_bytes", "requested bytes of those buffers", s.Captures.ReusedBytes),
	}
	for r := relocation.Reason(0); r < relocation.NumReasons; r++ {
		m := c("relocations", "relocations by reason, whatever their outcome", s.Relocation.Runs[r])
		m.Name, m.Label, m.LabelValue = "relocations_"+snake(r.String()), "reason", snake(r.String())
		out = append(out, m)
	}
	kinds := make([]string, 0, len(s.FailedReserves))
	for k := range s.FailedReserves {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		m := c("failed_reserves", "failed reservations by kind (FailureKind)", s.FailedReserves[k])
		m.Name, m.Label, m.LabelValue = "failed_reserves_"+k, "kind", k
		out = append(out, m)
	}
	return out
}

// snake turns "MemoryPressure" into "memory_pressure".
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// LogValue makes Stats print with names in slog (slog.LogValuer): one
// attribute per metric, by its expvar name.
func (s Stats) LogValue() slog.Value {
	ms := s.Metrics()
	attrs := make([]slog.Attr, len(ms))
	for i, m := range ms {
		attrs[i] = slog.Uint64(m.Name, m.Value)
	}
	return slog.GroupValue(attrs...)
}

// Publish publishes the device's Stats through expvar under name, as a
// JSON object of the metrics by name, read afresh at every scrape (Stats
// takes the device lock briefly and never waits for the device). A name
// already published is ErrPublished: expvar cannot unpublish, so a
// closed device keeps answering with its last counters. An empty name is
// ErrInvalidName: expvar would list it as the key "".
func (d *Device) Publish(name string) (err error) {
	if name == "" {
		return fmt.Errorf("%w: Publish needs a non-empty expvar name, such as \"gpumem\"", ErrInvalidName)
	}
	if expvar.Get(name) != nil {
		return fmt.Errorf("%w: %q", ErrPublished, name)
	}
	// Two Publish calls racing for one name: expvar panics on the second,
	// which is a duplicate like the one checked above.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %q", ErrPublished, name)
		}
	}()
	expvar.Publish(name, expvar.Func(func() any {
		ms := d.Stats().Metrics()
		out := make(map[string]uint64, len(ms))
		for _, m := range ms {
			out[m.Name] = m.Value
		}
		return out
	}))
	return nil
}
