package compare

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/units"
)

// The causes of an out-of-memory (OutOfMemory.Cause). A user asks first
// whether any allocator could have served the request, since the remedy
// differs: shed memory, or change the allocator or its settings.
const (
	// CauseExhaustion: the run's live bytes pass the capacity (at its peak,
	// or here with the request): no allocator fits it, and the run must
	// shed memory. Said even where this allocation fails before the peak
	// for want of a large enough block: mending that would only move the
	// failure to the peak.
	CauseExhaustion = "exhaustion"
	// CauseFragmentation: the live bytes and the request fit the
	// capacity, but the free memory is in pieces too small for the request
	// (or taken by rounding and page granularity); another allocator or
	// setting may fit.
	CauseFragmentation = "fragmentation"
	// CauseCache: the live bytes and the request fit, and the request
	// would fit in the free device memory once the allocator gave back the
	// memory it holds for other streams or pools (a CUDA graph's private
	// pool, a capture underway, frees awaiting other streams' work), which
	// its out-of-memory path does not take back.
	CauseCache = "cache"
)

// largestLiveShown is how many of the live allocations an explained
// out-of-memory lists, the largest first.
const largestLiveShown = 10

// OutOfMemory is a verdict's first failed allocation with its explanation:
// the device's state then (replay.FailureState: request, live bytes,
// device bytes, free room, largest free block where the allocator can say,
// memory held for other streams or pools), why it failed, and what was
// live.
type OutOfMemory struct {
	replay.FailureState
	// Cause is CauseExhaustion, CauseFragmentation or CauseCache.
	Cause string `json:"cause"`
	// FreeOnDevice is the capacity less the device bytes: memory the
	// allocator had not reserved.
	FreeOnDevice uint64 `json:"free_on_device_bytes"`
	// Shed (exhaustion only) is the least the run must give up for any
	// allocator to fit it: its peak live bytes (or the live bytes and the
	// request here, when more) less the capacity.
	Shed uint64 `json:"shed_bytes,omitempty"`
	// FitsInstead (fragmentation and cache) names the policies and
	// settings whose own replay at the same capacity ran the whole trace
	// clean: those of the comparison, and, when none of them fits, the
	// adaptive policy and PyTorch with expandable segments, replayed for
	// this answer.
	FitsInstead []string `json:"fits_instead,omitempty"`
	// LiveAllocations counts the allocations live when the request failed;
	// LargestLive are the largest of them (at most ten), each named as
	// FailingAllocation names one (its device_traces entry and frames for
	// a snapshot), largest first.
	// Refusal is the allocator's own error, with its kind
	// (gpumem.FailureKind), when it refused for another reason than room
	// (a page update a capture forbids, a size above the largest
	// allocation): the cause's figures then do not tell the whole story.
	Refusal         string               `json:"refusal,omitempty"`
	LiveAllocations int                  `json:"live_allocations"`
	LargestLive     []*FailingAllocation `json:"largest_live"`
	// peakLive is the run's peak live bytes, for the text.
	peakLive uint64
}

// explain fills o's cause and the live allocations from src's events, for
// a run whose peak live bytes are peakLive: at o.Event the trace had the
// same live set under every policy (the replay stopped at its first
// failure), so it is read from the trace.
func (o *OutOfMemory) explain(src Source, capacity, peakLive uint64) {
	o.peakLive = peakLive
	o.FreeOnDevice = capacity - min(capacity, o.Device)
	switch {
	case max(peakLive, o.Live+o.Request) > capacity:
		o.Cause = CauseExhaustion
		o.Shed = max(peakLive, o.Live+o.Request) - capacity
	case o.FreeOnDevice+o.Held >= o.Request && o.Held > 0:
		o.Cause = CauseCache
	default:
		o.Cause = CauseFragmentation
	}
	live := liveBefore(src.Events, o.Event)
	o.LiveAllocations = len(live)
	slices.SortFunc(live, func(a, b int) int {
		return cmp.Or(cmp.Compare(src.Events[b].Size, src.Events[a].Size), cmp.Compare(a, b))
	})
	o.LargestLive = make([]*FailingAllocation, 0, min(len(live), largestLiveShown))
	for _, i := range live[:min(len(live), largestLiveShown)] {
		o.LargestLive = append(o.LargestLive, failingAllocation(src, i))
	}
}

// liveBefore lists the alloc events of the allocations live just before
// event at, in event order: an alloc makes its ID live (an alloc of a live
// ID frees the old one first, as the replays do), a free ends it (a held
// free too: its live bytes end there), an alloc_failed is never live.
func liveBefore(events []trace.Event, at int) []int {
	live := map[uint64]int{}
	for i, e := range events[:min(max(at, 0), len(events))] {
		switch e.Op {
		case trace.OpAlloc:
			live[e.ID] = i
		case trace.OpFree:
			delete(live, e.ID)
		}
	}
	out := make([]int, 0, len(live))
	for _, i := range live {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// fitsInsteadCandidates are the policies an explanation replays when none
// of the comparison's fits: gpumem's adaptive policy and PyTorch with
// expandable segments, the two that do not leave memory in pieces of the
// sizes freed.
var fitsInsteadCandidates = []string{Adaptive, TorchExpandable}

// explainFits fills FitsInstead for every fragmentation or cache verdict
// of c: the policies of c whose verdict fits; when none does and extra is
// set, fitsInsteadCandidates not in c, each replayed at the capacity once.
// Advise passes extra false: its grid is the set of settings it answers
// for.
func (c *Comparison) explainFits(ctx context.Context, src Source, opts Options, extra bool) error {
	var fits, open []string
	for _, p := range c.Policies {
		if v := p.Verdict; v != nil {
			if v.Fits {
				fits = append(fits, p.Name)
			} else if v.OutOfMemory != nil && v.OutOfMemory.Cause != CauseExhaustion {
				open = append(open, p.Name)
			}
		}
	}
	if len(open) == 0 {
		return nil
	}
	if len(fits) == 0 && extra {
		how := opts.device()
		how.torchBase, _ = torchBase(src, opts)
		maxPage, _ := recordedSettings(src, &opts, &how)
		for _, name := range fitsInsteadCandidates {
			if slices.ContainsFunc(c.Policies, func(p PolicyResult) bool { return p.Name == name }) {
				continue
			}
			v, err := verdictAt(ctx, name, src.Events, opts.Capacity-opts.Overhead, maxPage, how, nil)
			if err != nil {
				return fmt.Errorf("policy %s: %w", name, err)
			}
			if v.Fits {
				fits = append(fits, name)
			}
		}
	}
	for i := range c.Policies {
		if v := c.Policies[i].Verdict; v != nil && v.OutOfMemory != nil && v.OutOfMemory.Cause != CauseExhaustion {
			v.OutOfMemory.FitsInstead = slices.Clone(fits)
		}
	}
	return nil
}

// writeCause writes the explanation under a policy's out-of-memory line:
// the cause and its figures, then the largest live allocations (once per
// list: a later policy whose list is the same points to the first, as
// shown records).
func (o *OutOfMemory) writeCause(b *strings.Builder, capacity uint64, policy string, shown map[string]string) {
	if o.Cause == "" {
		return
	}
	var l strings.Builder
	here := fmt.Sprintf("%s live and %s requested", units.Bytes(o.Live), units.Bytes(o.Request))
	switch o.Cause {
	case CauseExhaustion:
		switch {
		case o.Live+o.Request <= capacity:
			fmt.Fprintf(&l, "cause: exhaustion. The run's peak live bytes, %s, pass the %s the allocator has: no allocator fits this run; shed at least %s. (Here %s fit, but the peak is still to come.)",
				units.Bytes(o.peakLive), units.Bytes(capacity), units.Bytes(o.Shed), here)
		case o.peakLive > o.Live+o.Request:
			fmt.Fprintf(&l, "cause: exhaustion. %s pass the %s the allocator has, and the run's peak, %s, is still to come: no allocator fits this run; shed at least %s.",
				here, units.Bytes(capacity), units.Bytes(o.peakLive), units.Bytes(o.Shed))
		default:
			fmt.Fprintf(&l, "cause: exhaustion. %s pass the %s the allocator has: no allocator fits this run; shed at least %s.",
				here, units.Bytes(capacity), units.Bytes(o.Shed))
		}
	case CauseCache:
		fmt.Fprintf(&l, "cause: cache. %s fit in %s, and the request would fit in the %s free on the device once the %s the allocator holds for other streams or pools (a CUDA graph's private pool, a capture underway, frees awaiting other streams' work) went back; its out-of-memory path does not release them. Release them first: close the graphs no longer needed (PyTorch then needs torch.cuda.empty_cache()), or let the other streams' work finish.",
			here, units.Bytes(capacity), units.Bytes(o.FreeOnDevice), units.Bytes(o.Held))
	default:
		fmt.Fprintf(&l, "cause: fragmentation. %s fit in %s (so does the run's peak, %s), but no free block is large enough: %s free on the device, %s free in reserved memory",
			here, units.Bytes(capacity), units.Bytes(o.peakLive), units.Bytes(o.FreeOnDevice), units.Bytes(o.FreeInPages))
		if o.LargestFree > 0 {
			fmt.Fprintf(&l, " (largest free block %s)", units.Bytes(o.LargestFree))
		}
		l.WriteString(".")
	}
	if o.Cause != CauseExhaustion {
		if len(o.FitsInstead) > 0 {
			fmt.Fprintf(&l, " Fits instead at %s (each replayed there): %s.", units.Bytes(capacity), strings.Join(o.FitsInstead, ", "))
		} else {
			fmt.Fprintf(&l, " No policy or setting replayed fits %s.", units.Bytes(capacity))
		}
	}
	if o.Refusal != "" {
		fmt.Fprintf(&l, " The allocator refused it for another reason than room: %s.", o.Refusal)
	}
	var wrapped strings.Builder
	writeWrapped(&wrapped, l.String(), proseWidth)
	for _, line := range strings.SplitAfter(wrapped.String(), "\n") {
		if line != "" {
			b.WriteString("  " + line)
		}
	}
	if len(o.LargestLive) == 0 {
		return
	}
	var key string
	var sum uint64
	for _, a := range o.LargestLive {
		key += fmt.Sprint(" ", a.Event)
		sum += a.Size
	}
	fmt.Fprintf(b, "  the %d largest of the %d allocations live then (%s of the %s live)", len(o.LargestLive), o.LiveAllocations, units.Bytes(sum), units.Bytes(o.Live))
	if first, ok := shown[key]; ok {
		fmt.Fprintf(b, ": the same as for %s above\n", first)
		return
	}
	shown[key] = policy
	b.WriteString(":\n")
	rows := make([][2]string, len(o.LargestLive))
	w := 0
	for i, a := range o.LargestLive {
		rows[i][0] = units.Bytes(a.Size).String()
		w = max(w, len(rows[i][0]))
		rows[i][1] = a.place()
		if len(a.Frames) > 0 {
			rows[i][1] += "  " + a.Frames[0].short()
		}
	}
	for _, r := range rows {
		b.WriteString(cutLine(fmt.Sprintf("    %*s  %s", w, r[0], r[1]), DefaultTextWidth) + "\n")
	}
}

// short is the frame as a list row shows it: the file's last two path
// elements, so that a row keeps to the report's width while the file
// stays recognisable ("cs336_basics/transformer.py:79 forward"); the JSON
// has the whole path.
func (f Frame) short() string {
	g := f
	if i := strings.LastIndexByte(g.File, '/'); i >= 0 {
		if j := strings.LastIndexByte(g.File[:i], '/'); j >= 0 {
			g.File = g.File[j+1:]
		}
	}
	return strings.Replace(g.String(), "  ", " ", 1)
}

// cutLine cuts s to width columns, ending it with "…" when cut.
func cutLine(s string, width int) string {
	r := []rune(s)
	if width <= 1 || len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}

// place names an allocation where the user finds it, without its size:
// "device_traces entry 12 (event 40), stream 0", "event 40, stream 0", or
// a prelude block.
func (a *FailingAllocation) place() string {
	switch {
	case a.Entry != nil:
		return fmt.Sprintf("device_traces entry %d (event %d), stream %d", *a.Entry, a.Event, a.Stream)
	case a.Prelude:
		return fmt.Sprintf("event %d, stream %d, live before the trace began", a.Event, a.Stream)
	}
	return fmt.Sprintf("event %d, stream %d", a.Event, a.Stream)
}
