package torch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// twoTails builds the smallest case where the tie-break decides: two 20 MiB
// segments, each left with a free 2 MiB tail (two 9 MiB blocks each), the
// second recorded at secondAddr (0: synthetic). It returns the allocator
// and the blocks of the first and second segment.
func twoTails(t *testing.T, firstAddr, secondAddr uint64) (*Allocator, [2]Block, [2]Block) {
	t.Helper()
	a := New(0)
	var first, second [2]Block
	rec := RecordedSegment{Addr: firstAddr, Size: 20 * MiB}
	for i := range first {
		b, err := a.MallocRecorded(9*MiB, 0, rec)
		if err != nil {
			t.Fatal(err)
		}
		first[i] = b
		checkInvariants(t, a)
	}
	rec = RecordedSegment{Addr: secondAddr, Size: 20 * MiB}
	for i := range second {
		b, err := a.MallocRecorded(9*MiB, 0, rec)
		if err != nil {
			t.Fatal(err)
		}
		second[i] = b
		checkInvariants(t, a)
	}
	if a.Reserved() != 40*MiB {
		t.Fatalf("reserved %d MiB, want two 20 MiB segments", a.Reserved()/MiB)
	}
	return a, first, second
}

// PyTorch's best fit takes, among free blocks of one size, the one at the
// lowest address, and cudaMalloc's addresses do not follow allocation
// order. With the second segment recorded below the first, the 2 MiB
// request takes the second segment's tail, as PyTorch did; with synthetic
// addresses (rising) it takes the first's. That one pick decides whether a
// later 20 MiB request finds a whole free segment (the H200 snapshots'
// divergence, in miniature).
func TestBestFitBreaksTiesByRecordedAddress(t *testing.T) {
	const high, low = 0x7f0000000000, 0x7eff00000000
	for _, c := range []struct {
		name          string
		first, second uint64
		wantSecond    bool
		wantReserved  uint64
	}{
		{"synthetic addresses: allocation order", 0, 0, false, 40 * MiB},
		{"second segment recorded lower", high, low, true, 60 * MiB},
		{"second segment recorded higher", low, high, false, 40 * MiB},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, first, second := twoTails(t, c.first, c.second)
			tail := mustMalloc(t, a, 2*MiB, 0)
			inSecond := tail.Addr == second[1].Addr+9*MiB
			if inSecond != c.wantSecond || (!inSecond && tail.Addr != first[1].Addr+9*MiB) {
				t.Fatalf("2 MiB block at %#x: first segment's tail %#x, second's %#x; want the second's: %v",
					tail.Addr, first[1].Addr+9*MiB, second[1].Addr+9*MiB, c.wantSecond)
			}
			// Free the second segment's 9 MiB blocks: it is whole again
			// only when the tail went to the first.
			a.Free(second[0])
			a.Free(second[1])
			checkInvariants(t, a)
			mustMalloc(t, a, 20*MiB, 0)
			if a.PeakReserved() != c.wantReserved {
				t.Fatalf("peak reserved %d MiB, want %d MiB", a.PeakReserved()/MiB, c.wantReserved/MiB)
			}
		})
	}
}

// A recorded address is taken only when the sizes agree and no live segment
// overlaps the range; otherwise the segment goes to a synthetic address
// above every recorded one. A released segment's address may be taken
// again. Recordings the model cannot use (address 0 or from 2^63, size 0
// or above 2^62) count as unknown.
func TestRecordedAddressIsTakenOnlyWhenItFits(t *testing.T) {
	const base = 0x7f0000000000
	recorded := []RecordedSegment{
		{Addr: base, Size: 20 * MiB},
		{Addr: base + 10*MiB, Size: 20 * MiB},   // overlaps the first
		{Addr: base + 40*MiB, Size: 2 * MiB},    // wrong size for the request's 20 MiB segment
		{Addr: base + 20*MiB, Size: 20 * MiB},   // adjacent: fits
		{Addr: 1 << 63, Size: 20 * MiB},         // unusable address
		{Addr: base + 100*MiB, Size: 0},         // unusable size
		{Addr: base + 200*MiB, Size: 1<<62 + 1}, // unusable size
		{Addr: math.MaxUint64 - 10, Size: 20 * MiB},
	}
	a := NewWithConfig(Config{Recorded: recorded})
	var blocks []Block
	for i, r := range recorded {
		b, err := a.MallocRecorded(20*MiB, 0, r) // a whole 20 MiB segment each
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		checkInvariants(t, a)
		blocks = append(blocks, b)
	}
	want := []bool{true, false, false, true, false, false, false, false}
	for i, b := range blocks {
		if got := b.Addr == recorded[i].Addr; got != want[i] {
			t.Errorf("request %d at %#x: at its recorded address %v, want %v", i, b.Addr, got, want[i])
		}
		if !want[i] && b.Addr < base+42*MiB {
			t.Errorf("request %d: synthetic address %#x not above every usable recorded range", i, b.Addr)
		}
	}
	if s := a.Stats(); s.RecordedSegments != 2 || s.SyntheticSegments != 6 {
		t.Fatalf("recorded %d, synthetic %d segments, want 2 and 6", s.RecordedSegments, s.SyntheticSegments)
	}
	// Released (empty cache), the first and fourth ranges are free to take
	// again: the second recording, refused while it overlapped the first,
	// fits now.
	a.Free(blocks[0])
	a.Free(blocks[3])
	a.EmptyCache()
	checkInvariants(t, a)
	if b, err := a.MallocRecorded(20*MiB, 0, recorded[1]); err != nil || b.Addr != recorded[1].Addr {
		t.Fatalf("after the release, block %#x (%v), want the recorded %#x", b.Addr, err, recorded[1].Addr)
	}
	checkInvariants(t, a)
}

// Cached segments take their recorded address like new ones; two at one
// address get one synthetic.
func TestCachedSegmentsTakeTheirAddress(t *testing.T) {
	const low, high = 0x7eff00000000, 0x7f0000000000
	a := NewWithConfig(Config{Cached: []CachedSegment{
		{Size: 20 * MiB, Addr: high}, {Size: 20 * MiB, Addr: low}, {Size: 20 * MiB, Addr: low},
	}})
	checkInvariants(t, a)
	b := mustMalloc(t, a, 20*MiB, 0)
	if b.Addr != low {
		t.Fatalf("block at %#x, want the lowest cached segment %#x", b.Addr, low)
	}
	if s := a.Stats(); s.RecordedSegments != 2 || s.SyntheticSegments != 1 || s.SegmentAllocs != 0 {
		t.Fatalf("stats %+v: want 2 recorded and 1 synthetic cached segments, no new one", s)
	}
}

// snapshotJSON is the part of a PyTorch snapshot (JSON form) the
// placement needs: each entry's action, address and size.
type snapshotJSON struct {
	DeviceTraces [][]struct {
		Action string `json:"action"`
		Addr   uint64 `json:"addr"`
		Size   uint64 `json:"size"`
	} `json:"device_traces"`
}

// recordedFromSnapshot is the recording of a snapshot read from data (JSON
// form, one device): for each alloc event of s, the segment_alloc'd
// segment its entry's address lies in. Prelude events stay unknown.
func recordedFromSnapshot(t *testing.T, data []byte, s *trace.Snapshot) []RecordedSegment {
	t.Helper()
	var doc snapshotJSON
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	entries := doc.DeviceTraces[s.Device]
	type seg struct{ addr, size uint64 }
	var live []seg // by address
	segAt := make([]RecordedSegment, len(entries))
	for i, e := range entries {
		switch e.Action {
		case "segment_alloc":
			j := sort.Search(len(live), func(j int) bool { return live[j].addr >= e.Addr })
			live = slices.Insert(live, j, seg{e.Addr, e.Size})
		case "segment_free":
			live = slices.DeleteFunc(live, func(g seg) bool { return g.addr == e.Addr })
		case "alloc":
			j := sort.Search(len(live), func(j int) bool { return live[j].addr+live[j].size > e.Addr })
			if j < len(live) && live[j].addr <= e.Addr {
				segAt[i] = RecordedSegment{Addr: live[j].addr, Size: live[j].size}
			}
		}
	}
	rec := make([]RecordedSegment, len(s.Events))
	for i, e := range s.Events {
		if at := s.EventEntries[i]; e.Op == trace.OpAlloc && at >= 0 {
			rec[i] = segAt[at]
		}
	}
	return rec
}

// The regression fixture testdata/tie-by-address.json is a snapshot in
// PyTorch's JSON form, written by hand after the H200 transformer
// snapshots' first divergence: a second 20 MiB segment the driver put
// below the first, a 2 MiB block PyTorch placed in the second's tail (the
// lower address), so when the second's 9 MiB blocks are freed it is not
// whole and a 20 MiB request needs a third segment: 60 MiB reserved. Given
// the recorded addresses the model does the same, segment for segment; with
// synthetic ones it puts the 2 MiB block in the first segment's tail and
// peaks at 40 MiB (the model's old answer, low as on the H200). At a
// 40 MiB capacity PyTorch's run would fail, and so does the model's.
func TestRecordedAddressesReproduceTheFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "tie-by-address.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := trace.ReadSnapshot(bytes.NewReader(data), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	settings, err := SettingsFromSnapshot(s.AllocatorSettings)
	if err != nil {
		t.Fatal(err)
	}
	rec := recordedFromSnapshot(t, data, s)
	r, err := Replay(slices.Values(s.Events), Config{Settings: settings, Recorded: rec})
	if err != nil {
		t.Fatal(err)
	}
	if r.PeakReserved != s.PeakReserved || s.PeakReserved != 60*MiB {
		t.Fatalf("peak reserved: model %d MiB, PyTorch %d MiB (want 60)", r.PeakReserved/MiB, s.PeakReserved/MiB)
	}
	var model, torch []SegmentEvent
	for _, g := range r.Segments {
		model = append(model, SegmentEvent{Event: g.Event, Size: g.Size})
	}
	prev := uint64(0)
	for _, p := range s.Reserved {
		// The model's segment comes with the alloc that needed it, the
		// event after PyTorch's segment_alloc entry.
		torch = append(torch, SegmentEvent{Event: p.Event, Size: p.Bytes - prev})
		prev = p.Bytes
	}
	if !slices.Equal(model, torch) {
		t.Fatalf("segments: model %v, PyTorch %v", model, torch)
	}
	if r.Stats.RecordedSegments != 3 || r.Stats.SyntheticSegments != 0 {
		t.Fatalf("recorded %d, synthetic %d segments; want every one at PyTorch's address", r.Stats.RecordedSegments, r.Stats.SyntheticSegments)
	}
	old, err := Replay(slices.Values(s.Events), Config{Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	if old.PeakReserved != 40*MiB {
		t.Fatalf("synthetic addresses: peak %d MiB, want 40 (the divergence this fixture pins)", old.PeakReserved/MiB)
	}
	for _, c := range []struct {
		rec    []RecordedSegment
		failed int
	}{{rec, 1}, {nil, 0}} {
		at, err := Replay(slices.Values(s.Events), Config{Settings: settings, Recorded: c.rec, Capacity: 40 * MiB})
		if err != nil {
			t.Fatal(err)
		}
		if at.FailedAllocs != c.failed {
			t.Fatalf("at 40 MiB with recording %v: %d failed allocations, want %d", c.rec != nil, at.FailedAllocs, c.failed)
		}
	}
}

// On generated workloads of every shape (trace.Synth, seeds 1–4, at the
// defaults, max_split_size_mb:64 and expandable segments), a replay
// given its own placements as the recording reproduces itself exactly:
// same segments, same peak, every segment at the recorded address. Given
// a recording whose addresses run the other way (a driver that hands out
// each new segment below the last), the invariants hold and the test logs
// how far each workload's peak reserved bytes move: the spread a snapshot
// without addresses leaves unknown.
func TestRecordedAddressesOnGeneratedWorkloads(t *testing.T) {
	settings := map[string]Settings{"defaults": {}}
	var err error
	if settings["max_split_size_mb:64"], err = ParseConf("max_split_size_mb:64"); err != nil {
		t.Fatal(err)
	}
	if settings["expandable_segments:True"], err = ParseConf("expandable_segments:True"); err != nil {
		t.Fatal(err)
	}
	for _, w := range trace.Workloads() {
		for _, conf := range []string{"defaults", "max_split_size_mb:64", "expandable_segments:True"} {
			var moved []string
			recorded, segments := 0, 0
			for seed := uint64(1); seed <= 4; seed++ {
				seq, err := trace.Synth(w, seed, trace.SynthParams{Allocs: 1500})
				if err != nil {
					t.Fatal(err)
				}
				events := slices.Collect(seq)
				own, base := recordOwn(t, events, settings[conf], false)
				again, err := Replay(slices.Values(events), Config{Settings: settings[conf], Recorded: own})
				if err != nil {
					t.Fatal(err)
				}
				if again.PeakReserved != base.PeakReserved || !slices.Equal(again.Segments, base.Segments) ||
					again.Stats.SyntheticSegments != 0 || again.Stats.RecordedSegments != base.Stats.SyntheticSegments {
					t.Fatalf("%s seed %d %s: own recording replays to peak %d (was %d), %d of %d segments recorded",
						w, seed, conf, again.PeakReserved, base.PeakReserved, again.Stats.RecordedSegments, base.Stats.SyntheticSegments)
				}
				down, _ := recordOwn(t, events, settings[conf], true)
				rev, err := replay(slices.Values(events), Config{Settings: settings[conf], Recorded: down}, func(idx int, a *Allocator, _ Block) {
					if idx%97 == 0 {
						checkInvariants(t, a)
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				recorded += rev.Stats.RecordedSegments
				segments += rev.Stats.RecordedSegments + rev.Stats.SyntheticSegments
				if rev.PeakReserved != base.PeakReserved {
					moved = append(moved, fmt.Sprintf("seed %d: %+.0f MiB", seed, (float64(rev.PeakReserved)-float64(base.PeakReserved))/MiB))
				}
			}
			t.Logf("%-12s %-24s descending addresses (%d of %d plain segments at them) move the peak on %d of 4 seeds %v",
				w, conf, recorded, segments, len(moved), moved)
		}
	}
}

// recordOwn replays events with synthetic addresses and returns, per alloc
// event, the plain segment the model placed it in: at its own address, or,
// with descending, at an address below every earlier segment's (with
// random gaps), as a driver that hands out ranges top-down would.
func recordOwn(t *testing.T, events []trace.Event, s Settings, descending bool) ([]RecordedSegment, Result) {
	t.Helper()
	rec := make([]RecordedSegment, len(events))
	addrOf := map[*segment]uint64{}
	next := uint64(1 << 50)
	rng := rand.New(rand.NewPCG(1, 2))
	res, err := replay(slices.Values(events), Config{Settings: s}, func(idx int, a *Allocator, b Block) {
		seg := a.live[b.Addr].seg
		if seg.expandable {
			return
		}
		if _, ok := addrOf[seg]; !ok {
			addrOf[seg] = seg.addr
			if descending {
				next -= seg.size + addressGap + uint64(rng.IntN(4))*RoundLarge
				addrOf[seg] = next
			}
		}
		rec[idx] = RecordedSegment{Addr: addrOf[seg], Size: seg.size}
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec, res
}

// A MallocRecorded hint may point anywhere, among the synthetic addresses
// too: one over a live synthetic segment is refused, and a synthetic
// segment that would run into one at a recorded address goes past it.
func TestHintsAmongSyntheticAddressesNeverOverlap(t *testing.T) {
	a := New(0)
	first := mustMalloc(t, a, 20*MiB, 0) // synthetic, at the base
	b, err := a.MallocRecorded(20*MiB, 0, RecordedSegment{Addr: first.Addr + 10*MiB, Size: 20 * MiB})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, a)
	if b.Addr == first.Addr+10*MiB {
		t.Fatalf("hint over a live synthetic segment taken at %#x", b.Addr)
	}
	// The next synthetic address is b's end plus a gap: a hint just there
	// is taken, and the synthetic segment after it goes above it.
	ahead := b.Addr + 20*MiB + addressGap
	c, err := a.MallocRecorded(20*MiB, 0, RecordedSegment{Addr: ahead, Size: 20 * MiB})
	if err != nil || c.Addr != ahead {
		t.Fatalf("hint at the next synthetic address: block %#x (%v), want %#x", c.Addr, err, ahead)
	}
	d := mustMalloc(t, a, 20*MiB, 0)
	if d.Addr < ahead+20*MiB {
		t.Fatalf("synthetic segment at %#x runs into the recorded one at %#x", d.Addr, ahead)
	}
	if s := a.Stats(); s.RecordedSegments != 1 || s.SyntheticSegments != 3 {
		t.Fatalf("recorded %d, synthetic %d segments, want 1 and 3", s.RecordedSegments, s.SyntheticSegments)
	}
}

// conventionTrace is the smallest trace whose smallest capacity depends on
// the invented addresses (MiB): S1 (40) and S2 (20) allocated, S1 freed
// and half of it taken (a 20 MiB block and a free 20 MiB tail), S2 freed:
// two free 20 MiB blocks, S1's tail and the whole of S2. The next 20 MiB
// request takes the lower: rising, S1's tail (S1 allocated first), leaving
// S2 whole; falling, S2, leaving S1's tail, which merges with its front
// once that is freed, so the last 40 MiB request finds S1 whole. Rising
// needs a new 40 MiB segment there, 80 MiB in all once S2 goes back.
func conventionTrace() []trace.Event {
	return []trace.Event{
		{Op: trace.OpAlloc, ID: 1, Size: 40 * MiB},
		{Op: trace.OpAlloc, ID: 2, Size: 20 * MiB},
		{Op: trace.OpFree, ID: 1},
		{Op: trace.OpAlloc, ID: 3, Size: 20 * MiB},
		{Op: trace.OpFree, ID: 2},
		{Op: trace.OpAlloc, ID: 4, Size: 20 * MiB},
		{Op: trace.OpFree, ID: 3},
		{Op: trace.OpAlloc, ID: 5, Size: 40 * MiB},
	}
}

// The two conventions pick different blocks among equal sizes, and so
// need different capacities: falling fits the live peak, 60 MiB; rising
// fails there and fits 80 MiB.
func TestAddressConventionDecidesTies(t *testing.T) {
	for _, c := range []struct {
		conv     AddressConvention
		fits60   bool
		peakUnl  uint64
		synthetc int
	}{{AddressesRising, false, 100 * MiB, 3}, {AddressesFalling, true, 60 * MiB, 2}} {
		res, err := Replay(slices.Values(conventionTrace()), Config{Capacity: 60 * MiB, Addresses: c.conv})
		if err != nil {
			t.Fatal(err)
		}
		if (res.FailedAllocs == 0) != c.fits60 {
			t.Errorf("%v at 60 MiB: %d failed allocations", c.conv, res.FailedAllocs)
		}
		res, err = Replay(slices.Values(conventionTrace()), Config{Capacity: 80 * MiB, Addresses: c.conv})
		if err != nil || res.FailedAllocs != 0 {
			t.Errorf("%v at 80 MiB: %d failed (%v)", c.conv, res.FailedAllocs, err)
		}
		res, err = Replay(slices.Values(conventionTrace()), Config{Addresses: c.conv})
		if err != nil || res.PeakReserved != c.peakUnl || res.Stats.SyntheticSegments != c.synthetc {
			t.Errorf("%v unlimited: peak %d MiB, %d synthetic segments (%v)", c.conv, res.PeakReserved/MiB, res.Stats.SyntheticSegments, err)
		}
	}
}

// Falling addresses go below every recorded one, each below the last,
// clear of every live segment; a recorded segment still takes its
// address.
func TestFallingAddressesGoBelowTheRecorded(t *testing.T) {
	const rec = 0x7f50_6600_0000
	a := NewWithConfig(Config{Addresses: AddressesFalling, Recorded: []RecordedSegment{{Addr: rec, Size: 20 * MiB}}})
	r, err := a.MallocRecorded(20*MiB, 0, RecordedSegment{Addr: rec, Size: 20 * MiB})
	if err != nil || r.Addr != rec {
		t.Fatalf("recorded segment at %#x (%v), want %#x", r.Addr, err, uint64(rec))
	}
	prev := uint64(rec)
	for i := range 5 {
		b, err := a.Malloc(uint64(12+i)*MiB, 0)
		if err != nil {
			t.Fatal(err)
		}
		if b.Addr+b.Size > prev-addressGap+RoundLarge || b.Addr >= prev || b.Addr%RoundLarge != 0 {
			t.Fatalf("segment %d at %#x..%#x, not below %#x", i, b.Addr, b.Addr+b.Size, prev)
		}
		prev = b.Addr
		checkInvariants(t, a)
	}
	if s := a.Stats(); s.RecordedSegments != 1 || s.SyntheticSegments != 5 {
		t.Fatalf("stats %+v", s)
	}
	// Nothing recorded: they fall from the top of the user address space;
	// past its bottom the model is out of memory, never a wrapped address.
	b := NewWithConfig(Config{Addresses: AddressesFalling})
	blk, err := b.Malloc(20*MiB, 0)
	if err != nil || blk.Addr >= fallingCeiling || blk.Addr < fallingCeiling-64*MiB {
		t.Fatalf("first falling segment at %#x (%v)", blk.Addr, err)
	}
	if _, err := b.Malloc(fallingCeiling, 0); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("a segment larger than the addresses left: %v", err)
	}
	checkInvariants(t, b)
}
