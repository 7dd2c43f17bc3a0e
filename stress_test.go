package gpumem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// The stress test: several streams keep launching kernels that verify and
// rewrite the patterns of their buffers while allocations grow the arenas
// and relocations run underneath them, both allocation-triggered (a failed
// reservation a cleanup alone did not cure: memory pressure, page sizes
// exhausted) and explicit
// (Device.Cleanup from a stream's goroutine and at checkpoints).
//
// Expected contents are tracked per buffer as an offset into one shared
// random slice (stressBase): a buffer of n bytes at offset o holds
// stressBase[o:o+n]. Distinct offsets make a buffer holding another
// buffer's bytes, or its own bytes shifted, fail the comparison, while the
// check itself is one bytes.Equal (cheap under -race).

const (
	stressStreams   = 4
	stressMaxSmall  = 160 << 10
	stressBaseExtra = 4096
	stressMaxPage   = 32 << 20 // the device's largest arena page
)

var stressBase = func() []byte {
	r := rand.New(rand.NewPCG(7, 7))
	b := make([]byte, stressMaxSmall+stressBaseExtra)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

func stressBytes(off, n uint64) []byte { return stressBase[off : off+n] }

// stressBuf is a buffer and the offset of the bytes its last enqueued write
// leaves in it (ordered by its stream).
type stressBuf struct {
	b   Buffer
	off uint64
}

// stressFailures collects what kernels running on queue workers found.
type stressFailures struct {
	mu    sync.Mutex
	first error
	n     atomic.Int64
}

func (f *stressFailures) add(err error) {
	f.n.Add(1)
	f.mu.Lock()
	if f.first == nil {
		f.first = err
	}
	f.mu.Unlock()
}

func (f *stressFailures) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		return nil
	}
	return fmt.Errorf("%d failures, first: %w", f.n.Load(), f.first)
}

// stressWorker drives one stream.
type stressWorker struct {
	t       *testing.T
	d       *Device
	s       *Stream
	r       *rand.Rand
	live    []stressBuf
	consts  []stressBuf // one constant buffer per stream, read by everyone
	fails   *stressFailures
	kernels int
	ops     int
	bigs    []Buffer
	moves   uint64 // this stream's relocation moves seen so far
}

func (w *stressWorker) fail(format string, args ...any) {
	w.fails.add(fmt.Errorf("%s: "+format, append([]any{w.s.name}, args...)...))
}

// kernel enqueues an op that verifies a buffer holds its expected bytes and
// rewrites it with new ones, reading a constant buffer (possibly another
// stream's) on the way.
func (w *stressWorker) kernel() {
	i := w.r.IntN(len(w.live))
	sb := &w.live[i]
	c := w.consts[w.r.IntN(len(w.consts))]
	n := sb.b.Size()
	wantOld, newOff := sb.off, w.r.Uint64N(stressBaseExtra)
	wantConst := c.off
	fails := w.fails
	name := w.s.name
	id := sb.b.ID()
	err := w.s.Enqueue("verify-rewrite", []Use{{Buffer: sb.b, Access: ReadWrite}, {Buffer: c.b, Access: Read}}, func(res []storage.Resource) error {
		if !bytes.Equal(res[0].Bytes, stressBytes(wantOld, n)) {
			fails.add(fmt.Errorf("%s: kernel found buffer %d (%d bytes) not holding its pattern (first bad byte %d)", name, id, n, firstDiff(res[0].Bytes, stressBytes(wantOld, n))))
		}
		if !bytes.Equal(res[1].Bytes, stressBytes(wantConst, uint64(len(res[1].Bytes)))) {
			fails.add(fmt.Errorf("%s: kernel found constant buffer changed", name))
		}
		copy(res[0].Bytes, stressBytes(newOff, n))
		return nil
	})
	if err != nil {
		w.fail("Enqueue: %v", err)
		return
	}
	sb.off = newOff
	w.kernels++
}

func (w *stressWorker) alloc(size uint64) (Buffer, bool) {
	b, err := w.s.Alloc(context.Background(), size)
	if errors.Is(err, ErrOutOfMemory) {
		return Buffer{}, false // tolerated: the device is deliberately tight
	}
	if err != nil {
		w.fail("Alloc(%d): %v", size, err)
		return Buffer{}, false
	}
	w.checkAfterOwnRelocation()
	return b, true
}

func (w *stressWorker) allocSmall() {
	var size uint64
	if w.r.IntN(2) == 0 {
		size = 1 + w.r.Uint64N(64<<10) // small pool
	} else {
		size = 64<<10 + 1 + w.r.Uint64N(stressMaxSmall-64<<10) // arena
	}
	b, ok := w.alloc(size)
	if !ok {
		return
	}
	off := w.r.Uint64N(stressBaseExtra)
	if err := b.Write(context.Background(), stressBytes(off, size)); err != nil {
		w.fail("Write: %v", err)
	}
	w.live = append(w.live, stressBuf{b: b, off: off})
}

// grow allocates a buffer 32 bytes larger than the stream's current arena
// page, which forces a growth every time (a growth tiles the sizes the arena
// served and may take a page of up to twice its buffer, so a buffer only a
// little larger than the last growth one would mostly fit): the arena's page
// size keeps climbing and leaves live buffers on outdated pages. Once the
// page is the largest the device allows, the growth buffer is a 2 MiB one,
// which fits. Growth buffers are freed a little later.
func (w *stressWorker) grow() {
	w.d.mu.Lock()
	page := w.s.mem.Dynamic().(*memory.AdaptiveMemory).Arena().PageSize()
	w.d.mu.Unlock()
	size := page + 32
	if size > stressMaxPage {
		size = 2 << 20
	}
	b, ok := w.alloc(size)
	if ok {
		w.bigs = append(w.bigs, b)
	}
	for len(w.bigs) > 1 {
		if err := w.bigs[0].Free(); err != nil {
			w.fail("Free: %v", err)
		}
		w.bigs = w.bigs[1:]
	}
}

func (w *stressWorker) free() {
	i := w.r.IntN(len(w.live))
	if err := w.live[i].b.Free(); err != nil {
		w.fail("Free: %v", err)
	}
	w.live[i] = w.live[len(w.live)-1]
	w.live = w.live[:len(w.live)-1]
}

// verifyOwn reads every live buffer of the stream.
func (w *stressWorker) verifyOwn(why string) {
	for _, sb := range w.live {
		got, err := sb.b.Read(context.Background())
		if err != nil {
			w.fail("Read after %s: %v", why, err)
			continue
		}
		if !bytes.Equal(got, stressBytes(sb.off, sb.b.Size())) {
			w.fail("after %s, buffer %d does not hold its pattern (first bad byte %d)", why, sb.b.ID(), firstDiff(got, stressBytes(sb.off, sb.b.Size())))
		}
	}
}

// checkAfterOwnRelocation verifies every buffer of the stream when an
// allocation relocated its memory (only the relocating stream's memory
// moves in an allocation-triggered relocation).
func (w *stressWorker) checkAfterOwnRelocation() {
	w.d.mu.Lock()
	moves := w.s.mem.Stats().Relocation.Moves
	w.d.mu.Unlock()
	if moves != w.moves {
		w.moves = moves
		w.verifyOwn("an allocation-triggered relocation")
	}
}

func (w *stressWorker) run(ops int) {
	for range ops {
		w.ops++
		switch p := w.r.IntN(1000); {
		case len(w.live) == 0 || (p < 60 && len(w.live) < 48):
			w.allocSmall()
		case p < 90:
			w.free()
		case p < 100:
			w.grow()
		case p < 102:
			if err := w.d.Cleanup(context.Background()); err != nil {
				w.fail("Cleanup: %v", err)
			}
			w.verifyOwn("Device.Cleanup")
		case p < 110:
			sb := w.live[w.r.IntN(len(w.live))]
			got, err := sb.b.Read(context.Background())
			if err != nil {
				w.fail("Read: %v", err)
			} else if !bytes.Equal(got, stressBytes(sb.off, sb.b.Size())) {
				w.fail("Read of buffer %d does not return its pattern", sb.b.ID())
			}
		default:
			w.kernel()
		}
	}
}

func TestStressKernelsKeepTheirBytesWhileArenasGrowAndRelocate(t *testing.T) {
	const seed = 20240611
	rounds, opsPerRound := 10, 350 // per stream: 4 × 10 × 350 = 14000 operations
	if testing.Short() {
		rounds = 4
	}
	d := openHost(t,
		WithProperties(Properties{MaxPageSize: stressMaxPage, Alignment: 32, MaxMemory: 160 * mib}),
		WithCapacity(160*mib))
	streams := []*Stream{d.DefaultStream()}
	for len(streams) < stressStreams {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	fails := &stressFailures{}
	var consts []stressBuf
	for i, s := range streams {
		c := mustAlloc(t, s, 4*kib+uint64(i))
		off := uint64(100 * i)
		mustWrite(t, c, stressBytes(off, c.Size()))
		consts = append(consts, stressBuf{b: c, off: off})
	}
	workers := make([]*stressWorker, len(streams))
	for i, s := range streams {
		workers[i] = &stressWorker{t: t, d: d, s: s, r: rand.New(rand.NewPCG(seed, uint64(i))), consts: consts, fails: fails}
	}
	verifyAll := func(why string) {
		for _, w := range workers {
			w.verifyOwn(why)
		}
		for _, c := range consts {
			wantBytes(t, c.b, stressBytes(c.off, c.b.Size()))
		}
	}
	for round := range rounds {
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(func() { w.run(opsPerRound) })
		}
		wg.Wait()
		// Checkpoint: everything stopped; relocate and verify every buffer.
		mustCleanup(t, d)
		verifyAll(fmt.Sprintf("the checkpoint Cleanup of round %d", round))
		for _, w := range workers {
			w.moves = 0
			d.mu.Lock()
			w.moves = w.s.mem.Stats().Relocation.Moves
			d.mu.Unlock()
		}
		if err := fails.err(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if st := d.Stats(); st.BytesAllocated > 160*mib {
			t.Fatalf("round %d: BytesAllocated %d above the capacity", round, st.BytesAllocated)
		}
	}
	for _, s := range streams {
		if err := s.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := fails.err(); err != nil {
		t.Fatal(err)
	}
	ops, kernels := 0, 0
	for _, w := range workers {
		ops += w.ops
		kernels += w.kernels
	}
	st := d.Stats()
	t.Logf("ops %d, kernels %d, growths %d, relocation %+v, retries %d, failed %v", ops, kernels, st.Growths, st.Relocation, st.ReserveRetries, st.FailedReserves)
	if ops < 10000 && !testing.Short() {
		t.Fatalf("only %d operations ran, want at least 10^4", ops)
	}
	// The run is only meaningful if relocations moved live buffers while
	// kernels ran, through both kinds of trigger.
	if st.Relocation.Moves == 0 {
		t.Fatal("no relocation moved a buffer: the stress exercised nothing")
	}
	if st.Growths < 10 {
		t.Fatalf("only %d growths", st.Growths)
	}
	allocTriggered := st.Relocation.Runs[relocation.MemoryPressure] + st.Relocation.Runs[relocation.ArenaFull]
	if allocTriggered == 0 {
		t.Fatalf("no allocation-triggered relocation ran (runs %v)", st.Relocation.Runs)
	}
	for _, w := range workers {
		for _, sb := range w.live {
			mustFree(t, sb.b)
		}
		for _, b := range w.bigs {
			mustFree(t, b)
		}
	}
	for _, c := range consts {
		mustFree(t, c.b)
	}
	mustCleanup(t, d)
	if st := d.Stats(); st.BytesInUse != 0 || st.BytesAllocated != 0 {
		t.Fatalf("after freeing everything and Cleanup: in use %d, allocated %d; want 0, 0", st.BytesInUse, st.BytesAllocated)
	}
}
