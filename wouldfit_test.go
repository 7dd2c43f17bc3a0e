package gpumem

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/storage"
)

var wouldFitSeeds = flag.Int("wouldfit.seeds", 120, "generated devices TestWouldFitAgreesWithAlloc runs")

// TestWouldFitAgreesWithAlloc generates device states (host and sim,
// whole and granular pages, capacities, growths and outdated pages,
// cross-stream uses of freed buffers, held buffers and held releases,
// windows, persistent size matching, exclusive pages, several streams) and
// at random points asks WouldFit, checks it changed nothing (counters,
// report, history, snapshot; a second answer equal), then makes the
// Alloc and checks they agree: fits ⇔ the Alloc succeeds, the way it says
// (storage allocations, growths, the make-room retry, the own-size
// fallback); a Maybe's Alloc succeeds only by moving allocations; a
// refusal's error is of the Alloc's kind.
func TestWouldFitAgreesWithAlloc(t *testing.T) {
	var c wouldFitCounts
	for seed := range uint64(*wouldFitSeeds) {
		runWouldFitSeed(t, seed, &c)
		if t.Failed() {
			t.Fatalf("seed %d failed", seed)
		}
	}
	t.Logf("%d cases over %d devices: %v", c.cases, *wouldFitSeeds, c.by)
	if c.cases < 50**wouldFitSeeds/2 {
		t.Fatalf("only %d cases over %d devices", c.cases, *wouldFitSeeds)
	}
	for _, want := range []string{"held room", "new page", "growth", "own storage", "after cleanup", "does not fit"} {
		if c.by[want] == 0 {
			t.Errorf("no case answered %q: the generator misses it (%v)", want, c.by)
		}
	}
}

type wouldFitCounts struct {
	cases int
	by    map[string]int
}

func (c *wouldFitCounts) count(f Fit, size, capacity uint64) {
	if c.by == nil {
		c.by = map[string]int{}
	}
	c.cases++
	switch {
	case f.OK:
		c.by[f.How.String()]++
		if f.AfterCleanup {
			c.by["after cleanup"]++
		}
		if f.Waits {
			c.by["waits"]++
		}
	case f.Maybe:
		c.by["maybe "+f.How.String()]++
	default:
		c.by["does not fit"]++
		if size <= capacity {
			c.by["does not fit, within the capacity"]++
		}
	}
}

// wouldFitWorld is one generated device and what the test holds on it.
type wouldFitWorld struct {
	t        *testing.T
	rng      *rand.Rand
	d        *Device
	capacity uint64
	maxPage  uint64
	sim      bool
	history  bool
	streams  []*Stream
	live     []Buffer
	holds    []func()             // Buffer.Hold releases
	passes   []func()             // HoldReleases passes
	windows  map[*Stream][]func() // open windows, innermost last
	seed     uint64
	kept     map[storage.ID]uint64 // the storage allocations held, by size
}

// keptStorage records the storage allocations held (pages, granular
// reservations, slots), so a test sees which ones an Alloc added and kept:
// a refused page on granular storage is reserved and given back within
// the Alloc, which the counters count as an allocation.
type keptStorage struct {
	storage.Storage
	kept map[storage.ID]uint64
}

func (k *keptStorage) Alloc(size uint64) (storage.Region, error) {
	r, err := k.Storage.Alloc(size)
	if err == nil {
		k.kept[r.ID] = size
	}
	return r, err
}

func (k *keptStorage) Dealloc(id storage.ID) {
	delete(k.kept, id)
	k.Storage.Dealloc(id)
}

func (k *keptStorage) Granule() uint64 { return storage.GranuleOf(k.Storage) }

func (k *keptStorage) Reserve(size uint64) (storage.Region, error) {
	g, ok := k.Storage.(storage.Granular)
	if !ok {
		return storage.Region{}, storage.ErrNotGranular
	}
	r, err := g.Reserve(size)
	if err == nil {
		k.kept[r.ID] = size
	}
	return r, err
}

func (k *keptStorage) Map(id storage.ID, first, n uint64) error {
	return k.Storage.(storage.Granular).Map(id, first, n)
}

func (k *keptStorage) Unmap(id storage.ID, first, n uint64) {
	k.Storage.(storage.Granular).Unmap(id, first, n)
}

func (k *keptStorage) BytesReserved() uint64 {
	if g, ok := k.Storage.(storage.Granular); ok {
		return g.BytesReserved()
	}
	return k.Storage.BytesAllocated()
}

func runWouldFitSeed(t *testing.T, seed uint64, c *wouldFitCounts) {
	rng := rand.New(rand.NewPCG(seed, 0x77f17))
	w := &wouldFitWorld{t: t, rng: rng, seed: seed, windows: map[*Stream][]func(){}}
	w.sim = rng.IntN(4) != 0
	w.capacity = (16 + uint64(rng.IntN(112))) * mib
	w.kept = map[storage.ID]uint64{}
	opts := []Option{WithCapacity(w.capacity), WithStorageWrapper(func(st storage.Storage) storage.Storage {
		return &keptStorage{Storage: st, kept: w.kept}
	})}
	if w.sim {
		opts = append(opts, WithSim())
	}
	if rng.IntN(2) == 0 {
		opts = append(opts, WithPageGranular(true))
	}
	switch rng.IntN(4) {
	case 0:
		opts = append(opts, WithoutRelocation())
	case 1:
		opts = append(opts, WithoutCompaction())
	}
	var cfg MemoryConfig
	switch rng.IntN(6) {
	case 0:
		cfg.Dynamic = ExclusivePages
	case 1:
		cfg.Persistent = PersistentSizeMatch
	}
	opts = append(opts, WithMemoryConfig(cfg))
	if rng.IntN(3) == 0 {
		w.history = true
		opts = append(opts, WithHistory(HistoryOptions{}))
	}
	d, err := Open(opts...)
	if err != nil {
		t.Fatalf("seed %d: Open: %v", seed, err)
	}
	defer func() {
		for _, p := range w.passes {
			p()
		}
		for _, h := range w.holds {
			h()
		}
		_ = d.Close()
	}()
	w.d = d
	w.maxPage = d.Properties().MaxPageSize
	w.streams = []*Stream{d.DefaultStream()}
	for range rng.IntN(3) {
		s, err := d.NewStream()
		if err != nil {
			t.Fatalf("seed %d: NewStream: %v", seed, err)
		}
		w.streams = append(w.streams, s)
	}
	for step := range 160 {
		switch k := rng.IntN(100); {
		case k < 30:
			w.probe(c, step)
		case k < 55:
			w.alloc()
		case k < 72:
			w.free()
		case k < 80:
			w.crossStreamUse()
		case k < 84:
			w.hold()
		case k < 87:
			w.holdReleases()
		case k < 91:
			w.window()
		case k < 93:
			if err := d.Cleanup(bg); err != nil {
				t.Fatalf("seed %d: Cleanup: %v", seed, err)
			}
		default:
			w.sync()
		}
		if t.Failed() {
			return
		}
	}
}

// size draws an allocation size: mostly the sizes a workload allocates
// (metadata, activations, a few large buffers), sometimes zero, one above
// the largest page, or one near or above what the device holds.
func (w *wouldFitWorld) size() uint64 {
	r := w.rng
	switch k := r.IntN(100); {
	case k < 3:
		return 0
	case k < 25:
		return 1 + uint64(r.IntN(64<<10))
	case k < 70:
		return uint64(r.IntN(int(4*mib))) + 64<<10 + 1
	case k < 88:
		return (1 + uint64(r.IntN(8))) * mib * (1 + uint64(r.IntN(3)))
	case k < 94:
		return w.maxPage + uint64(r.IntN(int(4*mib)))
	case k < 97:
		return w.capacity/2 + uint64(r.IntN(int(w.capacity/2)))
	}
	return w.capacity + 1 + uint64(r.IntN(int(mib)))
}

// releaseHeld reports whether a stream's storage holds the release of
// allocation id (it went back, behind queued work or a HoldReleases hold).
func (w *wouldFitWorld) releaseHeld(id storage.ID) bool {
	w.d.mu.Lock()
	defer w.d.mu.Unlock()
	for _, s := range w.streams {
		for _, h := range s.st.held {
			if h.id == id && h.n == 0 {
				return true
			}
		}
	}
	return false
}

func (w *wouldFitWorld) stream() *Stream { return w.streams[w.rng.IntN(len(w.streams))] }

func (w *wouldFitWorld) alloc() {
	s := w.stream()
	b, err := s.Alloc(bg, w.size())
	if err != nil {
		if !memory.MaySucceedAfterReclaim(err) {
			w.t.Fatalf("seed %d: Alloc: %v", w.seed, err)
		}
		return
	}
	w.live = append(w.live, b)
}

func (w *wouldFitWorld) take() Buffer {
	if len(w.live) == 0 {
		return Buffer{}
	}
	i := w.rng.IntN(len(w.live))
	b := w.live[i]
	w.live[i] = w.live[len(w.live)-1]
	w.live = w.live[:len(w.live)-1]
	return b
}

func (w *wouldFitWorld) free() {
	if b := w.take(); !b.IsZero() {
		if err := b.Free(); err != nil {
			w.t.Fatalf("seed %d: Free: %v", w.seed, err)
		}
	}
}

// crossStreamUse enqueues an op on another stream that reads a buffer,
// and sometimes frees the buffer at once: its slice stays bound by the
// other stream's deferred use until an Alloc (or a sync) releases it.
func (w *wouldFitWorld) crossStreamUse() {
	if len(w.live) == 0 || len(w.streams) < 2 {
		return
	}
	b := w.live[w.rng.IntN(len(w.live))]
	if b.Size() == 0 {
		return
	}
	var on *Stream
	for on == nil || on == b.Stream() {
		on = w.stream()
	}
	if err := on.Enqueue("read", []Use{{Buffer: b, Access: Read}}, func([]storage.Resource) error { return nil }); err != nil {
		w.t.Fatalf("seed %d: Enqueue: %v", w.seed, err)
	}
	if w.rng.IntN(2) == 0 {
		for i, l := range w.live {
			if l == b {
				w.live = append(w.live[:i], w.live[i+1:]...)
				break
			}
		}
		if err := b.Free(); err != nil {
			w.t.Fatalf("seed %d: Free: %v", w.seed, err)
		}
	}
}

// hold keeps a buffer's memory bound past its Free, or lets an earlier
// hold go.
func (w *wouldFitWorld) hold() {
	if len(w.holds) > 0 && w.rng.IntN(2) == 0 {
		w.holds[0]()
		w.holds = w.holds[1:]
		return
	}
	if b := w.take(); !b.IsZero() {
		release, err := b.Hold()
		if err != nil {
			w.t.Fatalf("seed %d: Hold: %v", w.seed, err)
		}
		w.holds = append(w.holds, release)
		if err := b.Free(); err != nil {
			w.t.Fatalf("seed %d: Free: %v", w.seed, err)
		}
	}
}

// holdReleases opens a hold on a stream's storage releases, or passes one.
func (w *wouldFitWorld) holdReleases() {
	if len(w.passes) > 0 && w.rng.IntN(2) == 0 {
		w.passes[0]()
		w.passes = w.passes[1:]
		return
	}
	pass, err := w.stream().HoldReleases()
	if err != nil {
		w.t.Fatalf("seed %d: HoldReleases: %v", w.seed, err)
	}
	w.passes = append(w.passes, pass)
}

// window opens a Persistent or Dedicated window on a stream, or closes
// its innermost.
func (w *wouldFitWorld) window() {
	s := w.stream()
	if open := w.windows[s]; len(open) > 0 && w.rng.IntN(4) != 0 {
		open[len(open)-1]()
		w.windows[s] = open[:len(open)-1]
		return
	}
	mode := Persistent
	if w.rng.IntN(2) == 0 {
		mode = Dedicated
	}
	w.windows[s] = append(w.windows[s], s.Window(mode))
}

func (w *wouldFitWorld) sync() {
	for _, s := range w.streams {
		if err := s.Synchronize(bg); err != nil {
			w.t.Fatalf("seed %d: Synchronize: %v", w.seed, err)
		}
	}
}

// observed is what WouldFit must leave as it was.
type observed struct {
	stats    Stats
	report   Report
	history  History
	snapshot []byte
}

func (w *wouldFitWorld) observe(snapshot bool) observed {
	o := observed{stats: w.d.Stats(), report: w.d.Report()}
	if w.history {
		h, err := w.d.History()
		if err != nil {
			w.t.Fatalf("seed %d: History: %v", w.seed, err)
		}
		o.history = h
	}
	if snapshot {
		var buf bytes.Buffer
		if err := w.d.WriteSnapshot(&buf); err != nil {
			w.t.Fatalf("seed %d: WriteSnapshot: %v", w.seed, err)
		}
		o.snapshot = buf.Bytes()
	}
	return o
}

func (w *wouldFitWorld) probe(c *wouldFitCounts, step int) {
	t := w.t
	if !w.sim {
		// Host queues run ops on workers: let them finish, so that nothing
		// completes between the question and the Alloc.
		w.sync()
	}
	s := w.stream()
	size := w.size()
	snap := w.rng.IntN(8) == 0
	before := w.observe(snap)
	f := s.WouldFit(size)
	after := w.observe(snap)
	where := fmt.Sprintf("seed %d step %d: %s WouldFit(%d) = %+v (%v)", w.seed, step, s.Name(), size, f, f)
	if !reflect.DeepEqual(before.stats, after.stats) {
		t.Fatalf("%s changed the stats:\n%+v\n%+v", where, before.stats, after.stats)
	}
	if !reflect.DeepEqual(before.report, after.report) {
		t.Fatalf("%s changed the report", where)
	}
	if !reflect.DeepEqual(before.history, after.history) {
		t.Fatalf("%s changed the history", where)
	}
	if !bytes.Equal(before.snapshot, after.snapshot) {
		t.Fatalf("%s changed the snapshot", where)
	}
	if again := s.WouldFit(size); !reflect.DeepEqual(again, f) {
		t.Fatalf("%s, asked again: %+v", where, again)
	}
	c.count(f, size, w.capacity)
	held := maps.Clone(w.kept)
	b, err := s.Alloc(bg, size)
	post := w.d.Stats()
	pre := before.stats
	if err == nil {
		w.live = append(w.live, b)
	}
	where += fmt.Sprintf(", Alloc: %v", err)
	switch {
	case f.Maybe:
		if err == nil && pre.Relocation.Runs == post.Relocation.Runs {
			t.Fatalf("%s: the Alloc succeeded without relocating or compacting", where)
		}
		return
	case !f.OK:
		if err == nil {
			t.Fatalf("%s: does not fit, but the Alloc succeeded", where)
		}
		if FailureKind(err) != FailureKind(f.Err) {
			t.Fatalf("%s: the Alloc failed as %q, WouldFit said %q", where, FailureKind(err), FailureKind(f.Err))
		}
		return
	case err != nil:
		t.Fatalf("%s: fits, but the Alloc failed", where)
	}
	var added []uint64 // storage allocations the Alloc added and kept
	for id, size := range w.kept {
		if _, ok := held[id]; !ok && !w.releaseHeld(id) {
			added = append(added, size)
		}
	}
	retried := post.ReserveRetries - pre.ReserveRetries
	fallbacks := post.DedicatedFallbacks - pre.DedicatedFallbacks
	growths := post.Growths - pre.Growths
	if (retried == 1) != f.AfterCleanup {
		t.Fatalf("%s: retried %d, WouldFit said after cleanup %v", where, retried, f.AfterCleanup)
	}
	// Storage of its own after the cleanup is the own-size fallback, or a
	// dedicated buffer's route retried.
	if fallbacks == 1 && (f.How != FitStorage || !f.AfterCleanup) {
		t.Fatalf("%s: %d own-size fallbacks", where, fallbacks)
	}
	if (growths == 1) != (f.How == FitGrowth) {
		t.Fatalf("%s: %d growths", where, growths)
	}
	switch {
	case f.How == FitHeld && len(added) != 0:
		t.Fatalf("%s: the Alloc added storage allocations of %v bytes", where, added)
	case f.How != FitHeld && (len(added) != 1 || added[0] != f.Storage):
		t.Fatalf("%s: the Alloc added storage allocations of %v bytes", where, added)
	}
	if pre.Relocation.Runs != post.Relocation.Runs {
		t.Fatalf("%s: the Alloc relocated or compacted", where)
	}
}

// On a closed device WouldFit says so, as Alloc does, instead of
// panicking or answering for memory that is gone.
func TestWouldFitOnAClosedDevice(t *testing.T) {
	d, err := Open(WithSim())
	if err != nil {
		t.Fatal(err)
	}
	s := d.DefaultStream()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	f := s.WouldFit(mib)
	if f.OK || f.Maybe || !errors.Is(f.Err, ErrClosed) {
		t.Fatalf("WouldFit on a closed device = %+v", f)
	}
	if _, err := s.Alloc(bg, mib); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc on a closed device: %v", err)
	}
	if f := d.DefaultStream().WouldFit(mib); !errors.Is(f.Err, ErrClosed) {
		t.Fatalf("WouldFit on a closed device = %+v", f)
	}
}

// While a stream records a graph, its allocations may only use room held
// for it: WouldFit finds the room the rehearsal held for the recording's
// allocation, and refuses a size no held room serves with the recording's
// error, as the Alloc does; another stream meanwhile may add pages but not
// give any back, and its answer agrees with its Alloc.
func TestWouldFitWhileRecording(t *testing.T) {
	d := openHost(t, WithSim(), WithCapacity(256*mib))
	s := d.DefaultStream()
	other, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	_, err = s.Capture(bg, func(ctx context.Context, s *Stream) error {
		calls++
		recording := calls == 2
		if recording {
			if f := s.WouldFit(mib); !f.OK || f.How != FitHeld {
				t.Errorf("recording: WouldFit(1 MiB), the warmup's allocation = %v", f)
			}
		}
		b, err := s.Alloc(ctx, mib)
		if err != nil {
			return err
		}
		if recording {
			f := s.WouldFit(64 * mib)
			if f.OK || f.Maybe || !errors.Is(f.Err, ErrPageUpdateForbidden) {
				t.Errorf("recording: WouldFit(64 MiB) = %v", f)
			}
			g := other.WouldFit(4 * mib)
			ob, err := other.Alloc(ctx, 4*mib)
			if !g.OK || err != nil || g.How == FitHeld || g.AfterCleanup {
				t.Errorf("another stream while one records: WouldFit = %v, Alloc: %v", g, err)
			}
			if err == nil {
				_ = ob.Free()
			}
			if _, err := s.Alloc(ctx, 64*mib); !errors.Is(err, ErrPageUpdateForbidden) {
				t.Errorf("recording: Alloc(64 MiB) = %v", err)
			}
		}
		return b.Free()
	})
	if !errors.Is(err, ErrPageUpdateForbidden) {
		t.Fatalf("Capture: %v (the refused Alloc dooms it)", err)
	}
}

// Where the Alloc would first wait for queued work (another stream's op
// still reads a freed buffer), WouldFit does not wait: it answers for the
// state once that work completed and says it waits. The Alloc waits
// without the device lock, so WouldFit and Stats answer meanwhile.
func TestWouldFitDoesNotWaitForTheDevice(t *testing.T) {
	d := openHost(t, WithCapacity(32*mib)) // pages of at most 8 MiB
	s := d.DefaultStream()
	reader, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	x := mustAlloc(t, s, 20*mib) // storage of its own: above the largest page
	release := make(chan struct{})
	if err := reader.Enqueue("slow read", []Use{{Buffer: x, Access: Read}}, func([]storage.Resource) error {
		<-release
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mustFree(t, x) // still read by the reader's op: its memory stays taken
	before := d.Stats()
	f := s.WouldFit(20 * mib)
	if !f.OK || f.How != FitStorage || !f.AfterCleanup || !f.Waits || f.Storage != 20*mib {
		t.Fatalf("WouldFit(20 MiB) behind a queued read of the freed buffer = %+v (%v)", f, f)
	}
	if after := d.Stats(); !reflect.DeepEqual(before, after) {
		t.Fatalf("WouldFit changed the stats")
	}
	done := make(chan error, 1)
	go func() {
		b, err := s.Alloc(bg, 20*mib)
		if err == nil {
			err = b.Free()
		}
		done <- err
	}()
	// The Alloc waits for the read without the device lock: a question
	// and a stats read go through meanwhile.
	_ = s.WouldFit(mib)
	_ = d.Stats()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Alloc(20 MiB) once the read completed: %v", err)
	}
}

// From inside an op an Alloc makes no room that needs a wait (the op's own
// stream cannot be waited for): WouldFit asked there answers so.
func TestWouldFitFromAnOp(t *testing.T) {
	d := openHost(t, WithSim(), WithCapacity(32*mib))
	s := d.DefaultStream()
	b := mustAlloc(t, s, 20*mib)
	pass, err := s.HoldReleases() // the cleanup's releases wait for it: a cleanup waits
	if err != nil {
		t.Fatal(err)
	}
	defer pass()
	mustFree(t, b)
	mustCleanup(t, d) // its storage's release is held
	var f, small Fit
	var allocErr, smallErr error
	if err := s.Enqueue("op", nil, func([]storage.Resource) error {
		small = s.WouldFit(mib)
		var b Buffer
		if b, smallErr = s.Alloc(bg, mib); smallErr == nil {
			_ = b.Free()
		}
		f = s.WouldFit(20 * mib)
		_, allocErr = s.Alloc(bg, 20*mib)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(bg); err != nil {
		t.Fatal(err)
	}
	if !small.OK || smallErr != nil {
		t.Fatalf("from an op: WouldFit(1 MiB) = %v, Alloc: %v", small, smallErr)
	}
	if f.OK || f.Maybe || !errors.Is(f.Err, ErrCalledFromOp) || !errors.Is(allocErr, ErrCalledFromOp) || FailureKind(f.Err) != FailureKind(allocErr) {
		t.Fatalf("from an op: WouldFit(20 MiB) = %v, Alloc: %v", f, allocErr)
	}
}

// Sizes at the edges (zero, one byte, the largest page and one past it,
// sizes whose padding would overflow) neither panic nor disagree with the
// Alloc, on each backend and page kind.
func TestWouldFitExtremeSizes(t *testing.T) {
	for _, opts := range [][]Option{
		{WithSim()},
		{WithSim(), WithCapacity(64 * mib)},
		{WithSim(), WithCapacity(64 * mib), WithPageGranular(true)},
		{WithCapacity(64 * mib)},
		{},
	} {
		d := openHost(t, opts...)
		s := d.DefaultStream()
		maxPage := d.Properties().MaxPageSize
		for _, size := range []uint64{0, 1, maxPage, maxPage + 1, math.MaxUint64 / 2, math.MaxUint64 - 1, math.MaxUint64} {
			f := s.WouldFit(size)
			b, err := s.Alloc(bg, size)
			if f.OK != (err == nil) || (!f.OK && !f.Maybe && FailureKind(err) != FailureKind(f.Err)) {
				t.Fatalf("%d opts: WouldFit(%d) = %v, Alloc: %v", len(opts), size, f, err)
			}
			if err == nil {
				mustFree(t, b)
			}
		}
	}
}
