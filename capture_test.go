package gpumem

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/capture"
	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

func addOne(s *Stream, b Buffer) error {
	return s.Enqueue("add-one", []Use{{Buffer: b, Access: ReadWrite}}, func(res []storage.Resource) error {
		for i := range res[0].Bytes {
			res[0].Bytes[i]++
		}
		return nil
	})
}

func TestSealedGraphReplaysWithoutRunningWhileRecording(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	b := mustAlloc(t, s, 1<<20)
	if err := b.Write(ctx, bytes.Repeat([]byte{10}, 1<<20)); err != nil {
		t.Fatal(err)
	}
	tok, err := s.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	if err := addOne(s, b); err != nil { // warmup runs: 11
		t.Fatal(err)
	}
	if err := s.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	if err := addOne(s, b); err != nil { // recorded, not run
		t.Fatal(err)
	}
	g, err := s.EndCapture(tok)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := b.Read(ctx)
	if got[0] != 11 {
		t.Fatalf("after seal byte = %d, want 11 (recording must not run)", got[0])
	}
	if st := d.Stats(); st.GuardedPages != 1 || st.Captures.Sealed != 1 {
		t.Fatalf("guarded pages %d sealed %d, want 1 and 1", st.GuardedPages, st.Captures.Sealed)
	}
	for range 3 {
		if err := g.Launch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, err = b.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{14}, 1<<20)) {
		t.Fatalf("after three launches byte = %d, want 14", got[0])
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.GuardedPages != 0 {
		t.Fatalf("guards after Close = %d", st.GuardedPages)
	}
}

func TestRecordingThatNeedsAPageDoomsCaptureAndMarksWrites(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	b := mustAlloc(t, s, 1<<20)
	tok, _ := s.PrepareCapture()
	if err := s.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(ctx, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, 8<<20); !errors.Is(err, ErrPageUpdateForbidden) {
		t.Fatalf("alloc needing a page while recording: %v, want ErrPageUpdateForbidden", err)
	}
	if _, err := s.EndCapture(tok); err == nil {
		t.Fatal("EndCapture of a doomed recording succeeded")
	}
	if _, err := b.Read(ctx); !errors.Is(err, ErrUnwritten) {
		t.Fatalf("read of a doomed recording's output: %v, want ErrUnwritten", err)
	}
	if st := d.Stats(); st.Captures.Doomed != 1 || st.GuardedPages != 0 {
		t.Fatalf("doomed %d guarded %d", st.Captures.Doomed, st.GuardedPages)
	}
}

// A rehearsal the storage refuses leaves the recording without room: the
// recording's error says the recording may add no page and why the room is
// missing, with the storage's refusal in its chain, so a caller tells "warm
// up differently" from "the device is full".
func TestRecordingAfterARefusedRehearsalSaysTheRehearsalFoundNoMemory(t *testing.T) {
	ctx := context.Background()
	d, faults := faultyDevice(t)
	s := d.DefaultStream()
	tok, err := s.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	warm := mustAlloc(t, s, 3<<20)
	if err := warm.Free(); err != nil {
		t.Fatal(err)
	}
	// The warmup's page goes back, so the rehearsal needs a new one, which
	// the storage refuses.
	if err := s.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := d.BytesAllocated(); got != 0 {
		t.Fatalf("device bytes after the cleanup %d, want 0 (the test needs the rehearsal to add a page)", got)
	}
	(*faults)[0].RefuseAllocAbove(1 << 20)
	if err := s.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	(*faults)[0].RefuseAllocAbove(0)
	_, err = s.Alloc(ctx, 3<<20)
	if !errors.Is(err, ErrPageUpdateForbidden) || !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("recording's alloc after a refused rehearsal: %v, want ErrPageUpdateForbidden and ErrOutOfMemory", err)
	}
	if !strings.Contains(err.Error(), "rehearsal") {
		t.Fatalf("error %q does not name the rehearsal", err)
	}
	if _, err := s.EndCapture(tok); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("EndCapture of the doomed recording: %v, want it to carry ErrOutOfMemory", err)
	}
	// Nothing is left held: the next capture, with memory back, succeeds.
	g, err := s.Capture(ctx, func(ctx context.Context, s *Stream) error {
		b, err := s.Alloc(ctx, 3<<20)
		if err != nil {
			return err
		}
		return b.Free()
	})
	if err != nil {
		t.Fatalf("capture after the refusal: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

// A rehearsal refused on the pages the warmup left runs again from empty
// pages. The warmup grows the arena (7.25 MiB on an 8 MiB page, then 11 MiB
// on 12 MiB pages) and leaves a 12 MiB and a 10 MiB page behind; rehearsed
// on those, the 7.25 MiB buffer takes the 10 MiB page (the tightest, pool
// PL33) and the 9.75 MiB one needs a third page, 32 MiB in all, which the
// 31 MiB device cannot hold. Given back and rehearsed from nothing, the
// sequence takes 8 + 12 + 10 MiB pages, as the warmup did, and the
// recording finds its room.
func TestRehearsalRefusedOnTheWarmupsPagesRunsAgainOnEmptyPages(t *testing.T) {
	d := openHost(t, capacityOptions(31*mib)...)
	s := d.DefaultStream()
	const quarter = mib / 4
	fn := func(ctx context.Context, s *Stream) error {
		var held []Buffer
		for _, size := range []uint64{29 * quarter, 44 * quarter, 39 * quarter} {
			b, err := s.Alloc(ctx, size)
			if err != nil {
				return err
			}
			held = append(held, b)
		}
		if err := held[1].Free(); err != nil {
			return err
		}
		b, err := s.Alloc(ctx, 45*quarter)
		if err != nil {
			return err
		}
		for _, b := range []Buffer{held[0], held[2], b} {
			if err := b.Free(); err != nil {
				return err
			}
		}
		return nil
	}
	g, err := s.Capture(bg, fn)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	if got := d.BytesAllocated(); got != 30*mib {
		t.Fatalf("device bytes after the capture %d MiB, want 30 (pages of 8, 12 and 10 MiB)", got/mib)
	}
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

// A recording that repeats its warmup needs no page (Begin rehearsed the
// warmup against the pools), and a buffer it allocates and frees again
// gives its slice to the next one: the three buffers of the recording,
// alive one at a time, need the room of one, as in the warmup.
func TestRecordingThatRepeatsItsWarmupNeedsNoPageAndReusesItsRoom(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	var warmBytes uint64
	fn := func(ctx context.Context, s *Stream) error {
		for range 3 {
			b, err := s.Alloc(ctx, 3<<20)
			if err != nil {
				return err
			}
			if err := addOne(s, b); err != nil {
				return err
			}
			if err := b.Free(); err != nil {
				return err
			}
		}
		if s.capture.Phase() == capture.Prepared {
			warmBytes = d.BytesAllocated()
		}
		return nil
	}
	g, err := s.Capture(ctx, fn)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	defer g.Close()
	if g.Ops() != 3 {
		t.Fatalf("recorded %d ops, want 3", g.Ops())
	}
	st := d.Stats()
	if st.Captures.Reused != 3 || st.Captures.ReusedBytes != 9<<20 {
		t.Fatalf("reused %d buffers, %d bytes: want 3 and 9 MiB (each freed buffer's slice back to the recording)", st.Captures.Reused, st.Captures.ReusedBytes)
	}
	if got := d.BytesAllocated(); got != warmBytes {
		t.Fatalf("device bytes after the recording %d, after the warmup %d: want no growth", got, warmBytes)
	}
	if err := g.Launch(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCleanupWhileAnotherStreamRecordsIsRefusedWithoutWaiting(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	a := d.DefaultStream()
	b, _ := d.NewStream()
	tok, _ := a.PrepareCapture()
	if err := a.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	if err := b.Cleanup(ctx); !errors.Is(err, ErrRecording) {
		t.Fatalf("cleanup while recording: %v", err)
	}
	if err := d.Cleanup(ctx); !errors.Is(err, ErrRecording) {
		t.Fatalf("device cleanup while recording: %v", err)
	}
	if err := a.Synchronize(ctx); !errors.Is(err, ErrRecording) {
		t.Fatalf("synchronize on the recording stream: %v", err)
	}
	if _, err := a.EndCapture(tok); err == nil {
		t.Fatal("a recording doomed by Synchronize sealed")
	}
	if err := d.Cleanup(ctx); err != nil {
		t.Fatalf("cleanup after the window closed: %v", err)
	}
}

func TestPrepareCaptureRelocatesEveryStream(t *testing.T) {
	ctx := context.Background()
	d := openHost(t, WithMemoryConfig(MemoryConfig{}))
	a := d.DefaultStream()
	b, _ := d.NewStream()
	keep := mustAlloc(t, b, 1<<20)
	pattern := bytes.Repeat([]byte{7}, 1<<20)
	if err := keep.Write(ctx, pattern); err != nil {
		t.Fatal(err)
	}
	big := mustAlloc(t, b, 10<<20) // growth: keep's page is outdated
	if !b.mem.HasOutdated() {
		t.Fatal("no outdated page after growth")
	}
	tok, err := a.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	if b.mem.HasOutdated() {
		t.Fatal("prepare left stream B's outdated pages")
	}
	if err := a.AbortCapture(tok); err != nil {
		t.Fatal(err)
	}
	got, err := keep.Read(ctx)
	if err != nil || !bytes.Equal(got, pattern) {
		t.Fatalf("bytes lost across capture relocation: %v", err)
	}
	_ = big.Free()
}

// gatedOp enqueues an op on s that blocks until the returned function is
// called.
func gatedOp(t *testing.T, s *Stream, b Buffer) (open func()) {
	t.Helper()
	gate := make(chan struct{})
	err := s.Enqueue("gated", []Use{{Buffer: b, Access: Read}}, func([]storage.Resource) error {
		<-gate
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var once bool
	return func() {
		if !once {
			once = true
			close(gate)
		}
	}
}

// Scenario 55: cleanup while another stream records is refused before any
// wait: a gated op on the cleaning stream would block a wait forever.
func TestCleanupWhileRecordingRefusesBeforeWaitingOnAnyFence(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	a := d.DefaultStream()
	b, _ := d.NewStream()
	buf := mustAlloc(t, b, 1<<20)
	open := gatedOp(t, b, buf)
	defer open()
	tok, _ := a.PrepareCapture()
	if err := a.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	if err := b.Cleanup(ctx); !errors.Is(err, ErrRecording) {
		t.Fatalf("Cleanup while a stream records = %v, want ErrRecording", err)
	}
	if err := d.Cleanup(ctx); !errors.Is(err, ErrRecording) {
		t.Fatalf("Device.Cleanup while a stream records = %v, want ErrRecording", err)
	}
	if _, err := a.EndCapture(tok); err != nil {
		t.Fatal(err)
	}
}

// Scenario 59: a touched page is neither relocated, released nor carved
// while the graph lives; Close makes it ordinary again.
func TestTouchedPageIsFrozenForTheGraphsLifeAndReleasedAfterClose(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	untouched := mustAlloc(t, s, 1<<20)
	untouchedBytes := pattern(1<<20, 9)
	mustWrite(t, untouched, untouchedBytes)
	touched := mustAlloc(t, s, 1<<20) // shares the 2 MiB arena page with untouched? no: first fit puts it next to it
	g, err := s.Capture(ctx, func(ctx context.Context, s *Stream) error { return addOne(s, touched) })
	if err != nil {
		t.Fatal(err)
	}
	loc := touched.h.Location()
	// Growth outdates the touched page; a relocation must leave it.
	big := mustAlloc(t, s, 10<<20)
	mustFree(t, big)
	mustCleanup(t, d)
	if got := touched.h.Location(); got != loc {
		t.Fatalf("guarded allocation moved from %v to %v", loc, got)
	}
	if outdatedPages(d) == 0 {
		t.Fatal("the guarded outdated page was released")
	}
	// Free everything on the page: the page stays (guarded) through cleanup.
	mustFree(t, touched)
	mustFree(t, untouched)
	mustCleanup(t, d)
	if outdatedPages(d) != 1 {
		t.Fatalf("outdated pages = %d, want the guarded page kept", outdatedPages(d))
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	mustCleanup(t, d)
	if n := outdatedPages(d); n != 0 {
		t.Fatalf("after Graph.Close the page is still held (%d outdated pages)", n)
	}
}

// Scenario 59 (second half): an untouched buffer alive before prepare keeps
// its handle and bytes; a buffer freed mid-window whose slice the recording
// reused keeps its page guarded and the slice is not handed out.
func TestSliceFreedMidWindowAndReusedByTheRecordingIsNotHandedOutWhileTheGraphLives(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	keep := mustAlloc(t, s, 256<<10)
	keepBytes := pattern(256<<10, 3)
	mustWrite(t, keep, keepBytes)
	old := mustAlloc(t, s, 512<<10)
	tok, _ := s.PrepareCapture()
	if err := s.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	if err := addOne(s, old); err != nil {
		t.Fatal(err)
	}
	mustFree(t, old) // freed mid-window: the recording's binding keeps the slice
	reuse, err := s.Alloc(ctx, 512<<10)
	if err == nil && reuse.h.Location() == old.h.Location() {
		t.Fatal("a slice the recording touched was handed out again mid-window")
	}
	if !reuse.IsZero() {
		mustFree(t, reuse)
	}
	g, err := s.EndCapture(tok)
	if err != nil {
		t.Fatalf("EndCapture: %v", err)
	}
	defer g.Close()
	again, err := s.Alloc(ctx, 512<<10)
	if err != nil {
		t.Fatal(err)
	}
	if again.h.Location().Page() == keep.h.Location().Page() && again.h.Location().Pool() == keep.h.Location().Pool() {
		t.Fatalf("a guarded page was carved for a new reservation (%v)", again.h.Location())
	}
	wantBytes(t, keep, keepBytes)
}

// Scenario 60: while A records, B's emptied outdated page survives B's
// AddOnly reservations; B's next Allow reservation after the seal
// releases it.
func TestOtherStreamsReservationsReleaseNothingWhileOneRecords(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	a := d.DefaultStream()
	b, _ := d.NewStream()
	small := mustAlloc(t, b, 1<<20)
	big := mustAlloc(t, b, 10<<20) // B's first page is outdated, holding small
	mustFree(t, small)             // emptied, not yet released
	tok, _ := a.PrepareCapture()
	if err := a.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	before := outdatedPages(d)
	if before == 0 {
		t.Fatal("setup: no outdated page on B")
	}
	x, err := b.Alloc(ctx, 1<<20) // AddOnly: no periodic cleanup
	if err != nil {
		t.Fatal(err)
	}
	if outdatedPages(d) != before {
		t.Fatal("an AddOnly reservation released an outdated page while a stream records")
	}
	if _, err := a.EndCapture(tok); err != nil {
		t.Fatal(err)
	}
	y := mustAlloc(t, b, 1<<20) // Allow: the periodic cleanup drains it
	if outdatedPages(d) != 0 {
		t.Fatal("B's emptied outdated page survived an Allow reservation after the seal")
	}
	for _, buf := range []Buffer{x, y, big} {
		mustFree(t, buf)
	}
}

// Scenario 61: Read and Synchronize on the recording stream are refused
// and doom the recording; the host queue never saw a wait (it would have
// invalidated the queue's capture, which EndCapture would then report).
func TestHostSyncOnTheRecordingStreamIsRefusedAndDoomsTheRecording(t *testing.T) {
	ctx := context.Background()
	for _, sync := range []struct {
		name string
		do   func(s *Stream, b Buffer) error
	}{
		{"Read", func(_ *Stream, b Buffer) error { _, err := b.Read(ctx); return err }},
		{"Synchronize", func(s *Stream, _ Buffer) error { return s.Synchronize(ctx) }},
		{"Map", func(_ *Stream, b Buffer) error { _, err := b.Map(ctx); return err }},
	} {
		t.Run(sync.name, func(t *testing.T) {
			d := openHost(t)
			s := d.DefaultStream()
			b := mustAlloc(t, s, 4096)
			tok, _ := s.PrepareCapture()
			if err := s.BeginCapture(tok); err != nil {
				t.Fatal(err)
			}
			if err := sync.do(s, b); !errors.Is(err, ErrRecording) {
				t.Fatalf("%s on the recording stream = %v, want ErrRecording", sync.name, err)
			}
			_, err := s.EndCapture(tok)
			if !errors.Is(err, ErrRecording) {
				t.Fatalf("EndCapture = %v, want the doom (ErrRecording)", err)
			}
			if errors.Is(err, ErrCaptureInvalidated) {
				t.Fatalf("the queue saw a wait: %v", err)
			}
		})
	}
}

// Scenario 62 (since the rehearsal replaced priming): a warmup buffer's
// slice is free at its free, and whichever way the window closes (Begin
// with its rehearsal, Abort, End without Begin) nothing is left holding it.
func TestWarmupSlicesAreFreeAtTheirFreeAndNothingHoldsThemAfterBegin(t *testing.T) {
	for _, closeWindow := range []string{"begin", "abort", "end-without-begin"} {
		t.Run(closeWindow, func(t *testing.T) {
			d := openHost(t)
			s := d.DefaultStream()
			tok, _ := s.PrepareCapture()
			var descs []Buffer
			for range 3 {
				b := mustAlloc(t, s, 3<<20)
				clone := b.Clone() // observe the allocation after Free
				mustFree(t, b)
				descs = append(descs, clone)
			}
			for _, c := range descs {
				if got := c.h.Descriptor().Refs(); got != 2 {
					t.Fatalf("warmup slice: refs %d, want 2 (slice + clone): nothing primes it", got)
				}
			}
			switch closeWindow {
			case "begin":
				if err := s.BeginCapture(tok); err != nil {
					t.Fatal(err)
				}
				defer s.EndCapture(tok)
			case "abort":
				if err := s.AbortCapture(tok); err != nil {
					t.Fatal(err)
				}
			default:
				if _, err := s.EndCapture(tok); !errors.Is(err, ErrCaptureState) {
					t.Fatalf("EndCapture without begin = %v, want ErrCaptureState", err)
				}
			}
			for _, c := range descs {
				if got := c.h.Descriptor().Refs(); got != 2 {
					t.Fatalf("after %s: refs %d, want 2 (slice + clone)", closeWindow, got)
				}
			}
		})
	}
}

// Scenario 63: Stream.Capture whose fn fails leaves no graph, no window, no
// primed or touched binding and no guard.
func TestCaptureWhoseFunctionFailsCleansUpEverything(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	for _, failAt := range []int{1, 2} {
		d := openHost(t)
		s := d.DefaultStream()
		b := mustAlloc(t, s, 1<<20)
		calls := 0
		g, err := s.Capture(ctx, func(ctx context.Context, s *Stream) error {
			calls++
			tmp, err := s.Alloc(ctx, 1<<20)
			if err != nil {
				return err
			}
			if err := addOne(s, b); err != nil {
				return err
			}
			_ = tmp.Free()
			if calls == failAt {
				return boom
			}
			return nil
		})
		if g != nil || !errors.Is(err, boom) {
			t.Fatalf("fail at call %d: graph %v err %v", failAt, g, err)
		}
		if s.capture.Phase() != capture.NoCapture || s.cap != nil {
			t.Fatalf("fail at call %d: window left open (%v)", failAt, s.capture.Phase())
		}
		if st := d.Stats(); st.GuardedPages != 0 {
			t.Fatalf("fail at call %d: %d guards left", failAt, st.GuardedPages)
		}
		if refs := b.h.Descriptor().Refs(); refs != 2 {
			t.Fatalf("fail at call %d: buffer refs %d, want 2 (slice + owner)", failAt, refs)
		}
		if err := d.Cleanup(ctx); err != nil {
			t.Fatalf("fail at call %d: cleanup after a failed capture: %v", failAt, err)
		}
	}
}

// A graph recorded on one stream that touches buffers of two streams'
// memories replays the captured run's bytes after other allocations grew
// the pages and relocations ran around it; no guarded page moved.
func TestGraphOverTwoStreamsMemoriesReplaysAfterRelocationsRanAroundIt(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	a := d.DefaultStream()
	b, _ := d.NewStream()
	mine := mustAlloc(t, a, 1<<20)
	theirs := mustAlloc(t, b, 1<<20)
	mustWrite(t, mine, bytes.Repeat([]byte{1}, 1<<20))
	mustWrite(t, theirs, bytes.Repeat([]byte{100}, 1<<20))
	if err := b.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	// Bystanders on the same streams, which relocation may move.
	var bystanders []Buffer
	for i, s := range []*Stream{a, b} {
		x := mustAlloc(t, s, 1536<<10) // its own 2 MiB page, not the guarded one
		mustWrite(t, x, pattern(1536<<10, byte(40+i)))
		bystanders = append(bystanders, x)
	}
	g, err := a.Capture(ctx, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("mix", []Use{{Buffer: mine, Access: ReadWrite}, {Buffer: theirs, Access: ReadWrite}}, func(res []storage.Resource) error {
			for i := range res[0].Bytes {
				res[0].Bytes[i]++
				res[1].Bytes[i] += res[0].Bytes[i]
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// The warmup ran once: mine = 2, theirs = 102.
	locMine, locTheirs := mine.h.Location(), theirs.h.Location()
	for _, s := range []*Stream{a, b} {
		for _, size := range []uint64{10 << 20, 30 << 20} {
			x := mustAlloc(t, s, size)
			mustFree(t, x)
		}
	}
	mustCleanup(t, d)
	if d.Stats().Relocation.Moves == 0 {
		t.Fatal("setup: no relocation ran around the graph")
	}
	if mine.h.Location() != locMine || theirs.h.Location() != locTheirs {
		t.Fatal("a guarded allocation moved")
	}
	for range 2 {
		if err := g.Launch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Two launches: mine 2→3→4, theirs 102+3=105, +4=109.
	wantBytes(t, mine, bytes.Repeat([]byte{4}, 1<<20))
	if err := a.Synchronize(ctx); err != nil {
		t.Fatal(err)
	}
	wantBytes(t, theirs, bytes.Repeat([]byte{109}, 1<<20))
	for i, x := range bystanders {
		wantBytes(t, x, pattern(1536<<10, byte(40+i)))
	}
}

// After a proper warmup the recording allocates nothing from the storage:
// every reservation in the window is served from held room.
func TestRecordingAfterWarmupAllocatesNothingFromStorage(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	work := func(ctx context.Context, s *Stream) error {
		var bufs []Buffer
		for _, size := range []uint64{100, 70 << 10, 1 << 20, 5 << 20, 2 << 20} {
			b, err := s.Alloc(ctx, size)
			if err != nil {
				return err
			}
			if err := addOne(s, b); err != nil {
				return err
			}
			bufs = append(bufs, b)
		}
		for _, b := range bufs {
			if err := b.Free(); err != nil {
				return err
			}
		}
		return nil
	}
	tok, err := s.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	if err := work(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	before := d.Stats().StorageAllocs
	if err := work(ctx, s); err != nil {
		t.Fatalf("recording after warmup: %v", err)
	}
	if after := d.Stats().StorageAllocs; after != before {
		t.Fatalf("the recording allocated %d storage regions", after-before)
	}
	g, err := s.EndCapture(tok)
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Close()
}

// A capture on one stream while other streams keep allocating, writing and
// reading: race-clean, and the others' bytes are right.
func TestCaptureOnOneStreamWhileOthersKeepWorking(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	a := d.DefaultStream()
	others := make([]*Stream, 3)
	for i := range others {
		others[i], _ = d.NewStream()
	}
	done := make(chan error, len(others))
	stop := make(chan struct{})
	for i, s := range others {
		go func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				size := uint64(4096 + (n%7)*65536)
				b, err := s.Alloc(ctx, size)
				if err != nil {
					done <- err
					return
				}
				want := pattern(size, byte(i+n))
				if err := b.Write(ctx, want); err != nil {
					done <- err
					return
				}
				got, err := b.Read(ctx)
				if err != nil {
					done <- err
					return
				}
				if !bytes.Equal(got, want) {
					done <- errors.New("bytes differ")
					return
				}
				if err := b.Free(); err != nil {
					done <- err
					return
				}
			}
		}()
	}
	buf := mustAlloc(t, a, 1<<20)
	for range 5 {
		g, err := a.Capture(ctx, func(ctx context.Context, s *Stream) error { return addOne(s, buf) })
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(ctx); err != nil {
			t.Fatal(err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	for range others {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// 5 warmups + 5 launches.
	wantBytes(t, buf, bytes.Repeat([]byte{10}, 1<<20))
}

// A Launch racing Graph.Close is refused once Close has begun, so nothing
// it would write lands in a slice another allocation reuses (defect §1).
func TestLaunchDuringGraphCloseWritesIntoAReusedSlice(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	owner, _ := d.NewStream()
	const n = 5000
	x := mustAlloc(t, owner, n)
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error {
			for i := range r[0].Bytes {
				r[0].Bytes[i] = 0xEE
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Synchronize(bg)
	mustFree(t, x) // the graph keeps the slice
	gate1, gate2 := make(chan struct{}), make(chan struct{})
	_ = s.Enqueue("gate1", nil, func([]storage.Resource) error { <-gate1; return nil })
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }() // waits for gate1 outside the lock
	for {                               // until Close has begun (its wait is outside the lock)
		d.mu.Lock()
		closing := g.closing
		d.mu.Unlock()
		if closing {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = s.Enqueue("gate2", nil, func([]storage.Resource) error { <-gate2; return nil })
	launchErr := g.Launch(bg)
	close(gate1)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(launchErr, ErrClosed) {
		t.Errorf("Launch after Close began = %v, want ErrClosed", launchErr)
	}
	y := mustAlloc(t, owner, n) // reuses x's slice
	mustWrite(t, y, pattern(n, 1))
	_ = owner.Synchronize(bg)
	close(gate2)
	_ = s.Synchronize(bg)
	wantBytes(t, y, pattern(n, 1))
}

// An Alloc on the recording stream never forwards a held page release into
// the recording, which would invalidate the capture (defect §3).
func TestAllocOnRecordingStreamInvalidatesTheCapture(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	done := s.Window(Dedicated)
	x := mustAlloc(t, s, 1<<20)
	done()
	mustFree(t, x)
	gate := make(chan struct{})
	_ = s.Enqueue("gate", nil, func([]storage.Resource) error { <-gate; return nil })
	gateSeq, _ := s.Queue().Fence()
	done = s.Window(Dedicated)
	y := mustAlloc(t, s, 2<<20) // gives x's slot back while "gate" is queued: held
	done()
	defer y.Free()
	out := mustAlloc(t, s, 4096)
	calls := 0
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		calls++
		if calls == 2 { // recording: let the queued work finish, no host sync
			close(gate)
			for s.Queue().Completed() < gateSeq.Seq {
				time.Sleep(time.Millisecond)
			}
		}
		tmp, err := s.Alloc(ctx, 1000) // warmed up: held room
		if err != nil {
			return err
		}
		if err := s.Enqueue("k", []Use{{Buffer: tmp, Access: Write}, {Buffer: out, Access: Write}},
			func([]storage.Resource) error { return nil }); err != nil {
			return err
		}
		return tmp.Free()
	})
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	// The release held through the recording goes through afterwards.
	if err := s.Cleanup(bg); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.StorageDeallocs == 0 {
		t.Fatalf("no storage deallocation after the capture: %+v", st)
	}
}

// One failing op in a graph replay marks only the ranges that op writes
// (defect §6).
func TestFailedReplayedOpMarksOtherOpsOutputs(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	a := mustAlloc(t, s, 64)
	b := mustAlloc(t, s, 64)
	fail := false
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		if err := s.Enqueue("writes-a", []Use{{Buffer: a, Access: Write}}, func(r []storage.Resource) error {
			if fail {
				return errors.New("boom")
			}
			return nil
		}); err != nil {
			return err
		}
		return s.Enqueue("writes-b", []Use{{Buffer: b, Access: Write}},
			func(r []storage.Resource) error { copy(r[0].Bytes, bytes.Repeat([]byte{9}, 64)); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_ = s.Synchronize(bg)
	fail = true
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	_ = s.Synchronize(bg)
	if _, err := b.Read(bg); err != nil {
		t.Fatalf("b was written by an op that succeeded, yet Read(b) = %v", err)
	}
	if _, err := a.Read(bg); !errors.Is(err, ErrUnwritten) {
		t.Fatalf("a's writer failed, yet Read(a) = %v", err)
	}
}

// A replayed op that fails leaves its outputs unmarked (§11).
func TestFailedReplayedOpMarksTheGraphsOutputsUnwritten(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	x := mustAlloc(t, s, 64)
	mustWrite(t, x, []byte{7})
	fail := false
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error {
			if fail {
				return errors.New("boom")
			}
			r[0].Bytes[0] = 42
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_ = s.Synchronize(bg)
	fail = true
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	_ = s.Synchronize(bg)
	got, err := x.Read(bg)
	if !errors.Is(err, ErrUnwritten) {
		t.Fatalf("read after failed replayed op: err=%v byte0=%v, want ErrUnwritten", err, got[:1])
	}
}

// An op skipped (failed input) while recording is silently left out of the graph.
func TestRecordingAnOpWhoseInputCarriesAFailureDoomsTheRecording(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	in := mustAlloc(t, s, 64)
	out := mustAlloc(t, s, 64)
	_ = s.Enqueue("fail", []Use{{Buffer: in, Access: Write}}, func([]storage.Resource) error { return errors.New("boom") })
	_ = s.Synchronize(bg)
	tok, _ := s.PrepareCapture()
	_ = s.BeginCapture(tok)
	err := s.Enqueue("copy", []Use{{Buffer: in, Access: Read}, {Buffer: out, Access: Write}}, func(r []storage.Resource) error { return nil })
	g, endErr := s.EndCapture(tok)
	if endErr == nil {
		defer g.Close()
		t.Fatalf("recording sealed with %d ops although its only op was skipped (enqueue err %v)", g.Ops(), err)
	}
}

// Graph.Launch after Graph.Close says "device closed".
func TestLaunchOfAClosedGraphSaysTheGraphIsClosed(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	x := mustAlloc(t, s, 64)
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Close()
	err = g.Launch(bg)
	t.Logf("Launch after Graph.Close: %v (errors.Is ErrClosed=%v)", err, errors.Is(err, ErrClosed))
}

func TestRecordedWriteLeavesFailureMarksUntilItRuns(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	x := mustAlloc(t, s, 64)
	_ = s.Enqueue("fail", []Use{{Buffer: x, Access: Write}}, func([]storage.Resource) error { return errors.New("boom") })
	_ = s.Synchronize(bg)
	if _, err := x.Read(bg); !errors.Is(err, ErrUnwritten) {
		t.Fatalf("precondition: %v", err)
	}
	tok, _ := s.PrepareCapture()
	_ = s.BeginCapture(tok)
	_ = s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error { r[0].Bytes[0] = 1; return nil })
	g, err := s.EndCapture(tok)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// never launched
	if _, err := x.Read(bg); !errors.Is(err, ErrUnwritten) {
		t.Fatalf("recorded (never run) write cleared the failure marks: Read err = %v", err)
	}
}

func TestPanicInCaptureFunctionClosesTheWindow(t *testing.T) {
	d, _ := Open()
	s := d.DefaultStream()
	n := 0
	func() {
		defer func() { recover() }()
		_, _ = s.Capture(bg, func(ctx context.Context, s *Stream) error {
			n++
			if n == 2 {
				panic("user bug")
			}
			return nil
		})
	}()
	if err := d.Close(); err != nil {
		t.Fatalf("after a recovered panic in the recorded fn, Close = %v", err)
	}
}

// nonRecordingBackend is the host backend with queues that offer only
// stream.Queue: they cannot record graphs.
type nonRecordingBackend struct{ hostBackend }

func (b *nonRecordingBackend) NewQueue(int) (stream.Queue, error) {
	return struct{ stream.Queue }{hostqueue.NewHost()}, nil
}

// A backend whose queues are no stream.Recorder runs everything but
// captures, which it refuses with ErrNotSupported before anything changes.
func TestCaptureOnQueuesThatCannotRecordIsNotSupported(t *testing.T) {
	d, err := OpenBackend(&nonRecordingBackend{hostBackend{props: hostProperties(0)}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s := d.DefaultStream()
	b := mustAlloc(t, s, 64)
	mustWrite(t, b, pattern(64, 1))
	wantBytes(t, b, pattern(64, 1))
	if _, err := s.PrepareCapture(); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("PrepareCapture on queues that cannot record = %v, want ErrNotSupported", err)
	}
	if _, err := s.Capture(bg, func(context.Context, *Stream) error { return nil }); !errors.Is(err, ErrNotSupported) {
		t.Fatalf("Capture on queues that cannot record = %v, want ErrNotSupported", err)
	}
	mustFree(t, b)
	if err := d.Cleanup(bg); err != nil {
		t.Fatal(err)
	}
}

// A graph sealed on another stream between a capture's warmup and its
// recording guards the page a primed slot lies on; Begin finds room for the
// primed sizes again, so the recording's allocation still fits (found by the
// shadow model).
func TestAnotherGraphsGuardDoesNotTakeTheWarmupsRoom(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	o, _ := d.NewStream()
	x := mustAlloc(t, s, 1000) // on s's small-pool page
	mustWrite(t, x, pattern(1000, 3))
	_ = s.Synchronize(bg)
	tok, err := s.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, mustAlloc(t, s, 1000)) // warmup: same page, primed when freed
	g, err := o.Capture(bg, func(ctx context.Context, o *Stream) error {
		return o.Enqueue("read-x", []Use{{Buffer: x, Access: Read}}, func([]storage.Resource) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := s.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	tmp, aerr := s.Alloc(bg, 1000) // the recording: held room only
	if aerr == nil {
		_ = tmp.Free()
	}
	g2, eerr := s.EndCapture(tok)
	if g2 != nil {
		defer g2.Close()
	}
	if aerr != nil || eerr != nil {
		t.Fatalf("the recording found no room the warmup held: Alloc %v; EndCapture %v", aerr, eerr)
	}
	wantBytes(t, x, pattern(1000, 3))
}

// A recording that holds at once what its warmup held in turn finds no
// held room (Begin rehearsed the warmup, which never held them together):
// the capture fails with ErrPageUpdateForbidden naming the remedy, leaves
// nothing guarded, and one that repeats its warmup then seals.
func TestRecordingThatDivergesFromItsWarmupFailsNamingTheRemedy(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	_, err := s.Capture(ctx, func(ctx context.Context, s *Stream) error {
		var bufs []Buffer
		for range 3 {
			b, err := s.Alloc(ctx, 3<<20)
			if err != nil {
				return err
			}
			bufs = append(bufs, b)
			if s.capture.Phase() == capture.Prepared {
				if err := b.Free(); err != nil { // the warmup frees as it goes
					return err
				}
				bufs = bufs[:0]
			}
		}
		for _, b := range bufs {
			if err := b.Free(); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, ErrPageUpdateForbidden) || !strings.Contains(err.Error(), "warm up with the same allocations and frees") {
		t.Fatalf("capture: %v, want ErrPageUpdateForbidden naming the remedy", err)
	}
	if st := d.Stats(); st.GuardedPages != 0 || st.Captures.Doomed != 1 {
		t.Fatalf("guarded pages %d, doomed %d: want 0 and 1", st.GuardedPages, st.Captures.Doomed)
	}
	g, err := s.Capture(ctx, func(ctx context.Context, s *Stream) error {
		b, err := s.Alloc(ctx, 3<<20)
		if err != nil {
			return err
		}
		if err := addOne(s, b); err != nil {
			return err
		}
		return b.Free()
	})
	if err != nil {
		t.Fatalf("a capture repeating its warmup: %v", err)
	}
	_ = g.Close()
}
