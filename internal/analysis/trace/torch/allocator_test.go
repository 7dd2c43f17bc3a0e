package torch

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// checkInvariants verifies T1–T4 by walking every segment reachable from a
// live or free block.
func checkInvariants(t *testing.T, a *Allocator) {
	t.Helper()
	segs := map[*segment]*block{}
	note := func(b *block) {
		for b.prev != nil {
			b = b.prev
		}
		segs[b.seg] = b
	}
	inPool := map[*block]bool{}
	inUnmapped := map[*block]bool{}
	for _, p := range a.poolOrder {
		for i, b := range p.unmapped {
			if !b.unmapped || b.allocated || !b.seg.expandable || b.seg.pool != p {
				t.Fatalf("T3: block %#x in the unmapped list is not an unmapped block of this pool's range", b.addr)
			}
			if i > 0 && p.unmapped[i-1].addr >= b.addr {
				t.Fatal("unmapped list out of address order")
			}
			if (b.addr-b.seg.addr)%b.seg.page != 0 || b.size%b.seg.page != 0 {
				t.Fatalf("unmapped block %#x+%d not page-aligned", b.addr, b.size)
			}
			inUnmapped[b] = true
			note(b)
		}
		for i, b := range p.blocks {
			if b.allocated || b.unmapped {
				t.Fatalf("T3: allocated or unmapped block %#x in a free pool", b.addr)
			}
			if i > 0 && !less(p.blocks[i-1], b.size, b.addr) {
				t.Fatal("free pool out of (size, address) order")
			}
			if b.seg.pool != p {
				t.Fatal("block in another pool than its segment's")
			}
			inPool[b] = true
			note(b)
		}
	}
	var allocated uint64
	for addr, b := range a.live {
		if !b.allocated || b.addr != addr {
			t.Fatalf("live map holds %#x, not allocated", addr)
		}
		allocated += b.size
		note(b)
	}
	var reserved uint64
	for seg, head := range segs {
		if !seg.expandable {
			reserved += seg.size
		}
		if head.addr != seg.addr {
			t.Fatalf("T1: segment %#x starts with block %#x", seg.addr, head.addr)
		}
		end := seg.addr
		for b := head; b != nil; b = b.next {
			if b.addr != end || b.seg != seg || (b.next != nil && b.next.prev != b) {
				t.Fatalf("T1: segment %#x does not tile at %#x", seg.addr, b.addr)
			}
			if seg.expandable && !b.unmapped {
				reserved += b.size
			}
			if b.unmapped && !inUnmapped[b] {
				t.Fatalf("T3: unmapped block %#x not in its pool's unmapped list", b.addr)
			}
			if !b.allocated && !b.unmapped && !inPool[b] {
				t.Fatalf("T3: free block %#x not in its pool", b.addr)
			}
			if n := b.next; !b.allocated && n != nil && !n.allocated && b.unmapped == n.unmapped {
				t.Fatalf("T2: adjacent free or unmapped blocks at %#x", b.addr)
			}
			end += b.size
		}
		if end != seg.addr+seg.size {
			t.Fatalf("T1: segment %#x blocks end at %#x, not %#x", seg.addr, end, seg.addr+seg.size)
		}
	}
	if reserved != a.Reserved() || allocated != a.Allocated() {
		t.Fatalf("T4: reserved %d (walk %d), allocated %d (walk %d)", a.Reserved(), reserved, a.Allocated(), allocated)
	}
	// T5: no two segments overlap, and a.segs is exactly the live
	// segments in address order (a wholly free segment is reachable from
	// its pool, an unmapped range from its unmapped list, so every live
	// segment was walked).
	var all []*segment
	for seg := range segs {
		all = append(all, seg)
	}
	slices.SortFunc(all, func(x, y *segment) int { return cmp.Compare(x.addr, y.addr) })
	for i := 1; i < len(all); i++ {
		if all[i-1].addr+all[i-1].size > all[i].addr {
			t.Fatalf("T5: segments %#x+%d and %#x overlap", all[i-1].addr, all[i-1].size, all[i].addr)
		}
	}
	if !slices.Equal(all, a.segs) {
		t.Fatalf("T5: %d live segments, %d tracked", len(all), len(a.segs))
	}
}

func mustMalloc(t *testing.T, a *Allocator, size uint64, stream int) Block {
	t.Helper()
	b, err := a.Malloc(size, stream)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, a)
	return b
}

func TestRequestsRoundUpTo512Bytes(t *testing.T) {
	for _, c := range [][2]uint64{{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {1000, 1024}, {MiB + 1, MiB + 512}} {
		if got := RoundSize(c[0]); got != c[1] {
			t.Fatalf("RoundSize(%d) = %d, want %d", c[0], got, c[1])
		}
	}
	a := New(0)
	if b := mustMalloc(t, a, 1000, 0); b.Size != 1024 || b.Requested != 1000 {
		t.Fatalf("block %+v", b)
	}
}

func TestSegmentSizeFollowsRequestClass(t *testing.T) {
	cases := []struct{ size, segment uint64 }{
		{512, 2 * MiB}, {MiB, 2 * MiB}, // small pool
		{MiB + 512, 20 * MiB}, {10*MiB - 512, 20 * MiB}, // 1–10 MiB
		{10 * MiB, 10 * MiB}, {11*MiB + 1, 12 * MiB}, {100 * MiB, 100 * MiB},
	}
	for _, c := range cases {
		a := New(0)
		mustMalloc(t, a, c.size, 0)
		if a.Reserved() != c.segment {
			t.Fatalf("request %d: segment %d, want %d", c.size, a.Reserved(), c.segment)
		}
	}
}

func TestSmallRequestsShareOneSegmentAndSplitDownTo512(t *testing.T) {
	a := New(0)
	x := mustMalloc(t, a, 1024, 0)
	y := mustMalloc(t, a, MiB, 0)
	z := mustMalloc(t, a, MiB-1024-512, 0) // leaves exactly 512 B: still split
	w := mustMalloc(t, a, 100, 0)          // takes the last 512 B
	if a.Reserved() != 2*MiB || y.Addr != x.Addr+1024 || z.Addr != y.Addr+MiB || w.Addr != z.Addr+z.Size || w.Size != 512 {
		t.Fatalf("reserved %d, blocks %+v %+v %+v %+v", a.Reserved(), x, y, z, w)
	}
}

func TestLargePoolSplitsOnlyWhenRemainderExceeds1MiB(t *testing.T) {
	a := New(0)
	b := mustMalloc(t, a, 19*MiB, 0) // 20 MiB segment, remainder exactly 1 MiB: not split
	if b.Size != 20*MiB {
		t.Fatalf("block %d, want the whole 20 MiB segment", b.Size)
	}
	a2 := New(0)
	b2 := mustMalloc(t, a2, 19*MiB-512, 0) // remainder 1 MiB + 512: split
	if b2.Size != 19*MiB-512 || a2.Stats().InactiveSplit != MiB+512 {
		t.Fatalf("block %d, inactive split %d", b2.Size, a2.Stats().InactiveSplit)
	}
}

func TestBestFitTakesSmallestBlockThenLowestAddress(t *testing.T) {
	a := New(0)
	// Three 20 MiB segments filled exactly: C = 8+6+6, A = 6+6+8, B = 6+6+8
	// (MiB), in that address order.
	fill := func(sizes ...uint64) []Block {
		var bs []Block
		for _, s := range sizes {
			bs = append(bs, mustMalloc(t, a, s*MiB, 0))
		}
		return bs
	}
	c := fill(8, 6, 6)
	x := fill(6, 6, 8)
	y := fill(6, 6, 8)
	if a.Reserved() != 60*MiB {
		t.Fatalf("reserved %d, want three full segments", a.Reserved())
	}
	a.Free(c[0]) // 8 MiB free at the lowest address
	a.Free(y[1]) // 6 MiB free in B
	a.Free(x[1]) // 6 MiB free in A, below B
	checkInvariants(t, a)
	got := mustMalloc(t, a, 5*MiB, 0)
	if got.Addr != x[1].Addr {
		t.Fatalf("best fit chose %#x, want the 6 MiB block of A at %#x", got.Addr, x[1].Addr)
	}
	if got.Size != 6*MiB {
		t.Fatalf("remainder of 1 MiB was split off: block %d", got.Size)
	}
}

func TestFreeMergesWithBothNeighbours(t *testing.T) {
	a := New(0)
	x := mustMalloc(t, a, 4*MiB, 0)
	y := mustMalloc(t, a, 4*MiB, 0)
	z := mustMalloc(t, a, 4*MiB, 0)
	a.Free(x)
	a.Free(z)
	checkInvariants(t, a)
	a.Free(y)
	checkInvariants(t, a)
	p := a.pools[poolKey{stream: 0, small: false}]
	if len(p.blocks) != 1 || p.blocks[0].size != 20*MiB {
		t.Fatalf("free blocks %d, first %d: want one merged 20 MiB block", len(p.blocks), p.blocks[0].size)
	}
}

func TestStreamsAndPoolsNeverShareBlocks(t *testing.T) {
	a := New(0)
	x := mustMalloc(t, a, 4*MiB, 0)
	a.Free(x)
	mustMalloc(t, a, 4*MiB, 1) // other stream: new segment
	if a.Reserved() != 40*MiB {
		t.Fatalf("reserved %d, want two 20 MiB segments", a.Reserved())
	}
	mustMalloc(t, a, 512*KiB, 0) // small request: small pool, new 2 MiB segment
	if a.Reserved() != 42*MiB {
		t.Fatalf("reserved %d, want a small segment added", a.Reserved())
	}
}

func TestOutOfMemoryReleasesCachedSegmentsAndRetries(t *testing.T) {
	a := New(40 * MiB)
	x := mustMalloc(t, a, 4*MiB, 0)
	y := mustMalloc(t, a, 4*MiB, 1)
	a.Free(x)
	a.Free(y)
	z := mustMalloc(t, a, 30*MiB, 0) // needs a 30 MiB segment: both cached segments go back
	s := a.Stats()
	if a.Reserved() != 30*MiB || s.AllocRetries != 1 || s.SegmentFrees != 2 || s.OOMs != 0 {
		t.Fatalf("reserved %d, stats %+v", a.Reserved(), s)
	}
	a.Free(z)
}

func TestOutOfMemoryWhenLiveBlocksPinSegments(t *testing.T) {
	a := New(40 * MiB)
	mustMalloc(t, a, 4*MiB, 0)
	mustMalloc(t, a, 4*MiB, 1)
	before := a.Reserved()
	_, err := a.Malloc(30*MiB, 0)
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "31457280") {
		t.Fatalf("got %v, want ErrOutOfMemory naming the request", err)
	}
	if a.Reserved() != before || a.Stats().OOMs != 1 {
		t.Fatalf("reserved %d, stats %+v", a.Reserved(), a.Stats())
	}
	checkInvariants(t, a)
}

func TestMaxSplitSizeKeepsOversizeBlocksWhole(t *testing.T) {
	a := NewWithConfig(Config{Settings: Settings{MaxSplitSizeMB: 32}})
	big := mustMalloc(t, a, 40*MiB, 0)
	a.Free(big)
	mustMalloc(t, a, 4*MiB, 0) // below max split: may not take the oversize block
	if a.Reserved() != 60*MiB {
		t.Fatalf("reserved %d: a small request took the oversize block", a.Reserved())
	}
	b := mustMalloc(t, a, 34*MiB, 0) // at/above max split: takes it whole, unsplit
	if b.Size != 40*MiB {
		t.Fatalf("oversize block split to %d", b.Size)
	}
}

func TestMaxSplitSizeReleasesOneOversizeSegmentBeforeFlushingAll(t *testing.T) {
	a := NewWithConfig(Config{Capacity: 100 * MiB, Settings: Settings{MaxSplitSizeMB: 32}})
	o := mustMalloc(t, a, 60*MiB, 0)
	s := mustMalloc(t, a, 4*MiB, 0)
	a.Free(o)
	a.Free(s)
	// 34 MiB may not take the 60 MiB block (more than 20 MiB too large), and a
	// new segment does not fit: the one oversize segment goes, nothing else.
	mustMalloc(t, a, 34*MiB, 0)
	st := a.Stats()
	if st.ReleasedOversize != 1 || st.AllocRetries != 0 || a.Reserved() != 54*MiB {
		t.Fatalf("reserved %d, stats %+v", a.Reserved(), st)
	}
}

func TestMaxSplitSizeReleasesLargestOversizeSegmentsUntilEnough(t *testing.T) {
	a := NewWithConfig(Config{Capacity: 100 * MiB, Settings: Settings{MaxSplitSizeMB: 32}})
	o1 := mustMalloc(t, a, 40*MiB, 0)
	o2 := mustMalloc(t, a, 40*MiB, 0)
	a.Free(o1)
	a.Free(o2)
	mustMalloc(t, a, 50*MiB, 0)
	st := a.Stats()
	if st.ReleasedOversize != 2 || st.AllocRetries != 0 || a.Reserved() != 50*MiB {
		t.Fatalf("reserved %d, stats %+v", a.Reserved(), st)
	}
}

func TestEmptyCacheKeepsSegmentsWithLiveBlocks(t *testing.T) {
	a := New(0)
	x := mustMalloc(t, a, 4*MiB, 0)
	y := mustMalloc(t, a, 40*MiB, 0)
	mustMalloc(t, a, 100, 0)
	a.Free(x)
	a.Free(y)
	a.EmptyCache()
	checkInvariants(t, a)
	if a.Reserved() != 2*MiB || a.PeakReserved() != 62*MiB {
		t.Fatalf("reserved %d peak %d", a.Reserved(), a.PeakReserved())
	}
}

func TestFreeOfUnknownBlockPanics(t *testing.T) {
	a := New(0)
	b := mustMalloc(t, a, 100, 0)
	a.Free(b)
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(r.(string), "torch:") {
			t.Fatalf("recovered %v, want a torch: panic", r)
		}
	}()
	a.Free(b)
}

func TestInvalidRequestIsRefusedAndChangesNothing(t *testing.T) {
	a := New(0)
	for _, c := range []struct {
		size   uint64
		stream int
	}{{MaxRequest + 1, 0}, {10, -1}} {
		if _, err := a.Malloc(c.size, c.stream); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("%+v: %v", c, err)
		}
	}
	if a.Reserved() != 0 {
		t.Fatal("refused request reserved memory")
	}
}

func TestRandomOperationsKeepInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 0))
	a := NewWithConfig(Config{Capacity: 512 * MiB, Settings: Settings{MaxSplitSizeMB: 64}})
	var live []Block
	for i := range 3000 {
		if len(live) > 0 && rng.IntN(5) < 2 {
			j := rng.IntN(len(live))
			a.Free(live[j])
			live = slices.Delete(live, j, j+1)
		} else {
			size := uint64(1) << rng.IntN(28)
			size += rng.Uint64N(size)
			b, err := a.Malloc(size, rng.IntN(2))
			if err == nil {
				live = append(live, b)
			} else if !errors.Is(err, ErrOutOfMemory) {
				t.Fatal(err)
			}
		}
		if i%50 == 0 {
			checkInvariants(t, a)
		}
		if i%700 == 0 {
			a.EmptyCache()
		}
	}
	checkInvariants(t, a)
	if a.Reserved() > 512*MiB {
		t.Fatalf("reserved %d above capacity", a.Reserved())
	}
}

func TestReplayContinuesPastFailedAllocAndIgnoresItsFree(t *testing.T) {
	events := []trace.Event{
		{Op: trace.OpAlloc, T: 0, ID: 1, Size: 30 * MiB},
		{Op: trace.OpAlloc, T: 1, ID: 2, Size: 30 * MiB}, // over the 40 MiB capacity
		{Op: trace.OpWindow, T: 2, Mode: trace.ModePersistent},
		{Op: trace.OpFree, T: 3, ID: 2},
		{Op: trace.OpFree, T: 4, ID: 1},
		{Op: trace.OpFree, T: 5, ID: 99},
		{Op: trace.OpCleanup, T: 6},
	}
	r, err := ReplayTorch(slices.Values(events), 40*MiB)
	if err != nil {
		t.Fatal(err)
	}
	if r.Allocs != 1 || r.FailedAllocs != 1 || r.FirstFailure != 1 || r.IgnoredFrees != 2 || r.Frees != 1 ||
		r.Cleanups != 1 || r.Skipped != 1 || r.PeakReserved != 30*MiB || r.FinalReserved != 0 {
		t.Fatalf("result %+v", r)
	}
	if len(r.Segments) != 2 || r.Segments[0] != (SegmentEvent{Event: 0, Size: 30 * MiB}) ||
		r.Segments[1] != (SegmentEvent{Event: 6, Size: 30 * MiB, Release: true}) {
		t.Fatalf("segments %+v", r.Segments)
	}
}

// An alloc of an ID still live frees it first, as gpumem's replay does:
// counted, not an error.
func TestReplayTreatsAllocOfLiveIDAsImpliedFree(t *testing.T) {
	dup := []trace.Event{
		{Op: trace.OpAlloc, ID: 1, Size: 4 * MiB},
		{Op: trace.OpAlloc, ID: 1, Size: 2 * MiB},
		{Op: trace.OpFree, ID: 1},
		{Op: trace.OpFree, ID: 1},
	}
	r, err := ReplayTorch(slices.Values(dup), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.ImpliedFrees != 1 || r.Allocs != 2 || r.Frees != 1 || r.IgnoredFrees != 1 || r.Stats.Requested != 0 || r.PeakLive != 4*MiB {
		t.Fatalf("result %+v", r)
	}
}

// Five live allocations of almost 2^62 bytes take the synthetic addresses
// past 2^64: with no capacity that is out of memory, never a wrapped
// address (which made two blocks collide and Free panic).
func TestSegmentAddressesNeverWrap(t *testing.T) {
	size := uint64(1)<<62 - 2*MiB
	var events []trace.Event
	for i := range 5 {
		events = append(events, trace.Event{Op: trace.OpAlloc, T: int64(i), ID: uint64(i + 1), Size: size})
	}
	for i := range 5 {
		events = append(events, trace.Event{Op: trace.OpFree, T: int64(10 + i), ID: uint64(i + 1)})
	}
	r, err := ReplayTorch(slices.Values(events), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.FailedAllocs == 0 || r.Allocs+r.FailedAllocs != 5 || r.Frees != r.Allocs {
		t.Fatalf("result %+v", r)
	}
	a := New(0)
	var blocks []Block
	for {
		b, err := a.Malloc(size, 0)
		if err != nil {
			if !errors.Is(err, ErrOutOfMemory) {
				t.Fatal(err)
			}
			break
		}
		blocks = append(blocks, b)
		checkInvariants(t, a)
	}
	seen := map[uint64]bool{}
	for _, b := range blocks {
		if seen[b.Addr] {
			t.Fatalf("address %#x handed out twice", b.Addr)
		}
		seen[b.Addr] = true
		a.Free(b)
	}
}

func TestReplayRejectsBadTracesNamingTheEvent(t *testing.T) {
	far := []trace.Event{{Op: trace.OpAlloc, ID: 1, Size: 1}, {Op: trace.OpAlloc, ID: 2, Size: 1, Stream: trace.MaxStreams}}
	if _, err := ReplayTorch(slices.Values(far), 0); !errors.Is(err, trace.ErrInvalidEvent) || !strings.Contains(err.Error(), "event 1") {
		t.Fatalf("stream beyond MaxStreams: %v", err)
	}
	bad := []trace.Event{{Op: trace.OpCleanup}, {Op: trace.Op(42)}}
	if _, err := ReplayTorch(slices.Values(bad), 0); !errors.Is(err, trace.ErrUnknownOp) || !strings.Contains(err.Error(), "event 1") {
		t.Fatalf("unknown op: %v", err)
	}
}

func TestReplayOfSyntheticWorkloadsIsDeterministic(t *testing.T) {
	for _, name := range trace.Workloads() {
		seq, err := trace.Synth(name, 3, trace.SynthParams{Allocs: 500})
		if err != nil {
			t.Fatal(err)
		}
		r1, err1 := ReplayTorch(seq, 0)
		r2, err2 := ReplayTorch(seq, 0)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if r1.PeakReserved != r2.PeakReserved || !slices.Equal(r1.Segments, r2.Segments) {
			t.Fatalf("%s: two replays differ", name)
		}
		if r1.PeakReserved < r1.PeakAllocated || r1.PeakAllocated < r1.PeakLive || r1.Allocs < 500 {
			t.Fatalf("%s: peak reserved %d < allocated %d < live %d, allocs %d", name, r1.PeakReserved, r1.PeakAllocated, r1.PeakLive, r1.Allocs)
		}
	}
}

func TestCachedSegmentsServeRequestsBeforeNewSegments(t *testing.T) {
	a := NewWithConfig(Config{Cached: []CachedSegment{{Size: 2 * MiB, Stream: 0, Small: true}, {Size: 26 * MiB, Stream: 0}, {Size: 20 * MiB, Stream: -1}}})
	if a.Reserved() != 48*MiB || a.PeakReserved() != 48*MiB {
		t.Fatalf("reserved %d", a.Reserved())
	}
	mustMalloc(t, a, 100, 0)
	mustMalloc(t, a, 25*MiB, 0)
	if a.Reserved() != 48*MiB || a.Stats().SegmentAllocs != 0 {
		t.Fatalf("reserved %d, stats %+v: cached segments not used", a.Reserved(), a.Stats())
	}
	mustMalloc(t, a, 4*MiB, 0) // stream 0 has no large cache left: the stream −1 segment is not its
	if a.Reserved() != 68*MiB {
		t.Fatalf("reserved %d", a.Reserved())
	}
	a.EmptyCache()
	if a.Reserved() != 48*MiB {
		t.Fatalf("after EmptyCache reserved %d: the unused cached segment should go", a.Reserved())
	}
}

// max_non_split_rounding_mb widens the reuse margin of oversize blocks
// (get_free_block: an oversize block serves a request at or above
// max_split_size only if less than this much larger; default kLargeBuffer,
// 20 MiB): with 40 MiB, 34 MiB takes the cached 60 MiB block whole.
func TestMaxNonSplitRoundingWidensTheOversizeReuseMargin(t *testing.T) {
	for _, c := range []struct {
		margin   uint64
		reserved uint64
	}{{0, 94 * MiB}, {40, 60 * MiB}} {
		a := NewWithConfig(Config{Settings: Settings{MaxSplitSizeMB: 32, MaxNonSplitRoundingMB: c.margin}})
		a.Free(mustMalloc(t, a, 60*MiB, 0))
		b := mustMalloc(t, a, 34*MiB, 0)
		if a.Reserved() != c.reserved || (c.margin != 0 && b.Size != 60*MiB) {
			t.Fatalf("margin %d MiB: reserved %d MiB, block %d", c.margin, a.Reserved()/MiB, b.Size)
		}
	}
}

// The invariants hold under every modelled setting, alone and combined,
// through random traffic on two streams with out-of-memory and cache
// flushes.
func TestRandomOperationsKeepInvariantsUnderEverySetting(t *testing.T) {
	for _, conf := range []string{
		"expandable_segments:True",
		"expandable_segments:True,max_split_size_mb:64",
		"roundup_power2_divisions:[1:4,64:8,>:2]",
		"garbage_collection_threshold:0.5",
		"expandable_segments:True,max_split_size_mb:64,roundup_power2_divisions:4,garbage_collection_threshold:0.7",
		"max_split_size_mb:64,max_non_split_rounding_mb:64,garbage_collection_threshold:0.6",
	} {
		t.Run(conf, func(t *testing.T) {
			s, err := ParseConf(conf)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 0))
			a := NewWithConfig(Config{Capacity: 512 * MiB, Settings: s})
			var live []Block
			for i := range 3000 {
				if len(live) > 0 && rng.IntN(5) < 2 {
					j := rng.IntN(len(live))
					a.Free(live[j])
					live = slices.Delete(live, j, j+1)
				} else {
					size := uint64(1) << rng.IntN(28)
					size += rng.Uint64N(size)
					b, err := a.Malloc(size, rng.IntN(2))
					if err == nil {
						live = append(live, b)
					} else if !errors.Is(err, ErrOutOfMemory) {
						t.Fatal(err)
					}
				}
				if i%25 == 0 {
					checkInvariants(t, a)
				}
				if i%700 == 0 {
					a.EmptyCache()
				}
				if a.Reserved() > 512*MiB {
					t.Fatalf("reserved %d above capacity", a.Reserved())
				}
			}
			for _, b := range live {
				a.Free(b)
			}
			a.EmptyCache()
			checkInvariants(t, a)
			if a.Reserved() != 0 || a.Allocated() != 0 {
				t.Fatalf("after freeing everything and emptying the cache: reserved %d, allocated %d", a.Reserved(), a.Allocated())
			}
		})
	}
}
