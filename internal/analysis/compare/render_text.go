package compare

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// fromTraceLine says which settings came from the trace's recording
// device, the policy it ran and what of it no policy reproduces ("" when
// the trace does not say).
func (c *Comparison) fromTraceLine() string {
	if c.DevicePolicy == "" {
		return ""
	}
	line := "the trace's recording device ran " + c.DevicePolicy
	if len(c.FromTrace) > 0 {
		line += "; from it, as no flag set them: " + strings.Join(c.FromTrace, ", ")
	}
	if len(c.DeviceNotes) > 0 {
		line += "; not reproduced by the policies: " + strings.Join(c.DeviceNotes, ", ")
	}
	return line
}

// WriteText writes the comparison as a report: PyTorch's own figures for
// the window, one table whose columns are grouped by the run they come
// from (unlimited capacity, smallest capacity, the capacity asked about),
// the verdicts, and where each policy's reserved bytes sat at its peak.
func (c *Comparison) WriteText(w io.Writer) error {
	return c.WriteTextWidth(w, DefaultTextWidth)
}

// DefaultTextWidth is the widest line WriteText writes: a terminal's
// 120 columns. Wider tables are stacked, group by group, beside the
// policy column; prose is wrapped.
const DefaultTextWidth = 120

// WriteTextWidth is WriteText with lines of at most width columns (0: no
// limit, every table on one row of groups: the CLI's -wide).
func (c *Comparison) WriteTextWidth(w io.Writer, width int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d events over %s of trace time, peak live %s\n", c.Trace, c.Events, traceSpan(c), units.Bytes(c.PeakLive))
	c.writePyTorch(&b)
	if c.Capacity > 0 {
		fmt.Fprintf(&b, "capacity %s", units.Bytes(c.Capacity))
		if c.Overhead > 0 {
			fmt.Fprintf(&b, " less %s overhead outside the allocator: %s for the allocator", units.Bytes(c.Overhead), units.Bytes(c.Capacity-c.Overhead))
		}
		b.WriteString("; ")
	} else {
		b.WriteString("no -capacity given (no verdict); ")
	}
	fmt.Fprintf(&b, "max page %s; copy time at %s\n", units.Bytes(c.MaxPage), rate(c.Bandwidth))
	for _, l := range c.capacityLines("no policy and no allocator setting", false) {
		b.WriteString(l + "\n")
	}
	if line := c.fromTraceLine(); line != "" {
		b.WriteString(line + "\n")
	}
	b.WriteByte('\n')

	t := table{width: width, groups: []tableGroup{
		{"", []string{"policy"}},
		{"unlimited capacity", []string{"peak reserved", "÷ live", "relocations", "moved", "copy time"}},
		{"smallest capacity", []string{"capacity", "÷ live", "relocations", "compactions", "moved", "copy time"}},
	}}
	if c.Overhead > 0 {
		t.groups[2].Columns = append(t.groups[2].Columns, "device")
	}
	if c.Capacity > 0 {
		t.groups = append(t.groups, tableGroup{"at " + units.Bytes(c.Capacity).String(), []string{"verdict"}})
	}
	for _, p := range c.Policies {
		row := []string{p.Name, units.Bytes(p.PeakReserved).String(), fmt.Sprintf("%.3f", p.ReservedOverLive),
			fmt.Sprint(p.Relocations), units.Bytes(p.BytesMoved).String(), seconds(p.CopySeconds)}
		if p.MinCapacity > 0 {
			row = append(row, units.Bytes(p.MinCapacity).String(), fmt.Sprintf("%.3f", p.MinCapacityOver),
				fmt.Sprint(p.MinCapacityRelocations), fmt.Sprint(p.MinCapacityCompactions), units.Bytes(p.MinCapacityBytesMoved).String(), seconds(p.MinCapacityCopySeconds))
			if c.Overhead > 0 {
				row = append(row, units.Bytes(p.MinDevice).String())
			}
		} else {
			row = append(row, "-", "-", "-", "-", "-", "-")
			if c.Overhead > 0 {
				row = append(row, "-")
			}
		}
		if v := p.Verdict; v != nil {
			if v.Fits {
				row = append(row, "fits, "+units.Bytes(v.Headroom).String()+" headroom")
			} else {
				row = append(row, "out of memory at "+v.oomPlace())
			}
		}
		t.add(row...)
	}
	t.write(&b)
	c.writeSlowPath(&b, width)
	c.writeTorchNote(&b)
	stackShown := map[int]string{}   // entry → the policy whose lines showed its stack
	liveShown := map[string]string{} // largest live allocations → the policy whose lines showed them
	for _, p := range c.Policies {
		if p.Verdict != nil && !p.Verdict.Fits {
			o := p.Verdict.OutOfMemory
			where := fmt.Sprintf("event %d", o.Event)
			if a := p.Verdict.Allocation; a != nil {
				where = a.String()
			}
			fmt.Fprintf(&b, "%s: out of memory at %s (t = %s): %s requested with %s live and %s reserved; %s free on the device, %s free in reserved memory",
				p.Name, where, traceTime(c, o.T), units.Bytes(o.Request), units.Bytes(o.Live), units.Bytes(o.Device),
				units.Bytes(p.Verdict.Capacity-min(p.Verdict.Capacity, o.Device)), units.Bytes(o.FreeInPages))
			if o.LargestFree > 0 {
				fmt.Fprintf(&b, " (largest free block %s)", units.Bytes(o.LargestFree))
			}
			b.WriteString("\n")
			writeFrames(&b, p.Verdict.Allocation, p.Name, stackShown)
			o.writeCause(&b, p.Verdict.Capacity, p.Name, liveShown)
		}
	}
	if c.FramesError != "" {
		fmt.Fprintf(&b, "warning: stack frames not read: %s\n", c.FramesError)
	}
	for _, p := range c.Policies {
		if p.FailedAllocs > 0 {
			first := fmt.Sprintf("event %d", p.Report.FirstFailure)
			if a := p.FirstFailed; a != nil {
				first = a.shortPlace()
			}
			fmt.Fprintf(&b, "warning: %s failed %d allocations at unlimited capacity (first at %s: %s)\n", p.Name, p.FailedAllocs, first, p.Report.FirstFailureError)
		}
	}
	c.writeBreakdowns(&b, width)
	if len(c.Warnings) > 0 {
		keys := make([]string, 0, len(c.Warnings))
		for k := range c.Warnings {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("input warnings:")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", k, c.Warnings[k])
		}
		b.WriteString("\n")
	}
	if len(c.Policies) > 0 && c.Policies[0].Report != nil {
		r := c.Policies[0].Report
		fmt.Fprintf(&b, "\n%s at unlimited capacity: %d allocs, %d frees, %d ignored frees, %d growths (final page %s), %d storage allocations and %d deallocations; outdated pages gave back %s, relocation moved %s (%.3f bytes moved per byte given back)\n",
			c.Policies[0].Name, r.Allocs, r.Frees, r.IgnoredFrees, r.Growths, units.Bytes(r.FinalPageSize), r.StorageAllocs, r.StorageDeallocs,
			units.Bytes(r.BytesReleased), units.Bytes(r.BytesMoved), r.MovedPerReleased)
	}
	_, err := io.WriteString(w, wrapLongLines(b.String(), width))
	return err
}

// writePyTorch writes what PyTorch itself recorded, and how the torch
// model compares with it.
func (c *Comparison) writePyTorch(b *strings.Builder) {
	p := c.PyTorch
	if p == nil {
		return
	}
	if p.WrittenBy != "" {
		fmt.Fprintf(b, "this snapshot was written by %s, not PyTorch: the recorded reserve below is its device's\n", p.WrittenBy)
	}
	fmt.Fprintf(b, "%s reserved %s at its peak from the trace's first allocation on (%.3f× peak live); %s when the trace began, %s at its first allocation, %s at the dump\n",
		p.Recorder(), units.Bytes(p.PeakReserved), ratio(p.PeakReserved, c.PeakLive), units.Bytes(p.ReservedAtTraceStart), units.Bytes(p.ReservedAtFirstAlloc), units.Bytes(p.ReservedAtDump))
	if p.TracePeakReserved > p.PeakReserved {
		fmt.Fprintf(b, "  the trace opens by releasing cache before its first allocation (an empty_cache): its peak over the whole trace, %s, belongs to an earlier experiment and is not compared\n",
			units.Bytes(p.TracePeakReserved))
	}
	if p.UnexplainedReserved > 0 {
		fmt.Fprintf(b, "  when the window began %s held %s in %d segments that no live block and no trace entry uses: cache from before the window, which no replay reproduces\n",
			p.Recorder(), units.Bytes(p.UnexplainedReserved), p.UnexplainedSegments)
	}
	if p.Inconsistent {
		b.WriteString("  the trace's segment entries add up to more than the segments hold at the dump: the figures before the window are unknown (shown as 0)\n")
	}
	p.writeReleases(b)
	// The model replayed as the recording ran, against the recording.
	switch {
	case p.ModelError != nil:
		at := ""
		if p.ModelCapacity > 0 {
			at = ", the recorded capacity"
		}
		fmt.Fprintf(b, "  the torch model (%s, the recorded addresses%s) reserves %s at its peak: %+.2f %% against %s's recorded peak\n",
			confName(c.baseConf), at, units.Bytes(p.ModelPeakReserved), 100**p.ModelError, p.Recorder())
		if n := p.ModelFailedAllocs; n > 0 {
			fmt.Fprintf(b, "  at that capacity the model fails %d allocation%s that %s served\n", n, map[bool]string{true: "", false: "s"}[n == 1], p.Recorder())
		}
	case p.FirstAllocEvent < 0:
		fmt.Fprintf(b, "  the trace holds no allocation: no model accuracy; %s held %s at the dump, %s of it live, the rest cache no replay explains\n",
			p.Recorder(), units.Bytes(p.ReservedAtDump), units.Bytes(c.PeakLive))
	}
}

// writeBreakdowns writes, per policy, where the reserved bytes beyond the
// live ones sat at its peak (parts no policy has are left out).
func (c *Comparison) writeBreakdowns(b *strings.Builder, width int) {
	var parts []int
	names := []string{}
	for i := range (&Breakdown{}).Parts() {
		used := false
		for _, p := range c.Policies {
			if p.Breakdown != nil && p.Breakdown.Parts()[i].Bytes > 0 {
				used = true
			}
		}
		if used {
			parts = append(parts, i)
			names = append(names, (&Breakdown{}).Parts()[i].Name)
		}
	}
	if len(parts) == 0 {
		return
	}
	b.WriteString("\n")
	t := table{width: width, groups: []tableGroup{
		{"", []string{"policy"}},
		{"at each policy's unlimited peak", []string{"reserved", "live"}},
		{"reserved but not live", names},
	}}
	for _, p := range c.Policies {
		if p.Breakdown == nil {
			continue
		}
		row := []string{p.Name, units.Bytes(p.Breakdown.Reserved).String(), units.Bytes(p.Breakdown.Live).String()}
		all := p.Breakdown.Parts()
		for _, i := range parts {
			row = append(row, units.Bytes(all[i].Bytes).String())
		}
		t.add(row...)
	}
	t.write(b)
}

// traceSpan is the trace time the events cover.
func traceSpan(c *Comparison) string {
	if c.Events == 0 || len(c.Policies) == 0 {
		return "0 s"
	}
	return durationUS(c.lastT - c.firstT)
}

// traceTime is a trace time relative to the first event.
func traceTime(c *Comparison, t int64) string { return durationUS(t - c.firstT) }

// durationUS formats microseconds.
func durationUS(us int64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%d µs", us)
	case us < 1_000_000:
		return fmt.Sprintf("%.1f ms", float64(us)/1e3)
	}
	return fmt.Sprintf("%.2f s", float64(us)/1e6)
}

// rate formats bytes per second in decimal units, as bandwidths are
// quoted.
func rate(bps float64) string {
	for _, u := range []struct {
		div  float64
		name string
	}{{1e12, "TB/s"}, {1e9, "GB/s"}, {1e6, "MB/s"}, {1e3, "kB/s"}} {
		if bps >= u.div {
			return fmt.Sprintf("%.3g %s", bps/u.div, u.name)
		}
	}
	return fmt.Sprintf("%.3g B/s", bps)
}

// writeTorchNote says what the PyTorch rows are and which settings they
// ran with.
func (c *Comparison) writeTorchNote(b *strings.Builder) {
	for _, p := range c.Policies {
		if p.TorchConf == nil {
			continue
		}
		conf := confName(*p.TorchConf)
		from := ""
		switch {
		case p.Name == Torch && c.TorchSettingsFrom != SettingsFromDefaults:
			from = " (settings from " + c.TorchSettingsFrom + ")"
		case p.Name == TorchExpandable:
			from = " (torch's settings with expandable segments)"
		}
		fmt.Fprintf(b, "%s is the model of PyTorch's caching allocator with %s%s: what PyTorch itself would need for this trace.\n", p.Name, conf, from)
		c.writeAddressNote(b, p)
	}
}

// confName names PyTorch settings in a sentence.
func confName(conf string) string {
	if conf == "" {
		return "PyTorch's defaults"
	}
	return "PYTORCH_CUDA_ALLOC_CONF=" + conf
}

// writeFrames writes the top frames of a failing allocation's stack under
// its line, once per entry: a later policy failing at the same entry
// points to the first one's (shown maps an entry to that policy).
func writeFrames(b *strings.Builder, a *FailingAllocation, policy string, shown map[int]string) {
	if a == nil || len(a.Frames) == 0 || a.Entry == nil {
		return
	}
	if first, ok := shown[*a.Entry]; ok {
		fmt.Fprintf(b, "  allocated at the same place as for %s above\n", first)
		return
	}
	shown[*a.Entry] = policy
	fmt.Fprintf(b, "  allocated at (innermost first; %s):\n", a.framesNote())
	for _, f := range a.Frames {
		fmt.Fprintf(b, "    %s\n", f)
	}
}
