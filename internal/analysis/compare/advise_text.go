package compare

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/gpumem/gpumem/internal/units"
)

// Marks of the advice's rows: the recommendation at the capacity and the
// smallest-device pick.
const (
	markRecommended = ">"
	markSmallest    = "*"
)

// WriteText writes the advice in the order a user asks: at a capacity,
// whether PyTorch's defaults fit, their margin and headroom, and whether a
// setting is worth a change (answerLines); then one row per setting with
// its peak reserved at unlimited capacity, its smallest capacity and
// margin; then what each pays on the slow path at the capacity (at its
// smallest capacity without one); then the smallest-device pick.
func (a *Advice) WriteText(w io.Writer) error {
	return a.WriteTextWidth(w, DefaultTextWidth)
}

// WriteTextWidth is WriteText with lines of at most width columns (0: no
// limit).
func (a *Advice) WriteTextWidth(w io.Writer, width int) error {
	c := a.Comparison
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d events, peak live %s\n", c.Trace, c.Events, units.Bytes(c.PeakLive))
	c.writePyTorch(&b)
	if lines, verdict := a.answerLines(); len(lines) > 0 {
		b.WriteString("\n")
		for i, l := range lines {
			writeWrapped(&b, l, proseWidth)
			if d := a.Defaults; i == verdict && d != nil && !d.Fits {
				writeFrames(&b, d.Allocation, a.Baseline, map[int]string{})
				d.OutOfMemory.writeCause(&b, d.Capacity, a.Baseline, map[string]string{})
			}
		}
	}
	if c.FramesError != "" {
		fmt.Fprintf(&b, "warning: stack frames not read: %s\n", c.FramesError)
	}
	b.WriteString("\n")
	t := table{left: 2, width: width, groups: []tableGroup{
		{"", []string{"", "setting (PYTORCH_CUDA_ALLOC_CONF)"}},
		{"unlimited capacity", []string{"peak reserved", "÷ live"}},
		{"smallest capacity", []string{"capacity", "÷ live"}},
	}}
	if c.Overhead > 0 {
		t.groups[2].Columns = append(t.groups[2].Columns, "device")
	}
	if c.Capacity > 0 {
		// The margin is the capacity less the smallest device: it belongs
		// with the smallest capacity it comes from.
		t.groups[2].Columns = append(t.groups[2].Columns, "margin")
	}
	for _, p := range c.Policies {
		row := []string{a.mark(p), a.rowName(p), units.Bytes(p.PeakReserved).String(), fmt.Sprintf("%.3f", p.ReservedOverLive), "-", "-"}
		if p.MinCapacity > 0 {
			row[4], row[5] = units.Bytes(p.MinCapacity).String(), fmt.Sprintf("%.3f", p.MinCapacityOver)
		}
		if c.Overhead > 0 {
			row = append(row, orDash(p.MinDevice > 0, units.Bytes(p.MinDevice).String()))
		}
		if c.Capacity > 0 {
			row = append(row, marginText(p.Verdict))
		}
		t.add(row...)
	}
	t.write(&b)
	b.WriteString("\n")
	a.writeSlowPath(&b, width)
	smallest, recommended := a.summaryLines()
	for _, l := range []string{smallest, recommended} {
		if l != "" {
			writeWrapped(&b, l, proseWidth)
		}
	}
	if c.Capacity > 0 && a.UseLine == "" {
		fmt.Fprintf(&b, "no PyTorch setting of the grid fits %s\n", units.Bytes(c.Capacity))
	}
	writeWrapped(&b, "garbage_collection_threshold acts only under a capacity (its smallest capacity is the figure to read); settings are modelled from PyTorch's source, the defaults checked against recorded snapshots.", proseWidth)
	_, err := io.WriteString(w, wrapLongLines(b.String(), width))
	return err
}

// answerLines answer in the order a user asks: what the capacity counts
// and whether the live tensors alone pass it (capacityLines), which
// settings "as it is" means, their verdict at the capacity with their
// margin and headroom, then the recommendation with its threshold and its
// cost. verdict is the index of the verdict's line (-1 when none), under
// which the text writes the failing allocation.
func (a *Advice) answerLines() (lines []string, verdict int) {
	c := a.Comparison
	lines = c.capacityLines("no allocator setting", true)
	lines = append(lines, a.asItIsLine())
	verdict = -1
	if c.Capacity == 0 {
		return lines, verdict
	}
	capacity := units.Bytes(c.Capacity).String()
	var defaults *PolicyResult
	for i := range c.Policies {
		if c.Policies[i].Name == a.Baseline {
			defaults = &c.Policies[i]
		}
	}
	now, short := a.baselineWords()
	if d := a.Defaults; d != nil && defaults != nil {
		verdict = len(lines)
		if d.Fits {
			l := fmt.Sprintf("at %s %s fit", capacity, now)
			if d.Margin != nil {
				l += fmt.Sprintf(", with %s of margin (%s less their smallest device, %s: the room the workload could still grow into",
					signedBytes(*d.Margin), capacity, units.Bytes(defaults.MinDevice))
				if t := c.tightWords(*d.Margin, a.ChangeThreshold); t != "" {
					l += "; " + t
				}
				l += ")"
			}
			lines = append(lines, l+fmt.Sprintf(" and %s of headroom at their peak (%s reserved).", units.Bytes(d.Headroom), units.Bytes(d.PeakReserved)))
		} else {
			where := fmt.Sprintf("event %d", d.OutOfMemory.Event)
			if d.Allocation != nil {
				where = d.Allocation.String()
			}
			l := fmt.Sprintf("at %s %s do not fit: out of memory at %s", capacity, now, where)
			if defaults.MinDevice > 0 {
				l += fmt.Sprintf(" (their smallest device is %s)", units.Bytes(defaults.MinDevice))
			}
			lines = append(lines, l+".")
		}
	}
	threshold := fmt.Sprintf("(%s: the larger of 1 GiB and 1%% of the capacity)", units.Bytes(a.ChangeThreshold))
	rec := a.recommended()
	switch a.Decision {
	case DecisionDefaultsFit:
		l := short + " already fit: no setting of the grid gains a change's worth of margin over them " + threshold
		if g, name := a.largestGain(); g > 0 {
			l += fmt.Sprintf("; the most, %s, gains %s", name, units.Bytes(g))
		}
		lines = append(lines, l+".")
	case DecisionWorthAChange:
		lines = append(lines, fmt.Sprintf("worth a change: %s gains %s of margin over %s, at least a change's worth %s%s.",
			*rec.TorchConf, signedBytes(*a.Gain), short, threshold, fitCost(rec)))
	case DecisionDefaultsDoNotFit:
		margin := marginText(rec.Verdict) + " of margin"
		if m := rec.Verdict.Margin; m != nil {
			if t := c.tightWords(*m, a.ChangeThreshold); t != "" {
				margin += " (" + t + ")"
			}
		}
		lines = append(lines, fmt.Sprintf("recommended: %s fits, with %s and %s of headroom at its peak%s.",
			*rec.TorchConf, margin, units.Bytes(rec.Verdict.Headroom), fitCost(rec)))
	case DecisionNoneFits:
		l := fmt.Sprintf("no PyTorch setting of the grid fits %s", capacity)
		if a.LiveOverCapacity > 0 {
			l += ", nor can any: the live tensors alone pass it (above)"
		}
		for _, p := range c.Policies {
			if p.Name == Adaptive && p.Verdict != nil && p.Verdict.Fits {
				l += fmt.Sprintf("; gpumem adaptive fits, with %s of margin", marginText(p.Verdict))
			}
		}
		lines = append(lines, l+".")
	}
	return lines, verdict
}

// asItIsLine says which settings "as it is" is judged by and where they
// come from (Advice.BaselineFrom), and a PYTORCH_CUDA_ALLOC_CONF of the
// environment left aside.
func (a *Advice) asItIsLine() string {
	conf := confName(a.BaselineConf)
	recordedNone := "a gpumem trace records no allocator settings"
	if a.Comparison.PyTorch != nil {
		recordedNone = "the snapshot recorded no allocator_settings"
	}
	var l string
	switch a.BaselineFrom {
	case SettingsFromTorchConf:
		l = "as it is: " + conf + ", the -torch-conf settings"
	case SettingsFromSnapshot:
		l = "as it is: " + conf + ", as the snapshot recorded them (allocator_settings)"
	case SettingsFromEnvironment:
		env := a.BaselineConf
		if env == "" {
			env = "PyTorch's defaults"
		}
		l = "as it is: " + env + ", from PYTORCH_CUDA_ALLOC_CONF in the environment (" + recordedNone + ")"
	default:
		l = "as it is: PyTorch's defaults: " + recordedNone + " and PYTORCH_CUDA_ALLOC_CONF is not set (-torch-conf CONF judges other settings)"
	}
	if e := a.IgnoredEnvConf; e != nil {
		why := "is not what the snapshot ran with"
		if a.BaselineFrom == SettingsFromTorchConf {
			why = "is set aside for -torch-conf"
		}
		judge := "-torch-conf " + *e + " judges it"
		if *e == "" {
			judge = "its row, PyTorch's defaults, shows them"
		}
		env := *e
		if env == "" {
			env = "PyTorch's defaults"
		}
		l += fmt.Sprintf("; PYTORCH_CUDA_ALLOC_CONF in the environment (%s) %s: %s", env, why, judge)
	}
	return l + "."
}

// summaryLines are the advice's last word, in the text and the HTML alike:
// the PyTorch setting that needs the smallest device (*) and the one
// recommendation (>). The first names no setting to use: where it is not
// the recommendation it says why (less than a change's worth, out of
// memory at the capacity, a slower path), so the two never disagree.
func (a *Advice) summaryLines() (smallest, recommended string) {
	c := a.Comparison
	var best, rec, adaptive *PolicyResult
	for i := range c.Policies {
		p := &c.Policies[i]
		switch p.Name {
		case a.BestPolicy:
			best = p
		case Adaptive:
			adaptive = p
		}
		if p.Name == a.Recommended {
			rec = p
		}
	}
	if best != nil {
		var l strings.Builder
		fmt.Fprintf(&l, "%s the PyTorch setting that needs the smallest device: %s (%s", markSmallest, settingWords(*best), units.Bytes(best.MinCapacity))
		if adaptive != nil && adaptive.MinCapacity > 0 {
			fmt.Fprintf(&l, "; gpumem adaptive needs %s", units.Bytes(adaptive.MinCapacity))
		}
		l.WriteString(")")
		switch {
		case rec == nil || rec == best:
		case c.Capacity > 0 && best.Verdict != nil && !best.Verdict.Fits:
			fmt.Fprintf(&l, "; it runs out of memory at %s (out of memory is not monotonic in the capacity), so it is not the recommendation", units.Bytes(c.Capacity))
		case best.MinDevice >= rec.MinDevice:
			fmt.Fprintf(&l, "; %s needs as small a device with fewer retries or cudaMalloc calls, so it is the recommendation", settingWords(*rec))
		default:
			fmt.Fprintf(&l, "; it needs %s less than %s, under a change's worth (%s), so it is not the recommendation", units.Bytes(rec.MinDevice-best.MinDevice), settingWords(*rec), units.Bytes(a.ChangeThreshold))
		}
		smallest = l.String() + "."
	}
	if a.UseLine == "" {
		return smallest, ""
	}
	if c.Capacity > 0 {
		return smallest, fmt.Sprintf("%s to run on %s: %s", markRecommended, units.Bytes(c.Capacity), a.UseLine)
	}
	l := fmt.Sprintf("%s recommended: %s", markRecommended, a.UseLine)
	if rec != nil && a.Recommended != a.Baseline && a.Gain != nil {
		_, short := a.baselineWords()
		l += fmt.Sprintf(": its smallest device is %s below %s', at least a change's worth (%s: the larger of 1 GiB and 1%% of their smallest device)", units.Bytes(uint64(*a.Gain)), short, units.Bytes(a.ChangeThreshold))
	}
	return smallest, l + "; -capacity SIZE answers for your card."
}

// recommended is the recommended policy's row, nil when none.
func (a *Advice) recommended() *PolicyResult {
	for i, p := range a.Comparison.Policies {
		if p.Name == a.Recommended {
			return &a.Comparison.Policies[i]
		}
	}
	return nil
}

// baselineWords names the baseline settings in the answer: in full ("PyTorch's
// defaults", "the recorded settings (expandable_segments:True)") and short
// ("the defaults", "they").
func (a *Advice) baselineWords() (full, short string) {
	switch {
	case a.BaselineConf == "" || a.BaselineFrom == SettingsFromDefaults:
		return "PyTorch's defaults", "the defaults"
	case a.BaselineFrom == SettingsFromTorchConf:
		return fmt.Sprintf("the -torch-conf settings (%s)", a.BaselineConf), "the -torch-conf settings"
	case a.BaselineFrom == SettingsFromEnvironment:
		return fmt.Sprintf("the settings of PYTORCH_CUDA_ALLOC_CONF (%s)", a.BaselineConf), "the environment's settings"
	}
	return fmt.Sprintf("the settings the snapshot recorded (%s)", a.BaselineConf), "the recorded settings"
}

// rowName is a row's setting, the baseline's marked as the settings in use
// when they are not PyTorch's defaults.
func (a *Advice) rowName(p PolicyResult) string {
	if p.Name == a.Baseline && a.Baseline != defaultsPolicy {
		return settingName(p) + " (now)"
	}
	return settingName(p)
}

// largestGain is the most margin a fitting setting gains over the
// baseline, and that setting (0 and "" when none gains).
func (a *Advice) largestGain() (uint64, string) {
	var defaults uint64
	for _, p := range a.Comparison.Policies {
		if p.Name == a.Baseline {
			defaults = p.MinDevice
		}
	}
	var gain uint64
	name := ""
	for _, p := range a.Comparison.Policies {
		if isTorch(p.Name) && p.Verdict != nil && p.Verdict.Fits && p.MinDevice > 0 && p.MinDevice < defaults && defaults-p.MinDevice > gain {
			gain, name = defaults-p.MinDevice, *p.TorchConf
		}
	}
	return gain, name
}

// fitCost says what a fitting setting pays at the capacity.
func fitCost(p *PolicyResult) string {
	s := p.Verdict.SlowPath
	if s == nil || s.DeviceAllocs == nil {
		return ""
	}
	return fmt.Sprintf(", at %d retries, %d cudaMalloc and %d cudaFree calls", s.Retries(), *s.DeviceAllocs, *s.DeviceFrees)
}

// writeSlowPath writes what each setting pays at the capacity (or, without
// one, at its smallest capacity): its verdict and headroom there, its
// retries, cudaMalloc and cudaFree calls; and gpumem's relocations.
func (a *Advice) writeSlowPath(b *strings.Builder, width int) {
	c := a.Comparison
	title := "at the smallest capacity"
	var cols []string
	if c.Capacity > 0 {
		title = "at " + units.Bytes(c.Capacity).String()
		cols = []string{"verdict", "headroom"}
	}
	t := table{left: 2, width: width, groups: []tableGroup{
		{"", []string{"", "setting (PYTORCH_CUDA_ALLOC_CONF)"}},
		{title, append(cols, "retries", "cudaMalloc", "cudaFree")},
	}}
	var relocated []string
	for _, p := range c.Policies {
		s := p.MinCapacitySlowPath
		row := []string{a.mark(p), a.rowName(p)}
		if c.Capacity > 0 {
			if p.Verdict == nil {
				continue
			}
			s = p.Verdict.SlowPath
			row = append(row, verdictWord(p.Verdict), orDash(p.Verdict.Fits, units.Bytes(p.Verdict.Headroom).String()))
		}
		row = append(row, slowPathCells(s)[:3]...)
		t.add(row...)
		if s != nil && s.Relocations != nil {
			at := "at its smallest capacity"
			if c.Capacity > 0 {
				at = title
			}
			relocated = append(relocated, fmt.Sprintf("gpumem %s %s: %d relocations moved %s", p.Name, at, *s.Relocations, units.Bytes(*s.BytesMoved)))
		}
	}
	t.write(b)
	writeWrapped(b, "retries: allocations that released cached memory and tried again (PyTorch's num_alloc_retries, gpumem's cleanups); cudaMalloc, cudaFree: PyTorch's num_device_alloc and num_device_free (page maps and unmaps with expandable segments).", proseWidth)
	for _, l := range relocated {
		b.WriteString(l + "\n")
	}
}

// slowPathCells are a slow path's retries, cudaMalloc, cudaFree,
// relocations and bytes moved, "-" where not measured.
func slowPathCells(s *SlowPath) []string {
	if s == nil {
		return []string{"-", "-", "-", "-", "-"}
	}
	n := func(v *uint64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprint(*v)
	}
	retries := n(s.AllocRetries)
	if s.AllocRetries == nil {
		retries = n(s.Cleanups)
	}
	moved := "-"
	if s.BytesMoved != nil {
		moved = units.Bytes(*s.BytesMoved).String()
	}
	return []string{retries, n(s.DeviceAllocs), n(s.DeviceFrees), n(s.Relocations), moved}
}

// mark is a row's mark: recommended, smallest device, both or neither.
func (a *Advice) mark(p PolicyResult) string {
	m := ""
	if p.Name == a.Recommended {
		m += markRecommended
	}
	if p.Name == a.BestPolicy {
		m += markSmallest
	}
	return m
}

// settingName is a row's name in the advice: the conf line, or gpumem's
// policy.
func settingName(p PolicyResult) string {
	if p.TorchConf == nil {
		return "gpumem " + p.Name
	}
	if *p.TorchConf == "" {
		return "(PyTorch's defaults)"
	}
	return *p.TorchConf
}

// settingWords is a row's setting in a sentence: settingName, PyTorch's
// defaults without the table's parentheses.
func settingWords(p PolicyResult) string {
	if p.TorchConf != nil && *p.TorchConf == "" {
		return "PyTorch's defaults"
	}
	return settingName(p)
}

// verdictWord is a verdict in a table cell.
func verdictWord(v *Verdict) string {
	if v.Fits {
		return "fits"
	}
	return "OOM at " + v.oomPlace()
}

// marginText is a verdict's margin, "-" when not measured.
func marginText(v *Verdict) string {
	if v == nil || v.Margin == nil {
		return "-"
	}
	return signedBytes(*v.Margin)
}

// signedBytes formats a byte difference.
func signedBytes(n int64) string {
	if n < 0 {
		return "-" + units.Bytes(uint64(-n)).String()
	}
	return units.Bytes(uint64(n)).String()
}

func orDash(ok bool, s string) string {
	if ok {
		return s
	}
	return "-"
}

// proseWidth is the column the advice's sentences wrap at, so they read
// in a terminal beside tables of at most 120 columns.
const proseWidth = 100

// writeWrapped writes s wrapped at width columns between words, the
// continuation lines indented by two spaces (Wrap).
func writeWrapped(b *strings.Builder, s string, width int) {
	b.WriteString(Wrap(s, width))
}

// Wrap is s and a newline, cut between words into lines of at most width
// columns (a word longer than that stands alone), the continuation lines
// indented by two spaces: how the reports' sentences wrap, which the CLI's
// own lines follow.
func Wrap(s string, width int) string {
	var b strings.Builder
	col := 0
	for i, word := range strings.Fields(s) {
		n := utf8.RuneCountInString(word)
		switch {
		case i == 0:
		case col+1+n > width:
			b.WriteString("\n  ")
			col = 2
		default:
			b.WriteString(" ")
			col++
		}
		b.WriteString(word)
		col += n
	}
	b.WriteString("\n")
	return b.String()
}
