package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/storage"
)

// Errors Run returns for inputs it refuses.
var (
	// ErrUnknownPolicy is returned for a policy name Run does not know (or
	// "torch:" with no setting); a torch:CONF whose CONF PyTorch's parser
	// would refuse returns that *torch.ConfError instead, naming the policy.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrEmptyTrace is returned for a trace without events: there is
	// nothing to compare.
	ErrEmptyTrace = errors.New("empty trace")
	// ErrCapacity is returned when Options.Overhead leaves no room in
	// Options.Capacity.
	ErrCapacity = errors.New("capacity too small")

	// ErrHostTooSmall is returned for a host replay (Options.Host) that the
	// machine's memory cannot hold.
	ErrHostTooSmall = errors.New("the host cannot hold this replay")
)

// Policy names.
const (
	// Adaptive is the default memory on granular storage: pages map the
	// granules their live slices cover, with relocation.
	Adaptive = "adaptive"
	// AdaptivePages is the adaptive memory with pages backed whole (page
	// granularity), with relocation.
	AdaptivePages = "adaptive-pages"
	// AdaptiveNoRelocate is Adaptive (granular) without relocation.
	AdaptiveNoRelocate = "adaptive-norelocate"
	// AdaptivePagesNoRelocate is AdaptivePages without relocation: what
	// relocation buys where there is no virtual memory.
	AdaptivePagesNoRelocate = "adaptive-pages-norelocate"
	Exclusive               = "exclusive"
	Torch                   = "torch"
)

// Policies lists every policy, in report order.
func Policies() []string {
	return []string{Adaptive, AdaptivePages, AdaptiveNoRelocate, AdaptivePagesNoRelocate, Exclusive, Torch, TorchExpandable}
}

// DefaultBandwidth is the device copy bandwidth relocation time is
// estimated at (B/s): about an H100's or H200's device-to-device copy rate.
const DefaultBandwidth = 2.0e12

// Source is one trace to compare.
type Source struct {
	Name   string
	Events []trace.Event
	// PyTorch is what PyTorch itself recorded (snapshots only; nil
	// otherwise). FromSnapshot fills it.
	PyTorch *PyTorch
	// RecordedTimeline is PyTorch's reserved bytes after given events.
	RecordedTimeline []replay.Point
	// TorchRecorded is the segment PyTorch placed each alloc event in
	// (trace.Snapshot.Placements), for the torch policy's addresses.
	TorchRecorded []torch.RecordedSegment
	// TorchSettings are the settings PyTorch recorded in the snapshot
	// (FromSnapshot), the torch policy's base unless Options.TorchSettings
	// is set; nil means PyTorch's defaults.
	TorchSettings *torch.Settings
	// Warnings are counted oddities of the input (ignored frees, …).
	Warnings map[string]int
	// EventEntries and StreamHandles map events back to the snapshot
	// (trace.Snapshot's fields of those names; nil for a native trace), so
	// a failing allocation is named as the user finds it there.
	EventEntries  []int32
	StreamHandles []uint64
	// Frames, when set, reads the stack frames of the given entries of
	// the snapshot (trace.Snapshot.ReadFrames; FramesFromFile reads them
	// from the snapshot's file), for Options.Frames.
	Frames func(entries []int) (map[int][]trace.TorchFrame, error)
	// Device is how the device that recorded a native trace ran (its
	// header's, DecodeTrace reads it; nil for a snapshot or a trace
	// without one). Run replays as that device ran unless Options say
	// otherwise: its largest page for every gpumem policy, its capacity
	// for the verdict, its alignment, no compaction when it had none
	// (Comparison.FromTrace names what it took).
	Device *trace.Device
}

// DecodeTrace reads a native JSONL trace (trace.DecodeWithHeader) into a
// Source named name, with the recording device of its header. A trace
// without events is ErrEmptyTrace; a bad line is the decoder's error,
// naming it.
func DecodeTrace(name string, r io.Reader) (Source, error) {
	var h trace.Header
	var events []trace.Event
	for e, err := range trace.DecodeWithHeader(r, &h) {
		if err != nil {
			return Source{}, fmt.Errorf("reading %s: %w", name, err)
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return Source{}, fmt.Errorf("%w: %s has no events", ErrEmptyTrace, name)
	}
	return Source{Name: name, Events: slices.Clip(events), Device: h.Device}, nil
}

// Options tunes Run.
type Options struct {
	Policies  []string // nil = every policy
	Bandwidth float64  // 0 = DefaultBandwidth
	// SkipCapacity turns off the capacity search (faster).
	SkipCapacity bool
	// Timeline points per policy (0 = none).
	Timeline int
	// Host replays gpumem policies on host storage (real bytes, small
	// traces only) instead of Sim. Run first replays each gpumem policy
	// on Sim to learn the most any of them reserves, and refuses
	// (ErrHostTooSmall) a replay whose need (that, the heap in use and
	// the replay's own bookkeeping) passes HostShare of the host's memory
	// (hoststorage.MachineMemoryLimit), or a Capacity above that memory,
	// before any host replay: the kernel would kill the process instead.
	// While it replays, Run lowers the process's soft memory limit
	// (runtime/debug.SetMemoryLimit) to that need and then restores it,
	// so that pages the replays give back are collected before the heap
	// passes it.
	Host bool
	// Capacity, when set, is the device capacity the verdict is given
	// for: every policy also replays at Capacity − Overhead and says
	// whether it fits (PolicyResult.Verdict). The unlimited replay and the
	// search run regardless.
	Capacity uint64
	// Overhead is device memory outside the allocator (CUDA context,
	// library workspaces): the allocator gets Capacity − Overhead, and the
	// smallest device is the smallest capacity plus Overhead.
	Overhead uint64
	// Progress is told which policy and step runs, and how far it is. The
	// policies replay side by side (runPolicies): it is called from several
	// goroutines, one at a time, their reports interleaved.
	Progress func(policy, step string, done, total int)
	// Open, when set, opens every device a gpumem policy replays on, in
	// place of gpumem.Open (for example cuda.OpenDevice with its options
	// bound): the replay then runs on that backend, WithSim is not passed
	// and Host is ignored. The options it gets are the policy's.
	Open func(opts ...gpumem.Option) (*gpumem.Device, error)
	// Alignment is the allocation alignment in the properties the policies'
	// devices get (0 = storage.DefaultAlignment). A backend whose storage
	// aligns allocations more coarsely needs its own (cuda: 256).
	Alignment uint64
	// TorchSettings, when set, are the torch policy's settings in place of
	// the snapshot's recorded ones (the CLI's -torch-conf).
	TorchSettings *torch.Settings
	// EnvTorchSettings, when set, are PYTORCH_CUDA_ALLOC_CONF of the
	// environment gpumem runs in: the torch policy's settings (and
	// advise's "as it is") when neither TorchSettings nor the snapshot
	// says otherwise (see torchBase).
	EnvTorchSettings *torch.Settings
	// CapacityNotes are lines about Capacity and Overhead as the user
	// gave them, written with the capacity (the CLI's: a decimal unit
	// echoed with its binary value, "-capacity 80GB = 74.51 GiB; …").
	CapacityNotes []string
	// NoCompact opens every gpumem policy's device WithoutCompaction (the
	// CLI's -nocompact): what compacting current pages buys is the
	// difference from a run without it.
	NoCompact bool
	// Frames is how many stack frames each failing allocation of a
	// snapshot gets (FailingAllocation.Frames), read through
	// Source.Frames after the replays; 0: none.
	Frames int

	// noAddressDependence skips the torch policies' second search under
	// the other address convention (PolicyResult.Addresses): advise's
	// grid, whose report does not show it, runs a search per setting.
	noAddressDependence bool
}

// deviceOptions are the Options fields that choose how a policy's device
// opens; the capacity search opens the same devices as the replay.
type deviceOptions struct {
	host      bool
	open      func(opts ...gpumem.Option) (*gpumem.Device, error)
	alignment uint64
	noCompact bool
	// torchBase is the torch policy's settings (see torchSettings).
	torchBase torch.Settings
	// torchRecorded is the snapshot's segment per event (Source.TorchRecorded).
	torchRecorded []torch.RecordedSegment
	// torchAddresses is where the torch model puts segments torchRecorded
	// does not place (addresses.go).
	torchAddresses torch.AddressConvention
}

func (o Options) device() deviceOptions {
	return deviceOptions{host: o.Host, open: o.Open, alignment: o.Alignment, noCompact: o.NoCompact}
}

// PolicyResult is one policy's figures. PeakReserved, Relocations,
// BytesMoved and CopySeconds come from the replay at unlimited capacity;
// the MinCapacity* figures from the replay at the smallest capacity; the
// Verdict from the replay at Options.Capacity.
//
// MinCapacity (min_capacity_bytes) is the smallest capacity the search
// found (see minCapacity): the trace ran clean at it and failed at 1 MiB
// less (or it is the peak live bytes rounded up to a MiB, below which
// nothing runs). Out-of-memory is not always monotonic in capacity, so it
// is not proven the global minimum. 0 means not searched: -no-search
// (Options.SkipCapacity), a replay with failed allocations, or no capacity
// up to 2^60 bytes ran clean. CapacityProbes counts the replays the search
// ran.
type PolicyResult struct {
	Name             string  `json:"name"`
	PeakReserved     uint64  `json:"peak_reserved_bytes"`
	ReservedOverLive float64 `json:"reserved_over_peak_live"`
	MinCapacity      uint64  `json:"min_capacity_bytes"`
	MinCapacityOver  float64 `json:"min_capacity_over_peak_live"`
	CapacityProbes   int     `json:"capacity_probes"`
	// MinDevice is MinCapacity plus Options.Overhead: the smallest device
	// the workload runs on.
	MinDevice              uint64  `json:"min_device_bytes"`
	MinCapacityRelocations uint64  `json:"min_capacity_relocations"`
	MinCapacityBytesMoved  uint64  `json:"min_capacity_bytes_moved"`
	MinCapacityCopySeconds float64 `json:"min_capacity_copy_seconds"`
	// MinCapacityCompactions, …CompactBytesMoved and …CompactPagesFreed
	// are compaction's share at the smallest capacity (its bytes are also
	// in MinCapacityBytesMoved): what compacting current pages did to make
	// the workload fit there.
	MinCapacityCompactions       uint64  `json:"min_capacity_compactions"`
	MinCapacityCompactBytesMoved uint64  `json:"min_capacity_compact_bytes_moved"`
	MinCapacityCompactPagesFreed uint64  `json:"min_capacity_compact_pages_freed"`
	Relocations                  uint64  `json:"relocations"`
	BytesMoved                   uint64  `json:"bytes_moved"`
	CopySeconds                  float64 `json:"copy_seconds"`
	// ReplaySeconds is the unlimited replay's wall time; on Sim storage
	// the other policies replay beside it (runPolicies), sharing the CPUs.
	ReplaySeconds float64 `json:"replay_seconds"`
	FailedAllocs  int     `json:"failed_allocs"`
	// FirstFailed names the first allocation the policy failed at
	// unlimited capacity (its device_traces entry for a snapshot), absent
	// when none failed.
	FirstFailed *FailingAllocation `json:"first_failed_allocation,omitempty"`
	// TorchConf is a PyTorch policy's settings as a PYTORCH_CUDA_ALLOC_CONF
	// line ("" for PyTorch's defaults); absent for gpumem's policies.
	TorchConf *string `json:"pytorch_alloc_conf,omitempty"`
	// PeakEvent is the first event after which PeakReserved was held.
	PeakEvent int `json:"peak_event"`
	// Breakdown says where the reserved bytes that were not live sat at
	// the peak.
	Breakdown         *Breakdown     `json:"breakdown_at_peak,omitempty"`
	Verdict           *Verdict       `json:"verdict,omitempty"`
	MinCapacityReport *replay.Report `json:"at_min_capacity,omitempty"`
	Report            *replay.Report `json:"replay,omitempty"`
	Timeline          []replay.Point `json:"-"`

	// MinCapacitySlowPath is what fitting the smallest capacity cost
	// (slow_path.go); Verdict.SlowPath is the same at Options.Capacity.
	MinCapacitySlowPath *SlowPath `json:"min_capacity_slow_path,omitempty"`
	// Addresses is, for a torch policy, how much its smallest capacity
	// depends on the addresses the model invents for segments no
	// recording places (addresses.go); absent when it invented none there,
	// when no smallest capacity was found, and in advise's grid.
	Addresses *AddressDependence `json:"address_convention,omitempty"`
}

// Comparison is Run's result.
type Comparison struct {
	Trace    string `json:"trace"`
	Events   int    `json:"events"`
	PeakLive uint64 `json:"peak_live_bytes"`
	// Recorded is PyTorch's peak reserve over the window (PyTorch's
	// PeakReserved), nil when the trace is not a snapshot.
	Recorded *uint64  `json:"recorded_reserved_bytes"`
	PyTorch  *PyTorch `json:"pytorch,omitempty"`
	// Capacity and Overhead are Options'; 0 Capacity means none was
	// given (no verdict).
	Capacity uint64 `json:"capacity_bytes"`
	Overhead uint64 `json:"overhead_bytes"`
	// CapacityNotes are Options'.
	CapacityNotes []string `json:"capacity_notes,omitempty"`
	// LiveOverCapacity is how far the peak live bytes pass the capacity
	// the allocator has (Capacity − Overhead): no policy and no allocator
	// setting can fit, and that much live memory must go. 0 when they do
	// not pass it or no capacity was given.
	LiveOverCapacity uint64 `json:"live_over_capacity_bytes,omitempty"`
	// TorchSettingsFrom says where the torch policy's settings came from:
	// one of the SettingsFrom constants.
	TorchSettingsFrom string  `json:"torch_settings_from"`
	Bandwidth         float64 `json:"bandwidth_bytes_per_second"`
	MaxPage           uint64  `json:"max_page_bytes"`
	// FromTrace names the settings taken from the trace's recording device
	// (Source.Device) because no option set them: "max page", "capacity",
	// "alignment", "no compaction". DevicePolicy is the gpumem policy that
	// device ran ("" when the trace does not say), and DeviceNotes what of
	// it no policy reproduces.
	FromTrace    []string       `json:"settings_from_trace,omitempty"`
	DevicePolicy string         `json:"device_policy,omitempty"`
	DeviceNotes  []string       `json:"device_notes,omitempty"`
	Warnings     map[string]int `json:"warnings,omitempty"`
	// FramesError says why the failing allocations have no stack frames
	// when reading them failed (Options.Frames); the verdicts stand.
	FramesError string         `json:"frames_error,omitempty"`
	Policies    []PolicyResult `json:"policies"`
	Recording   []replay.Point `json:"-"`
	// firstT and lastT are the first and last events' trace times.
	firstT, lastT int64
	// advice, set on the copy gpumem advise renders, makes the HTML page
	// advise's: its title and the advice first (advise_html.go).
	advice *Advice
	// baseConf is the settings PyTorch recorded as a conf line
	// (recordedConf).
	baseConf string
}

// Where the settings the workload runs with come from
// (Comparison.TorchSettingsFrom, Advice.BaselineFrom).
const (
	SettingsFromTorchConf   = "-torch-conf"
	SettingsFromSnapshot    = "the snapshot's allocator_settings"
	SettingsFromEnvironment = "PYTORCH_CUDA_ALLOC_CONF in the environment"
	SettingsFromDefaults    = "PyTorch's defaults"
)

// torchBase is the settings the workload runs with, the torch policy's
// and advise's "as it is", and which of SettingsFrom they are: the
// -torch-conf settings (Options.TorchSettings), else those the snapshot
// recorded (its allocator_settings: what the run had), else
// PYTORCH_CUDA_ALLOC_CONF of gpumem's environment (Options.EnvTorchSettings,
// for a snapshot that recorded none or a native trace), else PyTorch's
// defaults.
func torchBase(src Source, opts Options) (torch.Settings, string) {
	switch {
	case opts.TorchSettings != nil:
		return *opts.TorchSettings, SettingsFromTorchConf
	case src.TorchSettings != nil:
		return *src.TorchSettings, SettingsFromSnapshot
	case opts.EnvTorchSettings != nil:
		return *opts.EnvTorchSettings, SettingsFromEnvironment
	}
	return torch.Settings{}, SettingsFromDefaults
}

// recordedConf is the conf line of the settings PyTorch ran the trace with:
// the snapshot's allocator_settings, else PyTorch's defaults. The model's
// peak is held against the recorded one only for a row with these settings
// (not -torch-conf's, which PyTorch did not run).
func recordedConf(src Source) string {
	if src.TorchSettings == nil {
		return ""
	}
	return src.TorchSettings.String()
}

// Run replays src under each policy.
func Run(ctx context.Context, src Source, opts Options) (*Comparison, error) {
	return run(ctx, src, opts, true)
}

// run is Run; explainFits says whether an out-of-memory not caused by
// exhaustion is told which policies fit instead (Advise tells it once for
// its whole grid).
func run(ctx context.Context, src Source, opts Options, explainFits bool) (*Comparison, error) {
	names := opts.Policies
	if len(names) == 0 {
		names = Policies()
	}
	for _, n := range names {
		if err := checkPolicy(n); err != nil {
			return nil, err
		}
	}
	how := opts.device()
	how.torchRecorded = src.TorchRecorded
	base, settingsFrom := torchBase(src, opts)
	how.torchBase = base
	bw := opts.Bandwidth
	if bw <= 0 {
		bw = DefaultBandwidth
	}
	if len(src.Events) == 0 {
		return nil, fmt.Errorf("%w: %s has no events", ErrEmptyTrace, src.Name)
	}
	maxPage, rec := recordedSettings(src, &opts, &how)
	if opts.Capacity > 0 && opts.Overhead >= opts.Capacity {
		return nil, fmt.Errorf("%w: overhead %s leaves nothing of capacity %s", ErrCapacity, units.Bytes(opts.Overhead), units.Bytes(opts.Capacity))
	}
	peak, err := peakLive(src.Events)
	if err != nil {
		return nil, err
	}
	if opts.Host && opts.Open == nil {
		plan, err := planHost(ctx, names, src.Events, maxPage, how, opts.Progress)
		if err != nil {
			return nil, err
		}
		if err := hostHolds(plan, opts.Capacity, hoststorage.MachineMemoryLimit()); err != nil {
			if slices.Contains(rec.from, "capacity") {
				err = fmt.Errorf("%w (that capacity is the trace's recording device's; -capacity judges another)", err)
			}
			return nil, err
		}
		defer boundHeap(plan)()
	}
	c := &Comparison{
		Trace:             src.Name,
		Events:            len(src.Events),
		PeakLive:          peak,
		Bandwidth:         bw,
		MaxPage:           maxPage,
		FromTrace:         rec.from,
		DevicePolicy:      rec.policy,
		DeviceNotes:       rec.notes,
		Warnings:          src.Warnings,
		Recording:         src.RecordedTimeline,
		PyTorch:           src.PyTorch,
		Capacity:          opts.Capacity,
		Overhead:          opts.Overhead,
		firstT:            src.Events[0].T,
		TorchSettingsFrom: settingsFrom,
		CapacityNotes:     opts.CapacityNotes,
		baseConf:          recordedConf(src),
		lastT:             src.Events[len(src.Events)-1].T,
	}
	if opts.Capacity > 0 && peak > opts.Capacity-opts.Overhead {
		c.LiveOverCapacity = peak - (opts.Capacity - opts.Overhead)
	}
	if src.PyTorch != nil {
		r := src.PyTorch.PeakReserved
		c.Recorded = &r
	}
	results, err := runPolicies(ctx, names, src.Events, c, opts, how)
	if err != nil {
		return nil, err
	}
	for _, res := range results {
		if r := res.Report; r != nil && res.FailedAllocs > 0 && r.FirstFailure >= 0 {
			res.FirstFailed = failingAllocation(src, r.FirstFailure)
		}
		if v := res.Verdict; v != nil && v.OutOfMemory != nil {
			v.Allocation = failingAllocation(src, v.OutOfMemory.Event)
			v.OutOfMemory.explain(src, v.Capacity, peak)
		}
		res.CopySeconds = float64(res.BytesMoved) / bw
		res.MinCapacityCopySeconds = float64(res.MinCapacityBytesMoved) / bw
		if res.MinCapacity > 0 {
			res.MinDevice = res.MinCapacity + opts.Overhead
			if res.Verdict != nil {
				res.Verdict.setMargin(opts.Capacity, res.MinDevice)
			}
		}
		if c.PeakLive > 0 {
			res.ReservedOverLive = float64(res.PeakReserved) / float64(c.PeakLive)
			res.MinCapacityOver = float64(res.MinCapacity) / float64(c.PeakLive)
		}
		c.Policies = append(c.Policies, res)
	}
	if src.PyTorch != nil && src.PyTorch.FirstAllocEvent >= 0 {
		// The model's accuracy, as the recording ran: the torch row with
		// the recorded settings when one ran, else one replay of the model.
		// At the capacity the recording shows, when it shows one: its
		// out-of-memory path released cache there, and so must the model.
		p := *src.PyTorch
		c.PyTorch = &p
		model, ran := uint64(0), false
		capacity := p.modelCapacity()
		for _, r := range c.Policies {
			if capacity == 0 && r.TorchConf != nil && *r.TorchConf == c.baseConf {
				model, ran = r.PeakReserved, true
				break
			}
		}
		if !ran {
			var settings torch.Settings
			if src.TorchSettings != nil {
				settings = *src.TorchSettings
			}
			res, err := torch.Replay(slices.Values(src.Events), torch.Config{Capacity: capacity, Settings: settings, Recorded: src.TorchRecorded})
			if err != nil {
				return nil, fmt.Errorf("the torch model as recorded: %w", err)
			}
			model, p.ModelFailedAllocs = res.PeakReserved, res.FailedAllocs
		}
		p.ModelCapacity = capacity
		p.modelAccuracy(model)
	}
	if explainFits {
		if err := c.explainFits(ctx, src, opts, true); err != nil {
			return nil, err
		}
	}
	c.addFrames(src, opts.Frames)
	return c, nil
}

// maxLive bounds a trace's live bytes: every sum the replays keep stays
// below 2^64 with room to spare.
const maxLive = uint64(1) << 63

// peakLive is the highest sum of live requested sizes. A trace whose live
// bytes pass 2^63 is refused with an error naming the event, as is an
// invalid event (an alloc above trace.MaxSize would break that bound) and
// a time before the previous event's (the report's spans and timelines
// assume the native format's non-decreasing t).
func peakLive(events []trace.Event) (uint64, error) {
	live := make(map[uint64]uint64)
	var cur, peak uint64
	for i, e := range events {
		if err := e.Validate(); err != nil {
			return 0, fmt.Errorf("event %d: %w", i, err)
		}
		if i > 0 && e.T < events[i-1].T {
			return 0, fmt.Errorf("%w: event %d: time %d before the previous event's %d (times must not decrease)", trace.ErrInvalidEvent, i, e.T, events[i-1].T)
		}
		switch e.Op {
		case trace.OpAlloc:
			if old, ok := live[e.ID]; ok {
				cur -= old
			}
			live[e.ID] = e.Size
			cur = storage.SatAdd(cur, e.Size)
			if cur > maxLive {
				return 0, fmt.Errorf("%w: event %d: live bytes exceed 2^63", trace.ErrInvalidEvent, i)
			}
			peak = max(peak, cur)
		case trace.OpFree:
			if s, ok := live[e.ID]; ok {
				cur -= s
				delete(live, e.ID)
			}
		}
	}
	return peak, nil
}

// maxPageFor is the max page every gpumem policy uses: 1 GiB, or more when
// the trace holds a larger allocation (C1).
func maxPageFor(events []trace.Event) uint64 {
	page := uint64(1 << 30)
	for _, e := range events {
		if e.Op == trace.OpAlloc && e.Size+(1<<20) > page {
			page = storage.RoundUp(e.Size+(1<<20), 1<<20)
		}
	}
	return page
}

// recorded is what Run took from a trace's recording device.
type recorded struct {
	from   []string // the settings taken, as Comparison.FromTrace names them
	policy string   // the device's gpumem policy
	notes  []string // what of the device no policy reproduces
}

// recordedSettings returns the max page every gpumem policy replays with —
// the recording device's (src.Device) when the trace says, else
// maxPageFor — and fills from that device what opts leaves unset: the
// capacity of the verdict, the alignment (unless opts.Open picks a
// backend, whose alignment is its own), no compaction. A trace replays as
// its device ran unless the caller says otherwise.
func recordedSettings(src Source, opts *Options, how *deviceOptions) (uint64, recorded) {
	d := src.Device
	if d == nil {
		return maxPageFor(src.Events), recorded{}
	}
	rec := recorded{from: []string{"max page"}, policy: devicePolicy(d)}
	if opts.Capacity == 0 && d.Capacity > 0 {
		opts.Capacity = d.Capacity
		rec.from = append(rec.from, "capacity")
	}
	if how.alignment == 0 && how.open == nil && d.Alignment > 0 {
		how.alignment = d.Alignment
		rec.from = append(rec.from, "alignment")
	}
	if d.NoCompact && !how.noCompact {
		how.noCompact = true
		rec.from = append(rec.from, "no compaction")
	}
	if d.Persistent != "" && d.Persistent != memory.Enabled.String() {
		rec.notes = append(rec.notes, "persistent memory "+d.Persistent)
	}
	if d.BaseMode != "" {
		rec.notes = append(rec.notes, "base mode "+d.BaseMode)
	}
	if d.Granule > 0 && d.Granule != hoststorage.DefaultGranule {
		rec.notes = append(rec.notes, fmt.Sprintf("granules of %s (the policies map %s)", units.Bytes(d.Granule), units.Bytes(hoststorage.DefaultGranule)))
	}
	return d.MaxPage, rec
}

// devicePolicy names the gpumem policy a recording device ran.
func devicePolicy(d *trace.Device) string {
	switch {
	case d.Dynamic == memory.ExclusivePages.String():
		return Exclusive
	case d.Granule > 0 && d.NoRelocate:
		return AdaptiveNoRelocate
	case d.Granule > 0:
		return Adaptive
	case d.NoRelocate:
		return AdaptivePagesNoRelocate
	}
	return AdaptivePages
}

// openPolicy opens a Sim device for a gpumem policy at capacity (0 =
// unlimited), or a device through dev.open when set. The granular policies
// (adaptive, adaptive-norelocate) get granular Sim (or host) storage with
// 2 MiB granules, or the backend's own granules; adaptive-pages backs pages
// whole.
func openPolicy(name string, capacity, maxPage uint64, dev deviceOptions) (*gpumem.Device, error) {
	align := dev.alignment
	if align == 0 {
		align = storage.DefaultAlignment
	}
	props := gpumem.Properties{MaxPageSize: maxPage, Alignment: align, MaxMemory: capacity}
	opts := []gpumem.Option{gpumem.WithProperties(props), gpumem.WithCapacity(capacity)}
	if !dev.host && dev.open == nil {
		opts = append(opts, gpumem.WithSim())
	}
	switch name {
	case Adaptive:
		opts = append(opts, gpumem.WithPageGranular(true))
	case AdaptivePages:
		opts = append(opts, gpumem.WithPageGranular(false))
	case AdaptiveNoRelocate:
		opts = append(opts, gpumem.WithPageGranular(true), gpumem.WithoutRelocation())
	case AdaptivePagesNoRelocate:
		opts = append(opts, gpumem.WithPageGranular(false), gpumem.WithoutRelocation())
	case Exclusive:
		opts = append(opts, gpumem.WithMemoryConfig(gpumem.MemoryConfig{Dynamic: gpumem.ExclusivePages}))
	}
	if dev.noCompact {
		opts = append(opts, gpumem.WithoutCompaction())
	}
	if dev.open != nil {
		return dev.open(opts...)
	}
	return gpumem.Open(opts...)
}

// replayMode is what a replay is for, which decides where it may stop and
// what its report must hold.
type replayMode uint8

const (
	// fullReplay runs every event: the unlimited replay, every figure.
	fullReplay replayMode = iota
	// failFastReplay stops at the first failed allocation and describes
	// the state there (a verdict at a capacity).
	failFastReplay
	// probeReplay stops at the first failed allocation and needs only the
	// failure: a capacity probe, whose report minCapacity drops when an
	// allocation failed. The torch model then skips the second replay that
	// describes its state and the timeline that finds its peak event.
	probeReplay
)

// replayOnce replays events under a policy at capacity, for mode, and
// returns the figures that matter for the search and the report.
func replayOnce(ctx context.Context, name string, events []trace.Event, capacity, maxPage uint64, how deviceOptions, mode replayMode, timeline int, progress func(done, total int)) (*replay.Report, error) {
	if isTorch(name) {
		settings, err := torchSettings(name, how.torchBase)
		if err != nil {
			return nil, err
		}
		return replayTorch(ctx, events, capacity, settings, how, mode, timeline, progress)
	}
	dev, err := openPolicy(name, capacity, maxPage, how)
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	return replay.Run(ctx, dev, slices.Values(events), replay.Options{
		Total: len(events), FailFast: mode != fullReplay, Timeline: timeline, Progress: progress,
	})
}

// watched is events as a sequence for the torch model that, as replay.Run
// does for a device's replay, tells progress (nil: nothing) how far its
// reader got, every progressEvery events and where the reader stopped, and
// ends early once ctx has (the caller then reads ctx.Err()): the torch
// model's replays show on the progress bar, and stop with the others.
func watched(ctx context.Context, events []trace.Event, progress func(done, total int)) iter.Seq[trace.Event] {
	return func(yield func(trace.Event) bool) {
		for i, e := range events {
			if i > 0 && i%progressEvery == 0 {
				if ctx.Err() != nil {
					return
				}
				if progress != nil {
					progress(i, len(events))
				}
			}
			if !yield(e) {
				if progress != nil {
					progress(i+1, len(events))
				}
				return
			}
		}
		if progress != nil {
			progress(len(events), len(events))
		}
	}
}

// progressEvery is how many events pass between two progress reports of a
// torch model's replay (replay.Run's default for a device's).
const progressEvery = 1 << 16

// replayTorch runs the PyTorch caching-allocator model and reports it in
// the replay's terms: its reserve as the device bytes, the event where it
// peaked, the state at the first failed allocation, and (timeline > 0) the
// same downsampled timeline a device replay records.
func replayTorch(ctx context.Context, events []trace.Event, capacity uint64, settings torch.Settings, how deviceOptions, mode replayMode, timeline int, progress func(done, total int)) (*replay.Report, error) {
	start := time.Now()
	cfg := torch.Config{Capacity: capacity, Settings: settings, FailFast: mode != fullReplay, Recorded: how.torchRecorded, Addresses: how.torchAddresses}
	res, err := torch.Replay(watched(ctx, events, progress), cfg)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // the replay stopped short: its figures are not the trace's
	}
	rep := &replay.Report{
		Backend:      "torch-model",
		Events:       res.Events,
		Allocs:       res.Allocs,
		Frees:        res.Frees,
		IgnoredFrees: res.IgnoredFrees,
		ImpliedFrees: res.ImpliedFrees,
		Cleanups:     res.Cleanups,
		Skipped:      res.Skipped,
		FailedAllocs: res.FailedAllocs,
		FirstFailure: res.FirstFailure,
		PeakLive:     res.PeakLive,
		PeakDevice:   res.PeakReserved,
		FinalDevice:  res.FinalReserved,
		WallSeconds:  time.Since(start).Seconds(),
		// The model's slow path in the report's terms (slowPathOf):
		// num_alloc_retries are reservations retried after the cache
		// went back; num_device_alloc and num_device_free (cudaMalloc and
		// cudaFree, or page mappings with expandable segments) are its
		// storage calls.
		ReserveRetries:  uint64(res.Stats.AllocRetries),
		StorageAllocs:   uint64(res.Stats.SegmentAllocs + res.Stats.SegmentMaps),
		StorageDeallocs: uint64(res.Stats.SegmentFrees + res.Stats.SegmentUnmaps),
	}
	if res.PeakLive > 0 {
		rep.Fragmentation = float64(res.PeakReserved) / float64(res.PeakLive)
	}
	if mode == probeReplay && res.FirstFailure >= 0 {
		return rep, nil // a failed probe: only the failure counts
	}
	var tl *replay.Timeline
	if timeline > 0 {
		tl = replay.NewTimeline(len(events), timeline)
	}
	rep.PeakDeviceEvent = torchTimeline(events, res.Segments, res.PeakReserved, tl)
	if tl != nil {
		rep.Timeline = tl.Points()
	}
	if f := res.FirstFailure; f >= 0 {
		// The model's state just before the failed request, with the
		// request refused (the model is unchanged by it but for the cache
		// it released trying).
		cfg.FailFast = false
		at, err := torch.Replay(slices.Values(events[:f+1]), cfg)
		if err != nil {
			return nil, err
		}
		rep.FirstFailureState = &replay.FailureState{
			Event: f, T: events[f].T, Request: events[f].Size, Live: at.Stats.Requested, Device: at.FinalReserved,
			FreeInPages: at.FinalReserved - min(at.FinalReserved, at.FinalAllocated), LargestFree: at.FinalLargestFree,
			Held: at.FinalHeld,
		}
		rep.FirstFailureError = fmt.Sprintf("torch model: out of memory allocating %s", units.Bytes(events[f].Size))
	}
	return rep, nil
}

// torchTimeline rebuilds live and reserved bytes per event from the model's
// segment events, feeding tl when set, and returns the first event after
// which the model held peak bytes (−1 when there are no events).
func torchTimeline(events []trace.Event, segs []torch.SegmentEvent, peak uint64, tl *replay.Timeline) int {
	live := make(map[uint64]uint64)
	var cur, reserved uint64
	peakEvent := -1
	j := 0
	for i, e := range events {
		switch e.Op {
		case trace.OpAlloc:
			if old, ok := live[e.ID]; ok {
				cur -= old
			}
			live[e.ID] = e.Size
			cur += e.Size
		case trace.OpFree:
			if s, ok := live[e.ID]; ok {
				cur -= s
				delete(live, e.ID)
			}
		}
		for j < len(segs) && segs[j].Event <= i {
			if segs[j].Release {
				reserved -= min(reserved, segs[j].Size)
			} else {
				reserved += segs[j].Size
			}
			j++
		}
		if peakEvent < 0 && reserved >= peak {
			peakEvent = i
		}
		if tl != nil {
			tl.Add(replay.Point{Event: i, T: e.T, Live: cur, Device: reserved})
		}
	}
	return peakEvent
}

func runPolicy(ctx context.Context, name string, events []trace.Event, c *Comparison, opts Options, how deviceOptions) (PolicyResult, error) {
	progress := func(step string) func(done, total int) {
		if opts.Progress == nil {
			return nil
		}
		return func(done, total int) { opts.Progress(name, step, done, total) }
	}
	rep, err := replayOnce(ctx, name, events, 0, c.MaxPage, how, fullReplay, opts.Timeline, progress("replay"))
	if err != nil {
		return PolicyResult{}, err
	}
	res := PolicyResult{
		Name:          name,
		PeakReserved:  rep.PeakDevice,
		PeakEvent:     rep.PeakDeviceEvent,
		Relocations:   rep.Relocations,
		BytesMoved:    rep.BytesMoved,
		ReplaySeconds: rep.WallSeconds,
		FailedAllocs:  rep.FailedAllocs,
		Report:        rep,
		Timeline:      rep.Timeline,
	}
	if isTorch(name) {
		settings, err := torchSettings(name, how.torchBase)
		if err != nil {
			return PolicyResult{}, err
		}
		conf := settings.String()
		res.TorchConf = &conf
	}
	if res.Breakdown, err = breakdownAt(ctx, name, events, rep.PeakDeviceEvent, c.MaxPage, how); err != nil {
		return PolicyResult{}, err
	}
	if opts.Capacity > 0 {
		if res.Verdict, err = verdictAt(ctx, name, events, opts.Capacity-opts.Overhead, c.MaxPage, how, progress("at capacity")); err != nil {
			return PolicyResult{}, err
		}
	}
	if opts.SkipCapacity || rep.FailedAllocs > 0 {
		return res, nil
	}
	capRes, probes, err := minCapacity(ctx, name, events, c.PeakLive, rep.PeakDevice, c.MaxPage, how, progress)
	if err != nil {
		return PolicyResult{}, err
	}
	res.CapacityProbes = probes
	if capRes != nil {
		res.MinCapacity = capRes.capacity
		res.MinCapacityReport = capRes.rep
		// The figures a capacity-bound device pays: relocations at the
		// smallest device are the ones that made it fit.
		res.MinCapacityRelocations = capRes.rep.Relocations
		res.MinCapacityBytesMoved = capRes.rep.BytesMoved
		res.MinCapacityCompactions = capRes.rep.Compactions
		res.MinCapacityCompactBytesMoved = capRes.rep.CompactBytesMoved
		res.MinCapacityCompactPagesFreed = capRes.rep.CompactPagesFreed
		res.MinCapacitySlowPath = slowPathOf(name, capRes.rep)
		if isTorch(name) && !opts.noAddressDependence {
			if res.Addresses, err = addressDependence(ctx, name, events, c, capRes.capacity, rep.PeakDevice, how, progress); err != nil {
				return PolicyResult{}, err
			}
		}
	}
	return res, nil
}
