package gpumem_test

import (
	"bytes"
	"context"
	"errors"
	"iter"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/replay"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/storage"
)

const histMiB = 1 << 20

// peaks follows a workload the way replay.Run measures one: live bytes
// (requested sizes) and the device's bytes, sampled after every call.
type peaks struct {
	t          testing.TB
	d          *gpumem.Device
	live       uint64
	peakLive   uint64
	peakDevice uint64
}

func (p *peaks) sample() {
	p.peakLive = max(p.peakLive, p.live)
	p.peakDevice = max(p.peakDevice, p.d.BytesAllocated())
}

func (p *peaks) alloc(s *gpumem.Stream, size uint64) gpumem.Buffer {
	p.t.Helper()
	b, err := s.Alloc(context.Background(), size)
	if err != nil {
		p.t.Fatalf("Alloc(%d) on %s: %v", size, s.Name(), err)
	}
	p.live += size
	p.sample()
	return b
}

func (p *peaks) free(b gpumem.Buffer) {
	p.t.Helper()
	if err := b.Free(); err != nil {
		p.t.Fatalf("Free: %v", err)
	}
	p.live -= b.Size()
	p.sample()
}

// write enqueues a write of b on its stream and waits for it, so no
// release is held back by queued work (a replay has none).
func (p *peaks) write(b gpumem.Buffer) {
	p.t.Helper()
	ctx := context.Background()
	if err := b.Stream().Enqueue("fill", []gpumem.Use{{Buffer: b, Access: gpumem.Write}}, func([]storage.Resource) error { return nil }); err != nil {
		p.t.Fatalf("Enqueue: %v", err)
	}
	if err := b.Stream().Synchronize(ctx); err != nil {
		p.t.Fatalf("Synchronize: %v", err)
	}
	p.sample()
}

// historyWorkload runs two streams through a window, a growth, an explicit
// cleanup that relocates, a capture (prepare, warmup, begin, record, end,
// launch, close), a second growth and churn, leaving some buffers live.
func historyWorkload(t testing.TB, d *gpumem.Device) *peaks {
	ctx := context.Background()
	p := &peaks{t: t, d: d}
	s0 := d.DefaultStream()
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	keep := p.alloc(s0, 4*histMiB+3) // 6 MiB pages
	p.write(keep)
	closeWindow := s0.Window(gpumem.Persistent)
	weights := p.alloc(s0, histMiB)
	closeWindow()
	p.sample()
	other := p.alloc(s1, 3*histMiB)
	big := p.alloc(s0, 7*histMiB) // grows to 8 MiB pages: keep's page is outdated
	p.free(big)
	if err := d.Cleanup(ctx); err != nil { // moves keep, gives its page back
		t.Fatal(err)
	}
	p.sample()

	tok, err := s1.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	p.sample()
	warm := p.alloc(s1, 2*histMiB)
	p.free(warm)
	if err := s1.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	p.sample()
	rec := p.alloc(s1, 2*histMiB)
	if err := s1.Enqueue("step", []gpumem.Use{{Buffer: rec, Access: gpumem.Write}}, func([]storage.Resource) error { return nil }); err != nil {
		t.Fatal(err)
	}
	g, err := s1.EndCapture(tok)
	if err != nil {
		t.Fatal(err)
	}
	p.sample()
	if err := g.Launch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s1.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	p.sample()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	p.sample()
	p.free(rec)

	var live []gpumem.Buffer
	for i := range 24 {
		s := s0
		if i%3 == 2 {
			s = s1
		}
		size := uint64(1+i%5)*histMiB + uint64(i)*4096
		if i == 12 {
			size = 20 * histMiB // a second growth; the next allocations relocate when wanted
		}
		b := p.alloc(s, size)
		live = append(live, b)
		if i%4 == 1 {
			p.free(live[len(live)-2])
			live = append(live[:len(live)-2], b)
		}
	}
	for i, b := range live {
		if i%2 == 0 {
			p.free(b)
		}
	}
	p.free(other)
	_ = weights // stays live
	return p
}

func replayed(t *testing.T, tr []byte, opts ...gpumem.Option) *replay.Report {
	t.Helper()
	dev, err := gpumem.Open(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var events []trace.Event
	for e, err := range trace.Decode(bytes.NewReader(tr)) {
		if err != nil {
			t.Fatalf("the written trace does not decode: %v", err)
		}
		events = append(events, e)
	}
	rep, err := replay.Run(context.Background(), dev, seq(events), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func seq(events []trace.Event) iter.Seq[trace.Event] {
	return func(yield func(trace.Event) bool) {
		for _, e := range events {
			if !yield(e) {
				return
			}
		}
	}
}

// A recorded workload with two streams, a window, growths, relocations and
// a capture, written as a trace and replayed on a device with the same
// policy and capacity, reaches the device's own peak live and peak device
// bytes to the byte.
func TestRecordedWorkloadReplaysToTheDevicesOwnPeaks(t *testing.T) {
	for _, backend := range []struct {
		name string
		opts []gpumem.Option
	}{
		{"host", []gpumem.Option{gpumem.WithCapacity(512 * histMiB)}},
		{"sim", []gpumem.Option{gpumem.WithSim(), gpumem.WithCapacity(512 * histMiB)}},
	} {
		t.Run(backend.name, func(t *testing.T) {
			d, err := gpumem.Open(append([]gpumem.Option{gpumem.WithHistory(gpumem.HistoryOptions{})}, backend.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			p := historyWorkload(t, d)
			h, err := d.History()
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[gpumem.HistoryKind]int{}
			var moved uint64
			for _, e := range h.Entries {
				kinds[e.Kind]++
				if e.Kind == gpumem.HistoryRelocation {
					moved += e.Size
				}
			}
			if kinds[gpumem.HistoryGrowth] < 2 || moved == 0 || kinds[gpumem.HistoryCapture] != 5 || kinds[gpumem.HistoryWindow] != 2 || h.Dropped != 0 {
				t.Fatalf("the workload should grow twice, relocate, capture (5 phases) and open a window: %v, %d bytes moved, %d dropped", kinds, moved, h.Dropped)
			}
			var tr bytes.Buffer
			if err := d.WriteTrace(&tr); err != nil {
				t.Fatal(err)
			}
			rep := replayed(t, tr.Bytes(), backend.opts...)
			if rep.PeakLive != p.peakLive || rep.PeakDevice != p.peakDevice {
				t.Fatalf("replay peaks: live %d, device %d; the device's own: live %d, device %d", rep.PeakLive, rep.PeakDevice, p.peakLive, p.peakDevice)
			}
			if rep.FailedAllocs != 0 || rep.CaptureErrors != 0 || rep.IgnoredFrees != 0 {
				t.Fatalf("replay: %d failed allocs, %d capture errors, %d ignored frees", rep.FailedAllocs, rep.CaptureErrors, rep.IgnoredFrees)
			}
			t.Logf("peak live %d, peak device %d, %d entries, relocations moved %d bytes", p.peakLive, p.peakDevice, len(h.Entries), moved)
		})
	}
}

// A history that began after buffers were allocated writes them as a
// prelude: the replay frees nothing it did not allocate and ends with the
// device's live bytes.
func TestLateHistoryWritesAPreludeOfLiveBuffers(t *testing.T) {
	d, err := gpumem.Open(gpumem.WithSim())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s := d.DefaultStream()
	ctx := context.Background()
	early := make([]gpumem.Buffer, 4)
	for i := range early {
		if early[i], err = s.Alloc(ctx, uint64(i+1)*histMiB); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.StartHistory(gpumem.HistoryOptions{MaxEntries: 4}); err != nil {
		t.Fatal(err)
	}
	if err := early[0].Free(); err != nil {
		t.Fatal(err)
	}
	for range 6 { // more than the ring holds: entries drop
		b, err := s.Alloc(ctx, 512<<10)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
	}
	h, err := d.History()
	if err != nil || h.Dropped == 0 || len(h.Entries) != 4 {
		t.Fatalf("history: %d entries, %d dropped, %v; want 4 kept and some dropped", len(h.Entries), h.Dropped, err)
	}
	var tr bytes.Buffer
	if err := d.WriteTrace(&tr); err != nil {
		t.Fatal(err)
	}
	rep := replayed(t, tr.Bytes(), gpumem.WithSim())
	if rep.IgnoredFrees != 0 || rep.FinalLive != d.Stats().BytesInUse {
		t.Fatalf("replay: %d ignored frees, final live %d; the device has %d live", rep.IgnoredFrees, rep.FinalLive, d.Stats().BytesInUse)
	}
}

func TestHistoryOptionsAndErrors(t *testing.T) {
	d, err := gpumem.Open(gpumem.WithSim())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteTrace(&bytes.Buffer{}); !errors.Is(err, gpumem.ErrNoHistory) {
		t.Fatalf("WriteTrace without a history: %v, want ErrNoHistory", err)
	}
	if err := d.StartHistory(gpumem.HistoryOptions{MaxEntries: -1}); !errors.Is(err, gpumem.ErrInvalidUse) {
		t.Fatalf("StartHistory(MaxEntries -1): %v, want ErrInvalidUse", err)
	}
	if _, err := gpumem.Open(gpumem.WithHistory(gpumem.HistoryOptions{MaxEntries: -1})); !errors.Is(err, gpumem.ErrInvalidUse) {
		t.Fatalf("Open(WithHistory(MaxEntries -1)): %v, want ErrInvalidUse", err)
	}
	if err := d.StartHistory(gpumem.HistoryOptions{Stacks: true}); err != nil {
		t.Fatal(err)
	}
	b, err := d.DefaultStream().Alloc(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	d.StopHistory()
	if err := b.Free(); err != nil { // after the stop: not recorded
		t.Fatal(err)
	}
	h, err := d.History()
	if err != nil {
		t.Fatal(err)
	}
	var alloc *gpumem.HistoryEntry
	for i := range h.Entries {
		if h.Entries[i].Kind == gpumem.HistoryFree {
			t.Fatalf("a free after StopHistory was recorded")
		}
		if h.Entries[i].Kind == gpumem.HistoryAlloc {
			alloc = &h.Entries[i]
		}
	}
	if h.Recording || alloc == nil || len(alloc.Stack) == 0 || alloc.Stack[0].Function != "github.com/gpumem/gpumem_test.TestHistoryOptionsAndErrors" {
		t.Fatalf("recording %v, alloc entry %+v: want a stopped history whose alloc's stack starts at this test", h.Recording, alloc)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.StartHistory(gpumem.HistoryOptions{}); !errors.Is(err, gpumem.ErrClosed) {
		t.Fatalf("StartHistory on a closed device: %v, want ErrClosed", err)
	}
}
