package gpumem_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/trace"
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
	bufs    []*gpumem.Buffer
	holds   []func()
	p       peaks
	failed  int // allocations the device refused
	defrags int
	// liveCap bounds the live bytes the workload aims at: above it, it
	// frees instead of allocating (0: allocate regardless, so a capped
	// device refuses some).
	liveCap uint64
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
func (c *churn) take() *gpumem.Buffer {
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
			size := uint64(4<<10) << c.rng.IntN(13) // 4 KiB … 16 MiB
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
