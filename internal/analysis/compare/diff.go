package compare

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
	"github.com/gpumem/gpumem/internal/units"
)

// Diff answers "why does run B need more memory than run A": both runs
// replayed under the same policies side by side (peak live, PyTorch's
// recorded reserve, each policy's peak reserve and smallest capacity), each
// reserve's difference split into live and cached-but-free bytes at its
// peak, and the difference in peak live attributed to allocation sites.

// DiffOptions tunes Diff.
type DiffOptions struct {
	// Options are both sides' replays' (policies, the capacity search,
	// progress, the gpumem policies' device); Capacity and Overhead are
	// not used: a diff compares what each run needs, not a verdict.
	// Frames is how many of an allocation's frames (the user's, as
	// trace.UserFrames picks them, as the out-of-memory line shows them)
	// name its site; 0 groups every allocation by size.
	Options
	// ATorchSettings and BTorchSettings, when set, are one side's torch
	// settings, in place of Options.TorchSettings and that side's recorded
	// ones: two settings of one run compare as A and B of the same source.
	ATorchSettings, BTorchSettings *torch.Settings
}

// Difference is Diff's result. Every delta is B less A.
type Difference struct {
	A DiffSide `json:"a"`
	B DiffSide `json:"b"`
	// PeakLiveDelta is B's peak live bytes less A's; the sites' deltas add
	// up to it exactly.
	PeakLiveDelta int64 `json:"peak_live_delta_bytes"`
	// Recorded is PyTorch's recorded reserve on both sides (both sides
	// snapshots; absent otherwise), Recorder who recorded it.
	Recorded *ReserveDiff `json:"recorded_reserve,omitempty"`
	Recorder string       `json:"recorder,omitempty"`
	// Policies are each policy's figures on both sides, in report order.
	Policies []PolicyDiff `json:"policies"`
	// SiteFrames is how many frames name a site (DiffOptions.Frames).
	SiteFrames int `json:"site_frames"`
	// Sites are the allocation sites live at either side's peak, the
	// largest difference first.
	Sites []Site `json:"sites"`
	// FramesError says why a side's allocations are grouped by size when
	// reading its stack frames failed.
	FramesError string `json:"frames_error,omitempty"`
}

// DiffSide is one run of a Difference.
type DiffSide struct {
	Trace  string `json:"trace"`
	Events int    `json:"events"`
	// PeakLive is the highest sum of live requested bytes; PeakEvent the
	// first event after which the run held it, PeakEntry that event's
	// device_traces entry (snapshots; absent for a prelude block).
	PeakLive        uint64 `json:"peak_live_bytes"`
	PeakEvent       int    `json:"peak_live_event"`
	PeakEntry       *int   `json:"peak_live_device_traces_entry,omitempty"`
	LiveAllocations int    `json:"live_allocations_at_peak"`
	// TorchConf is the torch policy's settings as a conf line ("" for
	// PyTorch's defaults); TorchSettingsFrom where they came from (a flag,
	// the snapshot's allocator_settings, PyTorch's defaults).
	TorchConf         string `json:"pytorch_alloc_conf"`
	TorchSettingsFrom string `json:"torch_settings_from"`
	// Comparison is the side's replay, for a report that wants more.
	Comparison *Comparison `json:"-"`
}

// ReserveAt is a reserve at its peak: its bytes, the live bytes then and
// the rest (reserved but not live: cached free memory, rounding,
// fragmentation), at event Event.
type ReserveAt struct {
	Reserved   uint64 `json:"reserved_bytes"`
	Live       uint64 `json:"live_bytes"`
	CachedFree uint64 `json:"cached_free_bytes"`
	Event      int    `json:"event"`
}

// ReserveDiff is a reserve on both sides; Delta is LiveDelta plus
// CachedFreeDelta.
type ReserveDiff struct {
	A               ReserveAt `json:"a"`
	B               ReserveAt `json:"b"`
	Delta           int64     `json:"delta_bytes"`
	LiveDelta       int64     `json:"live_delta_bytes"`
	CachedFreeDelta int64     `json:"cached_free_delta_bytes"`
}

func reserveDiff(a, b ReserveAt) ReserveDiff {
	return ReserveDiff{A: a, B: b, Delta: delta(b.Reserved, a.Reserved), LiveDelta: delta(b.Live, a.Live), CachedFreeDelta: delta(b.CachedFree, a.CachedFree)}
}

// delta is b − a as a signed count (both below 2^63: Run bounds live bytes
// there, and reserves of such traces stay far below).
func delta(b, a uint64) int64 { return int64(b) - int64(a) }

// PolicyDiff is one policy on both sides: its peak reserve split at each
// peak, and its smallest capacity (0: not searched, or failed).
type PolicyDiff struct {
	Name string `json:"name"`
	// AConf and BConf are each side's settings of a torch policy (absent
	// for gpumem's).
	AConf        *string     `json:"a_pytorch_alloc_conf,omitempty"`
	BConf        *string     `json:"b_pytorch_alloc_conf,omitempty"`
	Reserve      ReserveDiff `json:"peak_reserved"`
	AMinCapacity uint64      `json:"a_min_capacity_bytes"`
	BMinCapacity uint64      `json:"b_min_capacity_bytes"`
	// MinCapacityDelta is absent when a side has no smallest capacity.
	MinCapacityDelta *int64 `json:"min_capacity_delta_bytes,omitempty"`
}

// Site is an allocation site: the frames that name it, or, for
// allocations without frames, their size (BeforeTrace: blocks live before
// the snapshot's trace began, which have no entry and no stack). ABytes
// and BBytes are its live bytes at each side's peak, ACount and BCount its
// allocations live then.
type Site struct {
	Frames      []Frame `json:"frames"`
	Size        uint64  `json:"size_bytes,omitempty"`
	BeforeTrace bool    `json:"before_trace,omitempty"`
	ABytes      uint64  `json:"a_bytes"`
	BBytes      uint64  `json:"b_bytes"`
	Delta       int64   `json:"delta_bytes"`
	ACount      int     `json:"a_allocations"`
	BCount      int     `json:"b_allocations"`
}

// Diff replays a and b under opts's policies (one side after the other,
// each side's policies side by side) and compares them. A side whose replay fails is that error, naming the side.
func Diff(ctx context.Context, a, b Source, opts DiffOptions) (*Difference, error) {
	o := opts.Options
	o.Capacity, o.Overhead, o.Frames = 0, 0, 0
	sides := [2]struct {
		src      Source
		settings *torch.Settings
		flag     string
		c        *Comparison
		err      error
	}{{src: a, settings: opts.ATorchSettings, flag: "-a-torch-conf"}, {src: b, settings: opts.BTorchSettings, flag: "-b-torch-conf"}}
	for i := range sides {
		s := &sides[i]
		so := o
		if s.settings != nil {
			so.TorchSettings = s.settings
		}
		if p := opts.Progress; p != nil {
			side := string(rune('A' + i))
			so.Progress = func(policy, step string, done, total int) { p(side+" "+policy, step, done, total) }
		}
		s.c, s.err = Run(ctx, s.src, so) // its policies side by side
	}
	for i, s := range sides {
		if s.err != nil {
			return nil, fmt.Errorf("%c (%s): %w", 'A'+i, s.src.Name, s.err)
		}
	}
	d := &Difference{SiteFrames: max(opts.Frames, 0)}
	var sets [2]siteSet
	for i, s := range sides {
		side, set, ferr := diffSide(s.src, s.c, opts.Frames)
		switch {
		case s.settings != nil:
			side.TorchConf, side.TorchSettingsFrom = s.settings.String(), s.flag
		case o.TorchSettings != nil:
			side.TorchConf = o.TorchSettings.String()
		case s.src.TorchSettings != nil:
			side.TorchConf = s.src.TorchSettings.String()
		}
		if ferr != "" && d.FramesError == "" {
			d.FramesError = fmt.Sprintf("%c: %s", 'A'+i, ferr)
		}
		sets[i] = set
		if i == 0 {
			d.A = side
		} else {
			d.B = side
		}
	}
	d.PeakLiveDelta = delta(d.B.PeakLive, d.A.PeakLive)
	if a.PyTorch != nil && b.PyTorch != nil {
		r := reserveDiff(recordedAtPeak(a), recordedAtPeak(b))
		d.Recorded = &r
		d.Recorder = a.PyTorch.Recorder()
		if b.PyTorch.Recorder() != d.Recorder {
			d.Recorder += " and " + b.PyTorch.Recorder()
		}
	}
	d.Policies = policyDiffs(sides[0].c, sides[1].c)
	d.Sites = mergeSites(sets[0], sets[1])
	return d, nil
}

// policyDiffs pairs the policies of a and b by name (both ran the same
// list).
func policyDiffs(a, b *Comparison) []PolicyDiff {
	var out []PolicyDiff
	for _, pa := range a.Policies {
		i := slices.IndexFunc(b.Policies, func(p PolicyResult) bool { return p.Name == pa.Name })
		if i < 0 {
			continue
		}
		pb := b.Policies[i]
		pd := PolicyDiff{Name: pa.Name, AConf: pa.TorchConf, BConf: pb.TorchConf,
			Reserve:      reserveDiff(policyAtPeak(pa), policyAtPeak(pb)),
			AMinCapacity: pa.MinCapacity, BMinCapacity: pb.MinCapacity}
		if pa.MinCapacity > 0 && pb.MinCapacity > 0 {
			m := delta(pb.MinCapacity, pa.MinCapacity)
			pd.MinCapacityDelta = &m
		}
		out = append(out, pd)
	}
	return out
}

// policyAtPeak is a policy's reserve at its unlimited peak, split as its
// breakdown there found it.
func policyAtPeak(p PolicyResult) ReserveAt {
	r := ReserveAt{Reserved: p.PeakReserved, Event: p.PeakEvent}
	if b := p.Breakdown; b != nil {
		r.Reserved, r.Live = b.Reserved, min(b.Live, b.Reserved)
	}
	r.CachedFree = r.Reserved - r.Live
	return r
}

// recordedAtPeak is PyTorch's recorded reserve at its peak over the window
// (PyTorch.PeakReserved) and the trace's live bytes after the first event
// where the recording shows it (at most the reserve).
func recordedAtPeak(src Source) ReserveAt {
	r := ReserveAt{Reserved: src.PyTorch.PeakReserved, Event: -1}
	for _, pt := range src.RecordedTimeline {
		if pt.Device >= r.Reserved {
			r.Event = pt.Event
			break
		}
	}
	if r.Event >= 0 {
		live := liveAfter(src.Events)
		// Within the reserve, so the parts add up where the recording
		// does not hold every live block (a snapshot whose segments
		// disagree with its trace: PyTorch.Inconsistent).
		r.Live = min(live[min(r.Event, len(live)-1)], r.Reserved)
	}
	r.CachedFree = r.Reserved - r.Live
	return r
}

// liveAfter is the live requested bytes after each event (as peakLive
// counts them: an alloc of a live ID frees the old one, alloc_failed is
// never live).
func liveAfter(events []trace.Event) []uint64 {
	live := make(map[uint64]uint64)
	out := make([]uint64, len(events))
	var cur uint64
	for i, e := range events {
		switch e.Op {
		case trace.OpAlloc:
			cur -= live[e.ID]
			live[e.ID] = e.Size
			cur += e.Size
		case trace.OpFree:
			cur -= live[e.ID]
			delete(live, e.ID)
		}
		out[i] = cur
	}
	return out
}

// siteKey identifies a site on both sides: its frames, or its size.
type siteKey struct {
	frames      string // the frames, one "file\x00line\x00name\x00" each
	size        uint64 // frameless only
	beforeTrace bool
}

// siteSet is one side's sites at its peak.
type siteSet map[siteKey]*Site

// diffSide describes src's run c and sums its live bytes at its peak by
// site, the frames read through src.Frames (an error reading them is
// returned as text, and the allocations are grouped by size).
func diffSide(src Source, c *Comparison, frames int) (DiffSide, siteSet, string) {
	side := DiffSide{Trace: src.Name, Events: len(src.Events), PeakLive: c.PeakLive, PeakEvent: -1,
		TorchSettingsFrom: c.TorchSettingsFrom, Comparison: c}
	for i, l := range liveAfter(src.Events) {
		if l == c.PeakLive {
			side.PeakEvent = i
			break
		}
	}
	set := siteSet{}
	if side.PeakEvent < 0 {
		return side, set, ""
	}
	if a := failingAllocation(src, side.PeakEvent); a != nil && a.Entry != nil {
		side.PeakEntry = a.Entry
	}
	live := liveBefore(src.Events, side.PeakEvent+1)
	side.LiveAllocations = len(live)
	stacks, ferr := siteStacks(src, live, frames)
	for _, i := range live {
		e := src.Events[i]
		a := failingAllocation(src, i)
		var k siteKey
		var fs []Frame
		if a.Entry != nil {
			for _, f := range trace.UserFrames(stacks[*a.Entry], frames) {
				fs = append(fs, Frame{File: f.Filename, Line: f.Line, Name: f.Name})
				k.frames += fmt.Sprintf("%s\x00%d\x00%s\x00", f.Filename, f.Line, f.Name)
			}
		}
		if len(fs) == 0 {
			k = siteKey{size: e.Size, beforeTrace: a.Prelude}
		}
		s := set[k]
		if s == nil {
			s = &Site{Frames: fs, BeforeTrace: k.beforeTrace, Size: k.size}
			if s.Frames == nil {
				s.Frames = []Frame{}
			}
			set[k] = s
		}
		s.ABytes += e.Size
		s.ACount++
	}
	return side, set, ferr
}

// siteStacks reads the stacks of the entries of the live allocations (nil
// without frames); an error comes back as text.
func siteStacks(src Source, live []int, frames int) (map[int][]trace.TorchFrame, string) {
	if frames <= 0 || src.Frames == nil {
		return nil, ""
	}
	var entries []int
	for _, i := range live {
		if i < len(src.EventEntries) && src.EventEntries[i] >= 0 {
			entries = append(entries, int(src.EventEntries[i]))
		}
	}
	if len(entries) == 0 {
		return nil, ""
	}
	stacks, err := src.Frames(entries)
	if err != nil {
		return nil, err.Error()
	}
	return stacks, ""
}

// mergeSites pairs a's sites (their ABytes) with b's (their ABytes, which
// become BBytes), the largest difference first, then the larger site, then
// by name, so the order is the same on every run.
func mergeSites(a, b siteSet) []Site {
	all := map[siteKey]*Site{}
	for k, s := range a {
		all[k] = s
	}
	for k, s := range b {
		t := all[k]
		if t == nil {
			t = &Site{Frames: s.Frames, Size: s.Size, BeforeTrace: s.BeforeTrace}
			all[k] = t
		}
		t.BBytes, t.BCount = s.ABytes, s.ACount
	}
	keys := make([]siteKey, 0, len(all))
	for k, s := range all {
		s.Delta = delta(s.BBytes, s.ABytes)
		keys = append(keys, k)
	}
	abs := func(n int64) int64 {
		if n < 0 {
			return -n
		}
		return n
	}
	slices.SortFunc(keys, func(x, y siteKey) int {
		sx, sy := all[x], all[y]
		return cmp.Or(cmp.Compare(abs(sy.Delta), abs(sx.Delta)), cmp.Compare(max(sy.ABytes, sy.BBytes), max(sx.ABytes, sx.BBytes)),
			cmp.Compare(x.frames, y.frames), cmp.Compare(x.size, y.size), cmpBool(x.beforeTrace, y.beforeTrace))
	})
	out := make([]Site, 0, len(keys))
	for _, k := range keys {
		out = append(out, *all[k])
	}
	return out
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Name is how the reports name the site: its frames, innermost first,
// each as its file's last two path elements, line and function; or the
// size of its allocations.
func (s Site) Name() string {
	if len(s.Frames) == 0 {
		if s.BeforeTrace {
			return fmt.Sprintf("live before the trace began (no stack): allocations of %s", exactBytes(s.Size))
		}
		return fmt.Sprintf("no stack: allocations of %s", exactBytes(s.Size))
	}
	parts := make([]string, len(s.Frames))
	for i, f := range s.Frames {
		parts[i] = f.short()
	}
	return strings.Join(parts, " ← ")
}

// exactBytes is n in binary units, with the exact count beside a figure
// the units round ("1.95 KiB (2000 B)"): sites without frames are grouped
// by exact size, and two must not read the same.
func exactBytes(n uint64) string {
	s := units.Bytes(n).String()
	if n >= 1024 && n%1024 != 0 {
		s += fmt.Sprintf(" (%d B)", n)
	}
	return s
}

// WriteJSON writes the difference as one JSON object.
func (d *Difference) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
