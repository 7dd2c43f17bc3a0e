package compare

import (
	"fmt"
	"os"

	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
)

// PyTorch is what PyTorch itself recorded in a snapshot, over the window a
// replay uses: from the trace's first alloc entry on (a trace may open with
// an empty_cache whose reserve belonged to an earlier experiment; see
// trace.Snapshot.FirstAlloc).
type PyTorch struct {
	// WrittenBy names the snapshot's writer when it is not PyTorch
	// (trace.Snapshot.WrittenBy: "gpumem (sim backend)" for a snapshot a
	// gpumem replay wrote); the reserve figures are then that writer's.
	WrittenBy string `json:"written_by,omitempty"`
	// PeakReserved is the highest reserve from the first allocation on:
	// the figure every policy is compared with.
	PeakReserved uint64 `json:"peak_reserved_bytes"`
	// TracePeakReserved is the highest over the whole trace, the entries
	// before the first allocation included.
	TracePeakReserved    uint64 `json:"trace_peak_reserved_bytes"`
	ReservedAtTraceStart uint64 `json:"reserved_at_trace_start_bytes"`
	ReservedAtFirstAlloc uint64 `json:"reserved_at_first_alloc_bytes"`
	ReservedAtDump       uint64 `json:"reserved_at_dump_bytes"`
	LiveAtFirstAlloc     uint64 `json:"live_at_first_alloc_bytes"`
	// FirstAllocEvent is the replayed event where the window begins (the
	// first alloc entry's, after the prelude), −1 when the trace has none.
	FirstAllocEvent int `json:"first_alloc_event"`
	// UnexplainedReserved is reserve held when the window began in
	// segments no live block and no alloc entry uses (a replay starts
	// without it); UnexplainedSegments counts those segments.
	UnexplainedReserved uint64 `json:"unexplained_reserved_bytes"`
	UnexplainedSegments int    `json:"unexplained_segments"`
	// Inconsistent: the trace's segment entries net more than the
	// segments hold at the dump, so the figures before the window are 0.
	Inconsistent bool `json:"inconsistent,omitempty"`
	// Releases are the trace's runs of cache releases by whose they were
	// (the program's empty_cache, the allocator's out-of-memory path, its
	// own) and what a replay does with them; ReleaseAssumptions say what
	// was assumed of those whose frames did not say (releases.go).
	Releases           []ReleaseSummary `json:"releases,omitempty"`
	ReleaseAssumptions []string         `json:"release_assumptions,omitempty"`
	// RecordedCapacity is the memory the trace shows PyTorch's allocator
	// could reserve (an oom entry, an out-of-memory retry), nil when it
	// shows none.
	RecordedCapacity *RecordedCapacity `json:"recorded_capacity,omitempty"`
	// ModelPeakReserved is the torch model's peak reserve replayed as the
	// recording ran: the settings the snapshot recorded (PyTorch's
	// defaults when it recorded none), its segments at the recorded
	// addresses, the program's cache releases where it made them, at the
	// recorded capacity (ModelCapacity: RecordedCapacity's bytes), else
	// unlimited (ModelCapacity 0). ModelFailedAllocs counts the
	// allocations the model failed there, which PyTorch served.
	// ModelError is the model's error against PeakReserved, signed, as a
	// fraction (0.01: 1 % above). They are absent when the trace holds no
	// allocation (FirstAllocEvent −1): a segments-only snapshot has
	// nothing for a model to replay, and its reserve is cache no replay
	// explains.
	ModelPeakReserved uint64   `json:"model_peak_reserved_bytes,omitempty"`
	ModelCapacity     uint64   `json:"model_capacity_bytes,omitempty"`
	ModelFailedAllocs int      `json:"model_failed_allocs,omitempty"`
	ModelError        *float64 `json:"model_error,omitempty"`
}

// modelAccuracy fills p's ModelPeakReserved and ModelError from the torch
// model's peak reserve under the recorded settings (model).
func (p *PyTorch) modelAccuracy(model uint64) {
	if p.FirstAllocEvent < 0 || p.PeakReserved == 0 {
		return
	}
	e := (float64(model) - float64(p.PeakReserved)) / float64(p.PeakReserved)
	p.ModelPeakReserved, p.ModelError = model, &e
}

// modelCapacity is the capacity the model replays "as the recording ran"
// at: the recorded one, 0 (unlimited) when the trace shows none.
func (p *PyTorch) modelCapacity() uint64 {
	if p.RecordedCapacity == nil {
		return 0
	}
	return p.RecordedCapacity.Bytes
}

// FromSnapshot is the Source for a converted PyTorch snapshot: its events,
// PyTorch's own figures, its reserve timeline from the window on, the
// allocator settings it recorded, and its counted oddities as warnings. A
// recorded setting the torch model cannot read is an error naming the
// allocator_settings field.
func FromSnapshot(name string, s *trace.Snapshot) (Source, error) {
	p := &PyTorch{
		WrittenBy:            s.WrittenBy,
		PeakReserved:         s.WindowPeakReserved,
		TracePeakReserved:    s.PeakReserved,
		ReservedAtTraceStart: s.ReservedAtStart,
		ReservedAtFirstAlloc: s.ReservedAtFirstAlloc,
		ReservedAtDump:       s.FinalReserved,
		LiveAtFirstAlloc:     s.LiveAtFirstAlloc,
		FirstAllocEvent:      s.FirstAllocEvent,
		UnexplainedReserved:  s.UnexplainedReserved,
		UnexplainedSegments:  s.UnexplainedSegments,
		Inconsistent:         s.ReservedInconsistent,
	}
	p.Releases, p.ReleaseAssumptions = releasesOf(s)
	p.RecordedCapacity = recordedCapacityOf(s)
	src := Source{Name: name, Events: s.Events, PyTorch: p, Warnings: map[string]int{}, EventEntries: s.EventEntries, StreamHandles: s.StreamHandles}
	src.TorchRecorded = make([]torch.RecordedSegment, len(s.Placements))
	for i, pl := range s.Placements {
		src.TorchRecorded[i] = torch.RecordedSegment(pl)
	}
	if s.AllocatorSettings != nil {
		settings, err := torch.SettingsFromSnapshot(s.AllocatorSettings)
		if err != nil {
			return Source{}, fmt.Errorf("%s: %w", name, err)
		}
		src.TorchSettings = &settings
	}
	// The reserve timeline from the window on: its level when the window
	// began, then every segment entry after it.
	from := s.FirstAllocEvent
	if from < 0 {
		from = len(s.Events)
	}
	first := from
	if len(s.Events) > 0 {
		first = min(from, len(s.Events)-1)
		src.RecordedTimeline = append(src.RecordedTimeline, replay.Point{Event: first, T: s.Events[first].T, Device: s.ReservedAtFirstAlloc})
	}
	for _, pt := range s.Reserved {
		if pt.Entry > s.FirstAlloc && s.FirstAlloc >= 0 {
			src.RecordedTimeline = append(src.RecordedTimeline, replay.Point{Event: pt.Event, T: pt.T, Device: pt.Bytes})
		}
	}
	c := s.Counts
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

// Recorder names who recorded the reserve figures: PyTorch, or the writer
// of a snapshot PyTorch did not write.
func (p *PyTorch) Recorder() string {
	if p.WrittenBy != "" {
		return p.WrittenBy
	}
	return "PyTorch"
}

// FramesFromFile is a Source.Frames for the snapshot s read from the file
// at path: it opens the file again for each call and reads the frames of
// the entries asked for (trace.Snapshot.ReadFrames).
func FramesFromFile(path string, s *trace.Snapshot) func(entries []int) (map[int][]trace.TorchFrame, error) {
	return func(entries []int) (map[int][]trace.TorchFrame, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		m, err := s.ReadFrames(f, entries)
		if err != nil {
			return nil, fmt.Errorf("reading the stack frames of %s: %w", path, err)
		}
		return m, nil
	}
}
