package gpumem_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/compare"
	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/storage"
)

// churn runs a seeded random workload on two streams the way an
// adversarial user would: allocations from 4 KiB to 24 MiB (refusals
// counted, not fatal), plain frees, frees held by a Buffer.Hold released
// later, frees of buffers another stream's queued op still reads
// (cross-stream: held until that stream notices the op passed),
// Defragment, synchronizations and stream cleanups. It follows live bytes
// and the device's bytes after every call, as a replay samples them.
type churn struct {
	t       testing.TB
	d       *gpumem.Device
	rng     *rand.Rand
	streams []*gpumem.Stream
	bufs    []gpumem.Buffer
	holds   []func()
	p       peaks
	failed  int // allocations the device refused
	defrags int
	// liveCap bounds the live bytes the workload aims at: above it, it
	// frees instead of allocating (0: allocate regardless, so a capped
	// device refuses some).
	liveCap uint64
	// shift bounds allocation sizes: 4 KiB << IntN(shift), plus up to a
	// half (0: 13, up to 24 MiB).
	shift int
}

func newChurn(t testing.TB, d *gpumem.Device, seed uint64) *churn {
	t.Helper()
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	return &churn{t: t, d: d, rng: rand.New(rand.NewPCG(seed, 7)), streams: []*gpumem.Stream{d.DefaultStream(), s1}, p: peaks{t: t, d: d}}
}

// take removes and returns a random live buffer.
func (c *churn) take() gpumem.Buffer {
	i := c.rng.IntN(len(c.bufs))
	b := c.bufs[i]
	c.bufs[i] = c.bufs[len(c.bufs)-1]
	c.bufs = c.bufs[:len(c.bufs)-1]
	return b
}

func (c *churn) run(ops int) {
	c.t.Helper()
	ctx := context.Background()
	for range ops {
		r := c.rng.IntN(100)
		if len(c.bufs) == 0 || (r < 45 && (c.liveCap == 0 || c.p.live < c.liveCap)) {
			s := c.streams[c.rng.IntN(len(c.streams))]
			size := uint64(4<<10) << c.rng.IntN(cmp.Or(c.shift, 13))
			size += c.rng.Uint64N(size / 2)
			b, err := s.Alloc(ctx, size)
			if err != nil {
				if !errors.Is(err, gpumem.ErrOutOfMemory) {
					c.t.Fatalf("Alloc(%d): %v", size, err)
				}
				c.failed++
				continue
			}
			c.bufs = append(c.bufs, b)
			c.p.live += size
			c.p.sample()
			continue
		}
		switch {
		case r < 70: // a plain free
			c.p.free(c.take())
		case r < 78: // held by a stand-in for queued work, released later
			b := c.take()
			release, err := b.Hold()
			if err != nil {
				c.t.Fatal(err)
			}
			c.holds = append(c.holds, release)
			c.p.free(b)
		case r < 86: // another stream's queued op reads it: a cross-stream free
			b := c.take()
			other := c.streams[0]
			if b.Stream() == other {
				other = c.streams[1]
			}
			if err := other.Enqueue("read", []gpumem.Use{{Buffer: b, Access: gpumem.Read}}, func([]storage.Resource) error { return nil }); err != nil {
				c.t.Fatal(err)
			}
			c.p.free(b)
		case r < 94: // a held free's release
			if len(c.holds) == 0 {
				continue
			}
			i := c.rng.IntN(len(c.holds))
			c.holds[i]()
			c.holds[i] = c.holds[len(c.holds)-1]
			c.holds = c.holds[:len(c.holds)-1]
			c.p.sample()
		case r < 97:
			if _, err := c.d.Defragment(ctx, gpumem.DefragOptions{}); err != nil {
				c.t.Fatalf("Defragment: %v", err)
			}
			c.defrags++
			c.p.sample()
		case r < 99:
			if err := c.streams[c.rng.IntN(len(c.streams))].Synchronize(ctx); err != nil {
				c.t.Fatal(err)
			}
			c.p.sample()
		default:
			if err := c.streams[c.rng.IntN(len(c.streams))].Cleanup(ctx); err != nil {
				c.t.Fatal(err)
			}
			c.p.sample()
		}
	}
}

// The reproducer of defect R2: a held free's memory released, then a
// Defragment that moves another buffer onto it. The history must read the
// release before the move — the memory was free by then — as it happened.
// Before, the release was noticed lazily, at the next entry: the move's
// target had by then taken the freed slice's descriptor, so the release
// was recorded after the move.
func TestHistoryRecordsAHeldFreesReleaseBeforeAMoveOntoItsMemory(t *testing.T) {
	ctx := t.Context()
	d, err := gpumem.Open(gpumem.WithPageGranular(false), gpumem.WithHistory(gpumem.HistoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s := d.DefaultStream()
	x, err := s.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Alloc(ctx, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, 512<<10); err != nil { // on a second page
		t.Fatal(err)
	}
	release, err := a.Hold()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	release()
	res, err := d.Defragment(ctx, gpumem.DefragOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moves != 1 {
		t.Fatalf("Defragment moved %d buffers, want 1 (the 512 KiB one onto a's memory)", res.Moves)
	}
	h, err := d.History()
	if err != nil {
		t.Fatal(err)
	}
	var aAt uint64
	relAt, moveAt := -1, -1
	for i, e := range h.Entries {
		switch {
		case e.Kind == gpumem.HistoryAlloc && e.Buffer == a.ID():
			aAt = e.Address
		case e.Kind == gpumem.HistoryRelease && e.Buffer == a.ID():
			relAt = i
		case e.Kind == gpumem.HistoryMove:
			if e.To < aAt || e.To >= aAt+1<<20 {
				t.Fatalf("the move goes to %#x, not onto a's memory [%#x, %#x)", e.To, aAt, aAt+1<<20)
			}
			moveAt = i
		}
	}
	if relAt < 0 || moveAt < 0 || relAt > moveAt {
		for _, e := range h.Entries {
			t.Logf("%v buffer %d address %#x to %#x", e.Kind, e.Buffer, e.Address, e.To)
		}
		t.Fatalf("release of a at entry %d, the move onto its memory at %d: want the release first", relAt, moveAt)
	}
	_ = x
}

// A workload with Defragment and held frees (a Hold's release, another
// stream's queued use), written as a snapshot and read back: every
// free_requested matches a live block, and the events' live bytes at the
// end are the device's Stats.BytesInUse. Before, a move onto a released
// held free's memory came before its release in the history, and 2 of 9
// such round trips read back an unmatched free request.
func TestDefragmentWithHeldFreesRoundTripsThroughTheSnapshot(t *testing.T) {
	for seed := range uint64(12) {
		for _, granular := range []bool{false, true} {
			d, err := gpumem.Open(gpumem.WithSim(), gpumem.WithPageGranular(granular), gpumem.WithHistory(gpumem.HistoryOptions{}))
			if err != nil {
				t.Fatal(err)
			}
			c := newChurn(t, d, seed)
			c.liveCap = 96 << 20
			c.run(2000)
			var buf bytes.Buffer
			if err := d.WriteSnapshot(&buf); err != nil {
				t.Fatal(err)
			}
			inUse := d.Stats().BytesInUse
			d.Close()
			snap, err := trace.ReadSnapshot(bytes.NewReader(buf.Bytes()), trace.SnapshotOptions{})
			if err != nil {
				t.Fatal(err)
			}
			live := map[uint64]uint64{}
			var net uint64
			for _, e := range snap.Events {
				switch e.Op {
				case trace.OpAlloc:
					net += e.Size - live[e.ID]
					live[e.ID] = e.Size
				case trace.OpFree:
					net -= live[e.ID]
					delete(live, e.ID)
				}
			}
			if snap.Counts.UnmatchedFreeRequests != 0 || net != inUse {
				t.Errorf("seed %d, granular %v (%d defragments, %d held frees): %d unmatched free requests, net live %d, Stats.BytesInUse %d",
					seed, granular, c.defrags, snap.Counts.HeldFrees, snap.Counts.UnmatchedFreeRequests, net, inUse)
			}
		}
	}
}

// replayRecorded decodes a written trace with its header and replays it
// through package replay on a Sim device opened as the trace's recording
// device ran (replay.DeviceOptions), then extra options.
func replayRecorded(t *testing.T, tr []byte, extra ...gpumem.Option) *replay.Report {
	t.Helper()
	var h trace.Header
	var events []trace.Event
	for e, err := range trace.DecodeWithHeader(bytes.NewReader(tr), &h) {
		if err != nil {
			t.Fatalf("the written trace does not decode: %v", err)
		}
		events = append(events, e)
	}
	if h.Device == nil {
		t.Fatalf("the written trace's header has no device: %+v", h)
	}
	opts, err := replay.DeviceOptions(*h.Device)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := gpumem.Open(append(append(opts, gpumem.WithSim()), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := replay.Run(t.Context(), dev, slices.Values(events), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// recordChurn runs work on the churn of seed on a Sim device with opts, its
// history kept whole, and returns the workload and the written trace.
func recordChurn(t *testing.T, seed uint64, work func(*churn), opts ...gpumem.Option) (*churn, []byte) {
	t.Helper()
	d, err := gpumem.Open(append([]gpumem.Option{gpumem.WithSim(), gpumem.WithHistory(gpumem.HistoryOptions{MaxEntries: 1 << 22})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c := newChurn(t, d, seed)
	work(c)
	if got := d.Stats().BytesInUse; got != c.p.live {
		t.Fatalf("seed %d: the workload counts %d live bytes, Stats.BytesInUse %d", seed, c.p.live, got)
	}
	var buf bytes.Buffer
	if err := d.WriteTrace(&buf); err != nil {
		t.Fatal(err)
	}
	if h, err := d.History(); err != nil || h.Dropped != 0 {
		t.Fatalf("seed %d: history dropped entries (%v): the trace would start with a prelude", seed, err)
	}
	return c, buf.Bytes()
}

// Defect R3: a device capped at 160 MiB refuses allocations amid held
// frees, cross-stream frees and Defragment. Its whole history, written as
// a trace and replayed through package replay, reaches the device's own
// peak live bytes, never counting the refused allocations: replayed with
// room to spare they are served and freed at once; replayed on the device
// as it ran (its capacity, from the header) they are refused again, every
// other allocation is served, no free is ignored, and the replay ends with
// the device's live bytes and peaks at its device bytes. Before, each
// refusal was written as an alloc and a free: replayed with room they
// counted in peak live, and at the device's capacity, without its
// Defragment calls, frees were ignored and the replay ended with less
// live.
func TestFailedAllocationsReplayOutsideLiveBytes(t *testing.T) {
	const capacity = 160 << 20
	for seed := range uint64(6) {
		c, tr := recordChurn(t, seed, func(c *churn) { c.run(3000) }, gpumem.WithCapacity(capacity))
		ops := opsOf(t, tr)
		if c.failed == 0 || c.defrags == 0 || ops["held free"] == 0 || ops["alloc_failed"] != c.failed || ops["defragment"] != c.defrags {
			t.Fatalf("seed %d: %d failed allocations, %d defragments; trace ops %v: the workload does not exercise R3", seed, c.failed, c.defrags, ops)
		}
		rep := replayRecorded(t, tr)
		if rep.PeakLive != c.p.peakLive || rep.FinalLive != c.p.live || rep.IgnoredFrees != 0 || rep.IgnoredReleases != 0 ||
			rep.FailedAllocs != c.failed || rep.RecordedFailedAllocs != c.failed || rep.RecordedFailedAllocsServed != 0 ||
			rep.Defragments != c.defrags || rep.PeakDevice != c.p.peakDevice {
			t.Errorf("seed %d at the device's capacity: peak live %d, final live %d, peak device %d, %d ignored frees, %d ignored releases, %d failed (%d recorded, %d of them served), %d defragments; the device: peak live %d, final live %d, peak device %d, %d failed, %d defragments",
				seed, rep.PeakLive, rep.FinalLive, rep.PeakDevice, rep.IgnoredFrees, rep.IgnoredReleases, rep.FailedAllocs, rep.RecordedFailedAllocs, rep.RecordedFailedAllocsServed, rep.Defragments,
				c.p.peakLive, c.p.live, c.p.peakDevice, c.failed, c.defrags)
		}
		rep = replayRecorded(t, tr, gpumem.WithCapacity(0), gpumem.WithProperties(gpumem.Properties{MaxPageSize: 1 << 30, Alignment: 32})) // the host's, without a capacity
		if rep.PeakLive != c.p.peakLive || rep.FinalLive != c.p.live || rep.FailedAllocs != 0 || rep.RecordedFailedAllocsServed != c.failed {
			t.Errorf("seed %d with room to spare: peak live %d, final live %d, %d failed, %d of %d recorded failures served; the device: peak live %d, final live %d",
				seed, rep.PeakLive, rep.FinalLive, rep.FailedAllocs, rep.RecordedFailedAllocsServed, rep.RecordedFailedAllocs, c.p.peakLive, c.p.live)
		}
	}
}

// A device opened WithCapacity(2 GiB) makes pages of at most 512 MiB, so a
// buffer of 520 to 700 MiB gets storage of its own; its written trace says
// so (and its capacity, alignment and policy), and a replay takes them:
// through package replay (replay.DeviceOptions) and through compare.Run as
// gpumem replay runs it, with no setting given, the trace replays to the
// device's own peak device bytes (compare's verdict, at the device's
// capacity). Before, the trace had no device: compare replayed it with
// 1 GiB pages, on which those buffers grow the arena to pages that stay,
// and peaked far above the device.
func TestWrittenTraceReplaysOnTheRecordingDevicesSettings(t *testing.T) {
	const capacity = 2 << 30
	for seed := range uint64(3) {
		c, tr := recordChurn(t, seed, func(c *churn) {
			c.shift, c.liveCap = 14, 700<<20
			for i := range 4 {
				c.run(300)
				big := c.p.alloc(c.streams[i%2], uint64(520+60*i)<<20)
				c.run(200)
				c.p.free(big)
			}
			c.run(300)
		}, gpumem.WithCapacity(capacity))
		if c.failed != 0 {
			t.Fatalf("seed %d: %d allocations failed; the workload is meant to fit the device", seed, c.failed)
		}
		if rep := replayRecorded(t, tr); rep.PeakDevice != c.p.peakDevice || rep.PeakLive != c.p.peakLive {
			t.Errorf("seed %d through replay.DeviceOptions: peak device %d, peak live %d; the device's %d, %d", seed, rep.PeakDevice, rep.PeakLive, c.p.peakDevice, c.p.peakLive)
		}
		src, err := compare.DecodeTrace("recorded.jsonl", bytes.NewReader(tr))
		if err != nil {
			t.Fatal(err)
		}
		cmpRes, err := compare.Run(t.Context(), src, compare.Options{Policies: []string{compare.AdaptivePages}, SkipCapacity: true})
		if err != nil {
			t.Fatal(err)
		}
		if cmpRes.MaxPage != 512<<20 || cmpRes.Capacity != capacity || cmpRes.DevicePolicy != compare.AdaptivePages ||
			!slices.Contains(cmpRes.FromTrace, "max page") || !slices.Contains(cmpRes.FromTrace, "capacity") {
			t.Fatalf("seed %d: compare took max page %d, capacity %d, policy %q from %v; want the device's 512 MiB, 2 GiB, adaptive-pages", seed, cmpRes.MaxPage, cmpRes.Capacity, cmpRes.DevicePolicy, cmpRes.FromTrace)
		}
		p := cmpRes.Policies[0]
		if v := p.Verdict; v == nil || !v.Fits || v.PeakReserved != c.p.peakDevice {
			t.Errorf("seed %d through compare: at the device's capacity %+v; the device's peak %d", seed, v, c.p.peakDevice)
		}
		var text bytes.Buffer
		if err := cmpRes.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		if want := "the trace's recording device ran adaptive-pages; from it, as no flag set them: max page, capacity"; !bytes.Contains(text.Bytes(), []byte(want)) {
			t.Fatalf("the report does not say which settings came from the trace (want %q):\n%s", want, text.String())
		}
	}
}
