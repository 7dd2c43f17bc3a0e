package compare

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/units"
)

// ReleaseSummary is one kind of the trace's cache-release runs
// (trace.ReleaseRun; internal/analysis/trace/releases.go has the rules): how many,
// how many their frames decided (the rest the context did), the bytes
// they gave back, the first one's device_traces entry and what a replay
// does with them.
type ReleaseSummary struct {
	// Kind is "empty_cache" (the program's), "out-of-memory retry",
	// "out-of-memory" (a failed request's) or "allocator" (its own
	// housekeeping).
	Kind       string `json:"kind"`
	Runs       int    `json:"runs"`
	ByFrames   int    `json:"by_frames"`
	Bytes      uint64 `json:"bytes"`
	FirstEntry int    `json:"first_entry"`
	// Replayed says what a replay does with them: "cleanup events", or
	// "none: the model's own out-of-memory path at the recorded capacity",
	// or "none: the model's own, under the recorded settings".
	Replayed string `json:"replayed_as"`
}

// RecordedCapacity is what the trace says of the memory PyTorch's
// allocator could reserve (trace.RecordedCapacity): Bytes, which the
// model's accuracy replay runs at; AtLeast, PyTorch's highest reserve;
// Below, when a refused segment bounds it, the reserve at which one was
// refused; From, in words, where Bytes comes from, and Entry that
// device_traces entry.
type RecordedCapacity struct {
	Bytes   uint64 `json:"bytes"`
	AtLeast uint64 `json:"at_least_bytes"`
	Below   uint64 `json:"below_bytes,omitempty"`
	Entry   int    `json:"entry"`
	From    string `json:"from"`
}

// releasesOf summarizes a snapshot's release runs by kind, in the order
// of trace.ReleaseKind, and says in sentences what was assumed of those
// the context decided.
func releasesOf(s *trace.Snapshot) ([]ReleaseSummary, []string) {
	var out []ReleaseSummary
	var assumed []string
	for k := trace.ReleaseProgram; k <= trace.ReleaseAllocator; k++ {
		sum := ReleaseSummary{Kind: k.String(), FirstEntry: -1}
		for _, r := range s.Releases {
			if r.Kind != k {
				continue
			}
			if sum.Runs == 0 {
				sum.FirstEntry = r.First
			}
			sum.Runs++
			sum.Bytes += r.Bytes
			if r.ByFrames {
				sum.ByFrames++
			}
		}
		if sum.Runs == 0 {
			continue
		}
		switch {
		case k.Cleanup():
			sum.Replayed = "cleanup events"
		case k == trace.ReleaseRetry:
			sum.Replayed = "none: the model's own out-of-memory path at the recorded capacity"
		default:
			sum.Replayed = "none: the model's own, under the recorded settings"
		}
		out = append(out, sum)
		if n := sum.Runs - sum.ByFrames; n > 0 {
			assumed = append(assumed, releaseAssumption(k, n, sum.Runs))
		}
	}
	return out, assumed
}

// releaseAssumption says what was assumed of n runs of kind k (of all
// runs of it) whose frames did not say whose they were.
func releaseAssumption(k trace.ReleaseKind, n, all int) string {
	runs := "1 release run"
	if n > 1 {
		runs = fmt.Sprintf("%d release runs", n)
	}
	if n < all {
		runs = fmt.Sprintf("%d of the %d release runs", n, all)
	}
	switch k {
	case trace.ReleaseProgram:
		return runs + " taken for the program's empty_cache with no frames to say so: no oom entry follows, and no segment follows that the device could have refused without a released segment serving the request"
	case trace.ReleaseRetry:
		return runs + " taken for the allocator's out-of-memory retry with no frames to say so: the segment allocated next would have passed PyTorch's peak reserve, and no released segment could have served the request"
	case trace.ReleaseFailed:
		return runs + " taken for a failed request's out-of-memory path with no frames to say so: an oom entry follows"
	}
	return runs + " taken for the allocator's own"
}

// recordedCapacityOf is the snapshot's RecordedCapacity for the report,
// nil when the trace says nothing of the capacity.
func recordedCapacityOf(s *trace.Snapshot) *RecordedCapacity {
	c := s.Capacity
	if !c.Known() {
		return nil
	}
	rc := &RecordedCapacity{Bytes: c.Bytes, AtLeast: c.Low, Entry: c.FromEntry}
	if c.High != 0 {
		rc.Below = c.High + 1
	}
	if c.FromOOM {
		for _, o := range s.OOMEntries {
			if o.Entry != c.FromEntry {
				continue
			}
			rc.From = fmt.Sprintf("oom entry %d: %s reserved and %s free on the device when a %s request failed", o.Entry, units.Bytes(o.Reserved), units.Bytes(o.DeviceFree), units.Bytes(o.Size))
			if o.Reserved+o.DeviceFree < c.Bytes {
				rc.From += ", raised to PyTorch's peak"
			}
		}
		return rc
	}
	for _, r := range s.Releases {
		if r.First == c.FromEntry {
			rc.From = fmt.Sprintf("the out-of-memory retry at entries %d–%d: a %s segment refused at %s reserved", r.First, r.Last, units.Bytes(r.Next), units.Bytes(r.ReservedBefore))
		}
	}
	for _, o := range s.OOMEntries {
		if o.Entry == c.FromEntry {
			rc.From = fmt.Sprintf("oom entry %d: a %s request refused at %s reserved", o.Entry, units.Bytes(o.Size), units.Bytes(o.Reserved))
		}
	}
	return rc
}

// writeReleases writes the release and capacity lines of the PyTorch
// section: what became of the trace's cache releases, what was assumed
// where frames did not say, and the capacity the recording shows.
func (p *PyTorch) writeReleases(b *strings.Builder) {
	if len(p.Releases) > 0 {
		var parts []string
		for _, r := range p.Releases {
			by := "by their frames"
			switch {
			case r.Runs == 1 && r.ByFrames == 1:
				by = "by its frames"
			case r.ByFrames == 0:
				by = "by context"
			case r.ByFrames < r.Runs:
				by = fmt.Sprintf("%d by their frames", r.ByFrames)
			}
			what := "replayed as cleanups"
			switch r.Kind {
			case trace.ReleaseRetry.String():
				what = "evidence of the capacity, which the model's own out-of-memory path repeats there"
			case trace.ReleaseAllocator.String():
				what = "the model's own to make"
			}
			parts = append(parts, fmt.Sprintf("%d %s (%s, %s): %s", r.Runs, r.Kind, by, units.Bytes(r.Bytes), what))
		}
		fmt.Fprintf(b, "  cache releases: %s\n", strings.Join(parts, "; "))
	}
	for _, a := range p.ReleaseAssumptions {
		fmt.Fprintf(b, "  assumed: %s\n", a)
	}
	if c := p.RecordedCapacity; c != nil {
		bounds := fmt.Sprintf("at least %s (%s's peak)", units.Bytes(c.AtLeast), p.Recorder())
		if c.Below != 0 {
			bounds += fmt.Sprintf(", below %s", units.Bytes(c.Below))
		}
		fmt.Fprintf(b, "  the recording ran at a capacity of %s, from %s; %s\n", units.Bytes(c.Bytes), c.From, bounds)
	}
}

// ReleaseLines are the lines a report writes of a snapshot's cache
// releases and recorded capacity (writeReleases), unindented, for a
// command that reports on a snapshot without replaying it (convert).
func ReleaseLines(s *trace.Snapshot) []string {
	p := &PyTorch{WrittenBy: s.WrittenBy}
	p.Releases, p.ReleaseAssumptions = releasesOf(s)
	p.RecordedCapacity = recordedCapacityOf(s)
	var b strings.Builder
	p.writeReleases(&b)
	var out []string
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
