package gpumem_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/storage"
)

// heldWorkload frees six 5 MiB buffers while an op that uses them waits on
// a gate — on another stream (cross: its bindings keep the slices taken),
// or on the buffers' own stream (the stream's queued work holds back the
// deallocation of their pages, outdated once the next allocations grow the
// arena) — then allocates six 7 MiB buffers, opens the gate, synchronises
// both streams and frees the rest.
func heldWorkload(t *testing.T, d *gpumem.Device, cross bool) *peaks {
	t.Helper()
	p := &peaks{t: t, d: d}
	s0 := d.DefaultStream()
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	user := s0
	if cross {
		user = s1
	}
	var bufs []gpumem.Buffer
	var uses []gpumem.Use
	for range 6 {
		b := p.alloc(s0, 5*histMiB)
		bufs = append(bufs, b)
		uses = append(uses, gpumem.Use{Buffer: b, Access: gpumem.Read})
	}
	gate := make(chan struct{})
	if err := user.Enqueue("gated", uses, func([]storage.Resource) error { <-gate; return nil }); err != nil {
		t.Fatal(err)
	}
	p.sample()
	for _, b := range bufs {
		p.free(b)
	}
	var more []gpumem.Buffer
	for range 6 {
		more = append(more, p.alloc(s0, 7*histMiB))
	}
	close(gate)
	for _, s := range []*gpumem.Stream{s0, s1} {
		if err := s.Synchronize(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	p.sample()
	for _, b := range more {
		p.free(b)
	}
	return p
}

// A buffer freed while queued work still uses it keeps its memory until
// the work passes; the trace carries that (a held free and its release, or
// a stream's hold and pass), so its replay — on the same backend, and on
// Sim — reaches the device's own peak live and peak device bytes, with the
// buffers' own stream or another one using them, pages backed whole or
// granular. Before, the replay's peak device bytes were 60 MiB against the
// device's 96 (whole pages), 48 against 84 (granular, when a growth still
// outdated the 5 MiB buffers' pages). On granular pages the first growth
// takes the largest page (pool PL31): the 7 MiB buffers grow nothing, so
// on the buffers' own stream nothing is held (their slices serve the
// stream's later work in stream order) and the trace has no holds. On
// whole pages the 7 MiB buffers, more than half a 10 MiB page, take 8 MiB
// pages of their own (pool PL32): 84 MiB where pages of the pool's size
// made 96.
func TestHeldReleasesReplayToTheDevicesOwnPeaks(t *testing.T) {
	for _, layout := range []struct {
		name     string
		opts     []gpumem.Option
		peak     [2]uint64 // the device's, own stream and another: the old pages or slices and the new ones
		ownHolds bool      // the own-stream case holds page releases
	}{
		{"whole pages", []gpumem.Option{gpumem.WithCapacity(512 * histMiB)}, [2]uint64{84 * histMiB, 84 * histMiB}, true},
		{"granular pages", []gpumem.Option{gpumem.WithCapacity(512 * histMiB), gpumem.WithPageGranular(true)}, [2]uint64{42 * histMiB, 72 * histMiB}, false},
	} {
		for _, cross := range []bool{true, false} {
			name := layout.name + "/own stream"
			if cross {
				name = layout.name + "/another stream"
			}
			t.Run(name, func(t *testing.T) {
				opts := layout.opts
				d, err := gpumem.Open(append([]gpumem.Option{gpumem.WithHistory(gpumem.HistoryOptions{})}, opts...)...)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				p := heldWorkload(t, d, cross)
				var tr bytes.Buffer
				if err := d.WriteTrace(&tr); err != nil {
					t.Fatal(err)
				}
				ops := opsOf(t, tr.Bytes())
				held := ops["held free"]
				if cross && (held != 6 || ops["release"] != 6) {
					t.Fatalf("trace: %d held frees, ops %v; want the six buffers freed held and released", held, ops)
				}
				if !cross && layout.ownHolds && (held != 0 || ops["hold"] == 0 || ops["hold"] != ops["pass"]) {
					t.Fatalf("trace: %d held frees, ops %v; want the stream's holds, each passed", held, ops)
				}
				if !cross && !layout.ownHolds && (held != 0 || ops["hold"] != 0) {
					t.Fatalf("trace: %d held frees, ops %v; want nothing held on the buffers' own stream", held, ops)
				}
				if want := layout.peak[btoi(cross)]; p.peakDevice != want {
					t.Fatalf("device peak %d MiB: the workload should hold the freed buffers' pages or slices (%d MiB)", p.peakDevice>>20, want>>20)
				}
				for _, on := range []struct {
					name string
					opts []gpumem.Option
				}{{"same backend", opts}, {"sim", append(slices.Clone(opts), gpumem.WithSim())}} {
					rep := replayed(t, tr.Bytes(), on.opts...)
					if rep.PeakLive != p.peakLive || rep.PeakDevice != p.peakDevice {
						t.Fatalf("replay on %s: peak live %d, device %d; the device's own: live %d, device %d", on.name, rep.PeakLive, rep.PeakDevice, p.peakLive, p.peakDevice)
					}
					if rep.FailedAllocs != 0 || rep.IgnoredFrees != 0 || rep.IgnoredReleases != 0 || rep.Skipped != 0 {
						t.Fatalf("replay on %s: %d failed allocs, %d ignored frees, %d ignored releases, %d skipped", on.name, rep.FailedAllocs, rep.IgnoredFrees, rep.IgnoredReleases, rep.Skipped)
					}
				}
				// The replay's stand-ins are held releases like the real ones:
				// a replay that records writes the same held frees, releases,
				// holds and passes again.
				again := recordedReplay(t, tr.Bytes(), append(slices.Clone(opts), gpumem.WithSim())...)
				if fmt.Sprint(opsOf(t, again)) != fmt.Sprint(ops) {
					t.Fatalf("the replay's own trace has ops %v, the device's %v", opsOf(t, again), ops)
				}
				t.Logf("peak live %d MiB, peak device %d MiB; ops %v", p.peakLive>>20, p.peakDevice>>20, ops)
			})
		}
	}
}

// The snapshot carries a held free as PyTorch does: free_requested at the
// free, free_completed at the release; read back, its events replay to the
// device's peaks. (A stream's held storage releases have no PyTorch
// action: the snapshot shows their segment_free when they really went.)
func TestHeldFreeRoundTripsThroughTheSnapshot(t *testing.T) {
	opts := []gpumem.Option{gpumem.WithCapacity(512 * histMiB)}
	d, err := gpumem.Open(append([]gpumem.Option{gpumem.WithHistory(gpumem.HistoryOptions{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p := heldWorkload(t, d, true)
	var buf bytes.Buffer
	if err := d.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	snap, err := trace.ReadSnapshot(bytes.NewReader(buf.Bytes()), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Counts.HeldFrees != 6 || snap.Counts.PendingAtEnd != 0 || snap.Counts.Prelude != 0 {
		t.Fatalf("read back: %+v; want six held frees, all completed, no prelude", snap.Counts)
	}
	if snap.PeakLive != p.peakLive {
		t.Fatalf("snapshot peak live %d, the device's %d", snap.PeakLive, p.peakLive)
	}
	dev, err := gpumem.Open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rep, err := replay.Run(t.Context(), dev, slices.Values(snap.Events), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.PeakLive != p.peakLive || rep.PeakDevice != p.peakDevice || rep.HeldFrees != 6 {
		t.Fatalf("replayed snapshot: peak live %d, device %d, %d held frees; the device's own: live %d, device %d", rep.PeakLive, rep.PeakDevice, rep.HeldFrees, p.peakLive, p.peakDevice)
	}
}

// A held free's release is recorded when its last binding goes, with no
// entry after it needed to notice it; the storage
// releases a stream's queued work held are recorded when held and when
// they went.
func TestHistoryRecordsHeldFreesAndReleasesInOrder(t *testing.T) {
	d, err := gpumem.Open(gpumem.WithSim(), gpumem.WithHistory(gpumem.HistoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s0 := d.DefaultStream()
	b, err := s0.Alloc(t.Context(), 3*histMiB)
	if err != nil {
		t.Fatal(err)
	}
	release, err := b.Hold() // as another stream's queued use would
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Free(); err != nil {
		t.Fatal(err)
	}
	release() // no entry follows: the release records itself
	h, err := d.History()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []gpumem.HistoryKind
	for _, e := range h.Entries {
		switch e.Kind {
		case gpumem.HistoryFree:
			if !e.Held || e.Buffer != b.ID() {
				t.Fatalf("free entry %+v: want buffer %d, held", e, b.ID())
			}
		case gpumem.HistoryRelease:
			if e.Buffer != b.ID() || e.Size != 3*histMiB {
				t.Fatalf("release entry %+v: want buffer %d, 3 MiB", e, b.ID())
			}
		}
		kinds = append(kinds, e.Kind)
	}
	if i, j := slices.Index(kinds, gpumem.HistoryFree), slices.Index(kinds, gpumem.HistoryRelease); i < 0 || j < i || slices.Contains(kinds[j+1:], gpumem.HistoryRelease) {
		t.Fatalf("entries %v: want the free, then one release", kinds)
	}

	// A stream hold: the pages the cleanup gives back (the first buffer's,
	// and a dedicated slot) are held, then go at the pass.
	pass, err := s0.HoldReleases()
	if err != nil {
		t.Fatal(err)
	}
	done := s0.Window(gpumem.Dedicated)
	c, err := s0.Alloc(t.Context(), 4*histMiB)
	done()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Free(); err != nil {
		t.Fatal(err)
	}
	if err := d.Cleanup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := d.BytesAllocated(); got != 8*histMiB {
		t.Fatalf("held: device bytes %d, want both 4 MiB pages", got)
	}
	pass()
	h, err = d.History()
	if err != nil {
		t.Fatal(err)
	}
	var held, heldFree, passed int
	for _, e := range h.Entries {
		switch {
		case e.Kind == gpumem.HistoryHeld:
			held++
			if e.Size != 4*histMiB || passed > 0 || heldFree > 0 {
				t.Fatalf("held entry %+v: want a 4 MiB page, before any went", e)
			}
		case e.Kind == gpumem.HistoryPageFree:
			if !e.Held {
				t.Fatalf("page free %+v not marked held", e)
			}
			heldFree++
		case e.Kind == gpumem.HistoryPassed:
			passed++
			if heldFree != 2 {
				t.Fatalf("passed before the held pages went: %+v", h.Entries)
			}
		}
	}
	if held != 2 || heldFree != 2 || passed != 1 || d.BytesAllocated() != 0 {
		t.Fatalf("%d held, %d held page frees, %d passed, %d device bytes; want 2, 2, 1, 0", held, heldFree, passed, d.BytesAllocated())
	}
}

// opsOf counts a trace's events by op, and its held frees as "held free".
func opsOf(t *testing.T, tr []byte) map[string]int {
	t.Helper()
	ops := map[string]int{}
	for e, err := range trace.Decode(bytes.NewReader(tr)) {
		if err != nil {
			t.Fatal(err)
		}
		ops[e.Op.String()]++
		if e.Held {
			ops["held free"]++
		}
	}
	return ops
}

// recordedReplay replays tr on a device opened with opts that records its
// history, and returns that device's trace.
func recordedReplay(t *testing.T, tr []byte, opts ...gpumem.Option) []byte {
	t.Helper()
	dev, err := gpumem.Open(append(opts, gpumem.WithHistory(gpumem.HistoryOptions{}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var events []trace.Event
	for e, err := range trace.Decode(bytes.NewReader(tr)) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	if _, err := replay.Run(t.Context(), dev, slices.Values(events), replay.Options{}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := dev.WriteTrace(&out); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
