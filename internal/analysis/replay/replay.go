// The replay's rules: a trace's events applied, in order, to a gpumem
// device.
//
// Streams are created on demand (trace stream i is the device's i-th
// stream; a stream number outside [0, trace.MaxStreams) stops the replay); IDs
// map to buffers; a failed allocation is counted and the replay goes on
// (its later free is ignored); an alloc of an ID still live frees it first
// (an implied free, counted); capture phases the device refuses are
// counted, never fatal; an allocation on a stream whose capture began and
// has not ended gets a recorded op that writes all of it (recordUse), so
// the graph holds it as a real recording's would. Held releases (design §9.9, §13.1) are replayed
// with the device's stand-ins for queued work: a held free holds its
// buffer (gpumem.Buffer.Hold) before freeing it, and the release of its ID
// lets go (a release with nothing held — its allocation failed here — is
// counted and ignored); a hold opens gpumem.Stream.HoldReleases on its
// stream and a pass passes that stream's oldest open one (a pass with none
// open is skipped). A trace without these replays as before. Live bytes
// end at the free, held or not. A failed allocation the recording device
// saw (alloc_failed) is tried, since the program asked for it, and freed at
// once when it is served: it never counts in live bytes; a refusal here
// counts as a failed allocation like any other, so a replay at the
// device's capacity fails where the device failed, and one with room to
// spare does not. A defragment runs Device.Defragment with its bounds (a
// refusal, while a capture records, is skipped and counted). Live bytes
// are the sum of the live allocations' requested sizes; a trace whose live bytes would pass 2^63 stops the
// replay with an error naming the event. Live, device and reserved
// bytes are sampled after every event, so the peaks are exact. On Sim
// storage nothing is copied and ops run inline, so a replay costs the
// bookkeeping alone.

package replay

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// ErrStopped wraps an error that stopped a replay (not a failed allocation,
// which is counted): a device error, a cancelled context, an event the
// replay refuses (wrapping trace.ErrInvalidEvent).
var ErrStopped = errors.New("replay stopped")

// Options tunes Run.
type Options struct {
	// Total is the number of events, when known, for Progress.
	Total int
	// Progress, when set, is called every ProgressEvery events (default
	// 65536) with the events done so far.
	Progress      func(done, total int)
	ProgressEvery int
	// Timeline, when > 0, records the live and device bytes in about that
	// many buckets of consecutive events, keeping each bucket's lowest and
	// highest of both (R3), for plotting.
	Timeline int
	// FailFast stops at the first failed allocation.
	FailFast bool
}

// Point is one timeline sample: the bytes right after event Event, whose
// trace time is T.
type Point struct {
	Event  int    `json:"event"`
	T      int64  `json:"t"`
	Live   uint64 `json:"live_bytes"`
	Device uint64 `json:"device_bytes"`
}

// FailureState is the device at the first failed allocation: what was
// asked, what was live and what the device held. FreeInPages is held room
// the request did not fit in (free room of mapped pages; for PyTorch's
// model, free cached blocks). LargestFree is the largest free block in
// that room where the allocator can say (PyTorch's model), else 0. Held
// is memory kept for other streams or pools that the allocator's
// out-of-memory path could not take back: gpumem's pending-free slices (a
// held free awaiting another stream's work, a slice a graph binds),
// PyTorch's model's torch.Allocator.Held.
type FailureState struct {
	Event       int    `json:"event"`
	T           int64  `json:"t"`
	Request     uint64 `json:"request_bytes"`
	Live        uint64 `json:"live_bytes"`
	Device      uint64 `json:"device_bytes"`
	FreeInPages uint64 `json:"free_in_pages_bytes"`
	LargestFree uint64 `json:"largest_free_block_bytes,omitempty"`
	Held        uint64 `json:"held_bytes"`
}

// Report is what a replay measured (design §13.4).
type Report struct {
	Backend      string         `json:"backend"`
	Events       int            `json:"events"`
	EventsByOp   map[string]int `json:"events_by_op"`
	Allocs       int            `json:"allocs"`
	Frees        int            `json:"frees"`
	IgnoredFrees int            `json:"ignored_frees"`
	// HeldFrees counts frees whose memory stayed taken until their
	// release; IgnoredReleases releases that found nothing held (the
	// allocation had failed here).
	HeldFrees       int `json:"held_frees"`
	IgnoredReleases int `json:"ignored_releases"`
	// ImpliedFrees counts allocs of an ID still live: the old allocation
	// is freed first (design §13.4).
	ImpliedFrees int `json:"implied_frees"`
	// RecordedFailedAllocs counts the trace's alloc_failed events: the
	// allocations the recording device refused. RecordedFailedAllocsServed
	// counts those this replay served (and freed at once); the others
	// failed here too and are in FailedAllocs.
	RecordedFailedAllocs       int `json:"recorded_failed_allocs"`
	RecordedFailedAllocsServed int `json:"recorded_failed_allocs_served"`
	// Defragments counts the trace's defragment events performed.
	Defragments int `json:"defragments"`
	Cleanups    int `json:"explicit_cleanups"`
	Skipped     int `json:"skipped_events"`

	FailedAllocs       int            `json:"failed_allocs"`
	FailedAllocsByKind map[string]int `json:"failed_allocs_by_kind"`
	FirstFailure       int            `json:"first_failure"` // event index, −1 when none
	FirstFailureError  string         `json:"first_failure_error,omitempty"`
	// FirstFailureState is the device at the first failed allocation.
	FirstFailureState *FailureState `json:"first_failure_state,omitempty"`

	PeakLive   uint64 `json:"peak_live_bytes"`
	FinalLive  uint64 `json:"final_live_bytes"`
	PeakDevice uint64 `json:"peak_device_bytes"`
	// PeakDeviceEvent is the first event after which the device held
	// PeakDevice bytes (−1 when no event ran).
	PeakDeviceEvent int     `json:"peak_device_event"`
	FinalDevice     uint64  `json:"final_device_bytes"`
	FinalReserved   uint64  `json:"final_reserved_bytes"`
	Fragmentation   float64 `json:"fragmentation"` // peak device ÷ peak live

	StorageAllocs   uint64 `json:"storage_allocs"`
	StorageDeallocs uint64 `json:"storage_deallocs"`
	Growths         uint64 `json:"growths"`
	FinalPageSize   uint64 `json:"final_arena_page_size"`

	RelocationsByReason map[string]uint64 `json:"relocations_by_reason"`
	Relocations         uint64            `json:"relocations"` // runs that moved something
	Moves               uint64            `json:"moves"`
	BytesMoved          uint64            `json:"bytes_moved"`
	PagesReleased       uint64            `json:"pages_released"`
	BytesReleased       uint64            `json:"bytes_released"`
	MovedPerReleased    float64           `json:"bytes_moved_per_byte_released"`
	// Compactions counts compactions of current pages that moved something
	// (or tried to, see Abandoned); their moves and bytes are also in
	// Moves and BytesMoved, the pages they emptied are CompactPagesFreed,
	// not PagesReleased.
	Compactions       uint64 `json:"compactions"`
	CompactMoves      uint64 `json:"compact_moves"`
	CompactBytesMoved uint64 `json:"compact_bytes_moved"`
	CompactPagesFreed uint64 `json:"compact_pages_freed"`
	CompactBytesFreed uint64 `json:"compact_bytes_freed"`
	// CompactPagesRepacked counts the pages of CompactPagesFreed replaced
	// by a new page of their packed live bytes (a repack, under pressure on
	// whole pages): bytes go back, the page count stays.
	CompactPagesRepacked uint64 `json:"compact_pages_repacked"`
	// DedicatedFallbacks counts allocations served from storage of their
	// own size because no page the memory needed fitted the device.
	DedicatedFallbacks uint64 `json:"dedicated_fallbacks"`
	// OwnSizePages counts pool pages taken at an allocation's own size
	// because the device refused a page of the current size (whole pages).
	OwnSizePages      uint64 `json:"own_size_pages"`
	Abandoned         uint64 `json:"relocations_abandoned"`
	Leaked            uint64 `json:"relocations_leaked"`
	ReserveRetries    uint64 `json:"reserve_retries"`
	CapturesSealed    uint64 `json:"captures_sealed"`
	CapturesDoomed    uint64 `json:"captures_doomed"`
	CapturesAbandoned uint64 `json:"captures_abandoned"`
	// CapturesReused counts recorded buffers whose slices served the
	// recording's later allocations (stream-ordered reuse, design §10.3).
	CapturesReused uint64 `json:"captures_reused"`
	// CaptureErrors counts capture events the device refused (a phase out
	// of order, a close while another graph records, …); the replay goes
	// on.
	CaptureErrors     int    `json:"capture_errors"`
	GuardedPagesAtEnd uint64 `json:"guarded_pages_at_end"`

	WallSeconds float64 `json:"wall_seconds"`
	Timeline    []Point `json:"-"`
}

// replayer holds one replay's state.
type replayer struct {
	dev      *gpumem.Device
	streams  []*gpumem.Stream
	buffers  map[uint64]gpumem.Buffer
	windows  map[int][]func()
	tokens   map[int]*gpumem.CaptureToken
	graphs   map[int]*gpumem.Graph
	capOwner map[int]int // graph → stream
	// recording marks the streams whose capture began and has not ended:
	// an allocation there is used by a recorded op (recordUse).
	recording map[int]bool
	held      map[uint64]func() // a held free's ID → its hold's release
	holds     map[int][]func()  // a stream's open holds' passes, oldest first
	live      uint64
	rep       *Report
	// byOp counts events per op (index Op; the last slot for any other),
	// turned into Report.EventsByOp at the end: a map update per event
	// cost more than the rest of the replay's own bookkeeping.
	byOp [12]int
}

// Run applies events to dev in order and reports what it measured. It
// stops early only on a cancelled context, a device error it cannot count
// or an event it refuses (ErrStopped), or with FailFast at the first failed
// allocation.
func Run(ctx context.Context, dev *gpumem.Device, events iter.Seq[trace.Event], opts Options) (*Report, error) {
	start := time.Now()
	r := &replayer{
		dev:       dev,
		streams:   dev.Streams(),
		buffers:   make(map[uint64]gpumem.Buffer),
		windows:   make(map[int][]func()),
		tokens:    make(map[int]*gpumem.CaptureToken),
		graphs:    make(map[int]*gpumem.Graph),
		capOwner:  make(map[int]int),
		recording: make(map[int]bool),
		held:      make(map[uint64]func()),
		holds:     make(map[int][]func()),
		rep: &Report{
			Backend:            dev.Backend().Name(),
			EventsByOp:         make(map[string]int),
			FailedAllocsByKind: make(map[string]int),
			FirstFailure:       -1,
		},
	}
	every := opts.ProgressEvery
	if every <= 0 {
		every = 1 << 16
	}
	timeline := NewTimeline(opts.Total, opts.Timeline)
	rep := r.rep
	rep.PeakDeviceEvent = -1
	i := 0
	var err error
	for e := range events {
		if i%1024 == 0 {
			if cerr := ctx.Err(); cerr != nil {
				err = cerr
				break
			}
		}
		if err = r.apply(ctx, i, e); err != nil {
			break
		}
		if opts.FailFast && rep.FailedAllocs > 0 {
			break
		}
		devBytes := dev.BytesAllocated()
		if devBytes > rep.PeakDevice || rep.PeakDeviceEvent < 0 {
			rep.PeakDevice, rep.PeakDeviceEvent = devBytes, i
		}
		rep.PeakLive = max(rep.PeakLive, r.live)
		if opts.Timeline > 0 {
			timeline.Add(Point{Event: i, T: e.T, Live: r.live, Device: devBytes})
		}
		i++
		if opts.Progress != nil && i%every == 0 {
			opts.Progress(i, opts.Total)
		}
	}
	rep.Events = i
	if opts.Timeline > 0 {
		rep.Timeline = timeline.Points()
	}
	if opts.Progress != nil {
		opts.Progress(i, opts.Total)
	}
	r.finish(start)
	if err != nil {
		return rep, fmt.Errorf("%w at event %d: %w", ErrStopped, i, err)
	}
	return rep, nil
}

// stream returns trace stream n, creating device streams up to it.
func (r *replayer) stream(n int) (*gpumem.Stream, error) {
	if n < 0 || n >= trace.MaxStreams {
		return nil, fmt.Errorf("%w: stream %d outside [0, %d) (MaxStreams)", trace.ErrInvalidEvent, n, trace.MaxStreams)
	}
	for len(r.streams) <= n {
		s, err := r.dev.NewStream()
		if err != nil {
			return nil, err
		}
		r.streams = append(r.streams, s)
	}
	return r.streams[n], nil
}

func (r *replayer) apply(ctx context.Context, i int, e trace.Event) error {
	rep := r.rep
	r.byOp[min(int(e.Op), len(r.byOp)-1)]++
	switch e.Op {
	case trace.OpAllocFailed:
		s, err := r.stream(e.Stream)
		if err != nil {
			return err
		}
		if e.Size > trace.MaxSize {
			return fmt.Errorf("%w: alloc_failed size %d exceeds %d", trace.ErrInvalidEvent, e.Size, trace.MaxSize)
		}
		rep.RecordedFailedAllocs++
		b, err := s.Alloc(ctx, e.Size)
		if err != nil {
			return r.failed(ctx, i, e, err)
		}
		rep.RecordedFailedAllocsServed++
		return b.Free()
	case trace.OpDefragment:
		_, err := r.dev.Defragment(ctx, gpumem.DefragOptions{MaxBytes: e.Size, MaxMoves: int(e.MaxMoves)})
		switch {
		case errors.Is(err, gpumem.ErrRecording):
			rep.Skipped++ // as the device refuses one while a stream records
		case err != nil:
			return err
		default:
			rep.Defragments++
		}
	case trace.OpAlloc:
		s, err := r.stream(e.Stream)
		if err != nil {
			return err
		}
		if e.Size > trace.MaxSize {
			return fmt.Errorf("%w: alloc size %d exceeds %d", trace.ErrInvalidEvent, e.Size, trace.MaxSize)
		}
		if old, ok := r.buffers[e.ID]; ok {
			// An ID reused while live: the trace implies a free.
			r.live -= old.Size()
			rep.ImpliedFrees++
			delete(r.buffers, e.ID)
			_ = old.Free()
		}
		if r.live > 1<<63-e.Size {
			return fmt.Errorf("%w: live bytes would exceed 2^63", trace.ErrInvalidEvent)
		}
		b, err := s.Alloc(ctx, e.Size)
		if err != nil {
			return r.failed(ctx, i, e, err)
		}
		rep.Allocs++
		r.buffers[e.ID] = b
		r.live += e.Size
		if r.recording[e.Stream] {
			return r.recordUse(s, b)
		}
	case trace.OpFree:
		b, ok := r.buffers[e.ID]
		if !ok {
			rep.IgnoredFrees++
			return nil
		}
		delete(r.buffers, e.ID)
		r.live -= b.Size()
		rep.Frees++
		if e.Held {
			release, err := b.Hold()
			if err != nil {
				return err
			}
			if old, ok := r.held[e.ID]; ok {
				old() // an ID held twice (refused by Decode): the first hold ends
			}
			r.held[e.ID] = release
			rep.HeldFrees++
		}
		return b.Free()
	case trace.OpRelease:
		release, ok := r.held[e.ID]
		if !ok {
			rep.IgnoredReleases++
			return nil
		}
		delete(r.held, e.ID)
		release()
	case trace.OpHold:
		s, err := r.stream(e.Stream)
		if err != nil {
			return err
		}
		pass, err := s.HoldReleases()
		if err != nil {
			return err
		}
		r.holds[e.Stream] = append(r.holds[e.Stream], pass)
	case trace.OpPass:
		open := r.holds[e.Stream]
		if len(open) == 0 {
			rep.Skipped++
			return nil
		}
		open[0]()
		open[0] = nil
		r.holds[e.Stream] = open[1:]
	case trace.OpCleanup:
		s, err := r.stream(e.Stream)
		if err != nil {
			return err
		}
		rep.Cleanups++
		if err := s.Cleanup(ctx); err != nil && !errors.Is(err, gpumem.ErrRecording) {
			return err
		}
	case trace.OpWindow:
		s, err := r.stream(e.Stream)
		if err != nil {
			return err
		}
		if e.Mode == trace.ModeAuto {
			ws := r.windows[e.Stream]
			if len(ws) == 0 {
				rep.Skipped++
				return nil
			}
			ws[len(ws)-1]()
			r.windows[e.Stream] = ws[:len(ws)-1]
			return nil
		}
		mode, err := memory.ParseMode(e.Mode)
		if err != nil {
			return err
		}
		r.windows[e.Stream] = append(r.windows[e.Stream], s.Window(gpumem.Mode(mode)))
	case trace.OpCapture:
		return r.capture(ctx, e)
	default:
		rep.Skipped++
	}
	return nil
}

// failed counts the refusal err of event i's allocation (the first one
// with the device's state), or returns err when it stops the replay (a
// closed device, a cancelled context).
func (r *replayer) failed(ctx context.Context, i int, e trace.Event, err error) error {
	if errors.Is(err, gpumem.ErrClosed) || ctx.Err() != nil {
		return err
	}
	rep := r.rep
	rep.FailedAllocs++
	rep.FailedAllocsByKind[gpumem.FailureKind(err)]++
	if rep.FirstFailure < 0 {
		rep.FirstFailure = i
		rep.FirstFailureError = err.Error()
		u := r.dev.Report().Usage()
		rep.FirstFailureState = &FailureState{
			Event: i, T: e.T, Request: e.Size, Live: r.live, Device: r.dev.BytesAllocated(),
			FreeInPages: u.BytesMapped() - min(u.BytesMapped(), u.BytesOccupied()),
			Held:        u.BytesPendingFree,
		}
	}
	return nil
}

// recordUse records an op on recording stream s that writes all of b, as
// the kernel a real recording allocates b for would: the recording then
// holds b's slice until it seals and the graph holds it for its life
// (design §10.3), which is what a captured workload costs. The op does
// nothing when the graph is launched. A refusal that dooms the recording
// is the capture's to report at its end; only a closed device stops the
// replay.
func (r *replayer) recordUse(s *gpumem.Stream, b gpumem.Buffer) error {
	err := s.Enqueue("replay: recorded use", []gpumem.Use{{Buffer: b, Access: gpumem.Write}}, recordedNothing)
	if errors.Is(err, gpumem.ErrClosed) {
		return err
	}
	return nil
}

// recordedNothing is the recorded op's function: the replay moves no bytes.
func recordedNothing([]storage.Resource) error { return nil }

// capture applies a capture phase. Capture errors (out-of-order phases,
// doomed recordings, a close the device refuses) are counted in
// CaptureErrors, never fatal; only a closed device stops the replay.
func (r *replayer) capture(ctx context.Context, e trace.Event) error {
	s, err := r.stream(e.Stream)
	if err != nil {
		return err
	}
	switch e.Phase {
	case trace.PhasePrepare:
		var tok *gpumem.CaptureToken
		if tok, err = s.PrepareCapture(); err == nil {
			r.tokens[e.Graph] = tok
			r.capOwner[e.Graph] = e.Stream
		}
	case trace.PhaseBegin:
		if tok, ok := r.tokens[e.Graph]; ok {
			if err = r.streams[r.capOwner[e.Graph]].BeginCapture(tok); err == nil {
				r.recording[r.capOwner[e.Graph]] = true
			}
		}
	case trace.PhaseEnd:
		if tok, ok := r.tokens[e.Graph]; ok {
			delete(r.tokens, e.Graph)
			delete(r.recording, r.capOwner[e.Graph])
			var g *gpumem.Graph
			if g, err = r.streams[r.capOwner[e.Graph]].EndCapture(tok); err == nil {
				r.graphs[e.Graph] = g
			}
		}
	case trace.PhaseLaunch:
		if g, ok := r.graphs[e.Graph]; ok {
			err = g.Launch(ctx)
		}
	case trace.PhaseClose:
		if g, ok := r.graphs[e.Graph]; ok {
			// A refused close leaves the graph open: a later close may
			// succeed.
			if err = g.Close(); err == nil {
				delete(r.graphs, e.Graph)
			}
		}
	}
	if err != nil {
		if errors.Is(err, gpumem.ErrClosed) || ctx.Err() != nil {
			return err
		}
		r.rep.CaptureErrors++
	}
	return nil
}

// finish fills the report from the device's counters.
func (r *replayer) finish(start time.Time) {
	rep := r.rep
	for op, n := range r.byOp {
		if n > 0 {
			rep.EventsByOp[trace.Op(op).String()] += n
		}
	}
	st := r.dev.Stats()
	rep.FinalLive = r.live
	rep.FinalDevice = st.BytesAllocated
	rep.FinalReserved = st.BytesReserved
	if rep.PeakLive > 0 {
		rep.Fragmentation = float64(rep.PeakDevice) / float64(rep.PeakLive)
	}
	rep.StorageAllocs = st.StorageAllocs
	rep.StorageDeallocs = st.StorageDeallocs
	rep.Growths = st.Growths
	rep.RelocationsByReason = make(map[string]uint64)
	for reason, n := range st.Relocation.Runs {
		if n > 0 {
			rep.RelocationsByReason[relocation.Reason(reason).String()] = n
		}
	}
	rep.Moves = st.Relocation.Moves
	rep.BytesMoved = st.Relocation.BytesMoved
	rep.PagesReleased = st.Relocation.PagesReleased
	rep.BytesReleased = st.Relocation.BytesReleased
	if rep.BytesReleased > 0 {
		rep.MovedPerReleased = float64(rep.BytesMoved) / float64(rep.BytesReleased)
	}
	rs := st.Relocation
	rep.Relocations = rs.Runs[relocation.Explicit] + rs.Runs[relocation.MemoryPressure] + rs.Runs[relocation.ArenaFull] + rs.Runs[relocation.Capture] -
		(rs.NothingToMove - rs.CompactNothingToMove)
	rep.Compactions = rs.Runs[relocation.Compact] - rs.CompactNothingToMove
	rep.CompactMoves = rs.CompactMoves
	rep.CompactBytesMoved = rs.CompactBytesMoved
	rep.CompactPagesFreed = rs.CompactPagesFreed
	rep.CompactBytesFreed = rs.CompactBytesFreed
	rep.CompactPagesRepacked = rs.CompactPagesRepacked
	rep.Abandoned = st.Relocation.Abandoned
	rep.Leaked = st.Relocation.Leaked
	rep.ReserveRetries = st.ReserveRetries
	rep.DedicatedFallbacks = st.DedicatedFallbacks
	rep.OwnSizePages = st.OwnSizePages
	rep.CapturesSealed = st.Captures.Sealed
	rep.CapturesDoomed = st.Captures.Doomed
	rep.CapturesAbandoned = st.Captures.Abandoned
	rep.CapturesReused = st.Captures.Reused
	rep.GuardedPagesAtEnd = st.GuardedPages
	rep.FinalPageSize = finalPageSize(r.dev)
	rep.WallSeconds = time.Since(start).Seconds()
}

func finalPageSize(dev *gpumem.Device) uint64 {
	var ps uint64
	for _, s := range dev.Report().Streams {
		for _, p := range s.Dynamic {
			if p.Kind == "adaptive" {
				ps = max(ps, p.PageSize)
			}
		}
	}
	return ps
}

// Timeline downsamples a sequence of points into buckets of consecutive
// events, keeping of each bucket the points where live or device bytes
// were lowest or highest (R3): drawn, it reaches every peak and trough
// exactly, which evenly spaced samples do not.
type Timeline struct {
	stride int
	n      int // points in the open bucket
	pts    []Point
	// The open bucket's extremes.
	minLive, maxLive, minDev, maxDev Point
}

// NewTimeline returns a timeline of about points buckets for total points
// (each bucket one point when total is unknown or small).
func NewTimeline(total, points int) *Timeline {
	stride := 1
	if points > 0 && total > points {
		stride = total / points
	}
	return &Timeline{stride: stride}
}

// Add adds the next point (points come in event order).
func (t *Timeline) Add(p Point) {
	if t.n == 0 {
		t.minLive, t.maxLive, t.minDev, t.maxDev = p, p, p, p
	} else {
		if p.Live < t.minLive.Live {
			t.minLive = p
		}
		if p.Live > t.maxLive.Live {
			t.maxLive = p
		}
		if p.Device < t.minDev.Device {
			t.minDev = p
		}
		if p.Device > t.maxDev.Device {
			t.maxDev = p
		}
	}
	if t.n++; t.n == t.stride {
		t.flush()
	}
}

// flush appends the open bucket's extreme points in event order, each
// once.
func (t *Timeline) flush() {
	if t.n == 0 {
		return
	}
	pts := []Point{t.minLive, t.maxLive, t.minDev, t.maxDev}
	slices.SortFunc(pts, func(x, y Point) int { return x.Event - y.Event })
	for i, p := range pts {
		if i == 0 || p.Event != pts[i-1].Event {
			t.pts = append(t.pts, p)
		}
	}
	t.n = 0
}

// Points closes the open bucket and returns the timeline.
func (t *Timeline) Points() []Point {
	t.flush()
	return t.pts
}
