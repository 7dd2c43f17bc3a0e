package shadowmodel

// The executor: Run opens the device a script's config describes, starts
// one goroutine per script goroutine (each runs its own operations in
// order, checking every result against its shadow), a monitor that checks
// Stats and Report from the side, and a watchdog; then it verifies every
// buffer, frees everything and checks that nothing is left (teardown.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// Target is the backend a script runs on.
type Target struct {
	// Open opens the device (nil: gpumem.Open).
	Open func(...gpumem.Option) (*gpumem.Device, error)
	// Rotate enqueues on s an op that writes uses[1] = uses[0] (n bytes)
	// rotated left by rot and copies the first tmp bytes of uses[0] into
	// uses[2] when tmp > 0, as device commands. A device backend
	// (Config.device) needs it for captures: a backend that records a
	// capture runs each op's function once, at recording, and its
	// launches replay the recorded commands, so the graph ops are device
	// commands there (Write's bytes staged at recording, the rotation as
	// device copies) and every launch writes the recording's patterns
	// again (graph.fixed).
	Rotate func(s *gpumem.Stream, name string, uses []gpumem.Use, n, rot, tmp uint64) error
}

// Totals are what runs did and checked. Steps are the draws from the
// operation mix the scripts were generated from (Gen.Steps); Ops the
// operations run, Void those of them whose buffer or graph was absent.
type Totals struct {
	Seeds, Steps, Ops, Void                            uint64
	Compared, Faults, Violations                       uint64
	Skips, Fails, OOMs, RelocVerifies                  uint64
	Captures, Launches                                 uint64
	Moves, Growths, CompactMoves, CompactPages, Reused uint64
}

// Add adds o to t.
func (t *Totals) Add(o Totals) {
	t.Seeds += o.Seeds
	t.Steps += o.Steps
	t.Ops += o.Ops
	t.Void += o.Void
	t.Compared += o.Compared
	t.Faults += o.Faults
	t.Violations += o.Violations
	t.Skips += o.Skips
	t.Fails += o.Fails
	t.OOMs += o.OOMs
	t.RelocVerifies += o.RelocVerifies
	t.Captures += o.Captures
	t.Launches += o.Launches
	t.Moves += o.Moves
	t.Growths += o.Growths
	t.CompactMoves += o.CompactMoves
	t.CompactPages += o.CompactPages
	t.Reused += o.Reused
}

func (t Totals) String() string {
	return fmt.Sprintf("%d seeds, %d steps, %d operations (%d void), %d faults injected, %d bytes compared, %d violations; "+
		"%d failing ops, %d skipped ops, %d out-of-memory, %d growths, %d relocation moves, %d post-relocation verifications, "+
		"%d captures (%d recorded buffers' slices reused in the recording), %d launches; compaction moved %d allocations and gave back %d pages",
		t.Seeds, t.Steps, t.Ops, t.Void, t.Faults, t.Compared, t.Violations, t.Fails, t.Skips, t.OOMs, t.Growths, t.Moves, t.RelocVerifies,
		t.Captures, t.Reused, t.Launches, t.CompactMoves, t.CompactPages)
}

// Violation is a divergence between the device and the model.
type Violation struct {
	Worker int    // the script goroutine; -1: the monitor or the teardown
	Op     int    // the index in Script.Ops of the operation it arose in; -1: none
	Line   string // that operation's line
	Msg    string
}

func (v Violation) String() string {
	switch {
	case v.Op >= 0:
		return fmt.Sprintf("[op %d: w%d, %s] %s", v.Op, v.Worker, strings.TrimPrefix(v.Line, fmt.Sprintf("w%d ", v.Worker)), v.Msg)
	case v.Worker >= 0:
		return fmt.Sprintf("[w%d, teardown] %s", v.Worker, v.Msg)
	}
	return "[teardown/monitor] " + v.Msg
}

// Result is what a run found.
type Result struct {
	Totals
	// Violations are the first 8 found, in the order found: the first is
	// the run's first divergence.
	Violations []Violation
	// Recent is the last operations of the first violation's goroutine,
	// each with its outcome.
	Recent string
}

const (
	stall  = 60 * time.Second // no progress this long: dump every goroutine and fail
	logLen = 50               // operations kept per goroutine for the failure report
)

var bg = context.Background()

// Run runs s on t and reports what diverged. The error is for a run that
// could not start (an invalid config, a device that does not open).
func Run(s *Script, t Target) (Result, error) {
	cfg := s.Config
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if cfg.device() && t.Rotate == nil {
		return Result{}, fmt.Errorf("shadowmodel: a %v script needs Target.Rotate for its captures", cfg.Name)
	}
	run := &runState{script: s, cfg: cfg, tgt: t, base: newBase(), gates: make([]sync.RWMutex, cfg.Streams)}
	var wrap func(storage.Storage) storage.Storage
	if cfg.Faulty {
		var mu sync.Mutex
		wrap = func(st storage.Storage) storage.Storage {
			f := hoststorage.NewFaulty(st)
			mu.Lock()
			run.faults = append(run.faults, f)
			mu.Unlock()
			return f
		}
	}
	open := t.Open
	if open == nil {
		open = gpumem.Open
	}
	d, err := open(deviceOptions(cfg, wrap)...)
	if err != nil {
		return Result{}, fmt.Errorf("shadowmodel: %s: Open: %w", cfg.Name, err)
	}
	run.d = d
	run.streams = append(run.streams, d.DefaultStream())
	for len(run.streams) < cfg.Streams {
		st, err := d.NewStream()
		if err != nil {
			return Result{}, errors.Join(fmt.Errorf("shadowmodel: %s: NewStream: %w", cfg.Name, err), d.Close())
		}
		run.streams = append(run.streams, st)
	}
	run.oomOK = cfg.Capacity != 0 || cfg.Faulty
	for i := range cfg.Workers {
		run.workers = append(run.workers, newWorker(run, i))
	}
	for i, op := range s.Ops {
		w := run.workers[op.Worker]
		w.ops = append(w.ops, i)
	}

	done := make(chan struct{})
	go run.watchdog(done)
	monDone := make(chan struct{})
	var monWG sync.WaitGroup
	monWG.Go(func() { run.monitor(monDone) })
	var wg sync.WaitGroup
	for _, w := range run.workers {
		wg.Go(w.loop)
	}
	wg.Wait()
	close(monDone)
	monWG.Wait()
	run.teardown()

	var faults uint64
	for _, f := range run.faults {
		faults += uint64(f.Refusals())
	}
	st := d.Stats()
	res := Result{Totals: Totals{Seeds: 1, Steps: uint64(s.Steps), Ops: run.ops.Load(), Void: run.void.Load(),
		Compared: run.compared.Load(), Faults: faults,
		Skips: run.skips.Load(), Fails: run.fails.Load(), OOMs: run.ooms.Load(), RelocVerifies: run.relocVerifies.Load(),
		Captures: run.captures.Load(), Launches: run.launches.Load(), Moves: st.Relocation.Moves, Growths: st.Growths,
		CompactMoves: st.Relocation.CompactMoves, CompactPages: st.Relocation.CompactPagesFreed, Reused: st.Captures.Reused}}
	if err := d.Close(); err != nil {
		run.violate(-1, -1, "Device.Close: %v", err)
	}
	run.pulse()
	close(done) // the watchdog covered Close too
	run.mu.Lock()
	res.Violations = run.violations
	res.Totals.Violations = uint64(len(run.violations))
	res.Recent = run.recent
	run.mu.Unlock()
	return res, nil
}

// runState is one run's device, streams and shared state.
type runState struct {
	script  *Script
	cfg     Config
	tgt     Target
	base    base
	d       *gpumem.Device
	streams []*gpumem.Stream
	faults  []*hoststorage.Faulty
	oomOK   bool // an out-of-memory is explainable (capacity or injected faults)
	workers []*worker

	// gates serialise a capture on a stream against every other goroutine's
	// use of that stream (its queue or its memory): what another goroutine
	// would do to a recording stream (a host sync, an allocation) dooms the
	// recording by design, so the model keeps it out to stay deterministic.
	// Every other use takes the read side; Capture the write side.
	gates []sync.RWMutex

	stop         atomic.Bool
	progress     atomic.Uint64 // API calls returned (the watchdog's pulse)
	capturing    atomic.Int32
	captureEpoch atomic.Uint64
	waitFaults   atomic.Int32

	ops, void, compared, skips, fails, ooms, relocVerifies, captures, launches atomic.Uint64

	mu         sync.Mutex
	violations []Violation
	recent     string
}

func (r *runState) sim() bool { return r.cfg.Backend == Sim }

// violate records a violation of goroutine worker (-1: none) in op (-1:
// none) and stops the run.
func (r *runState) violate(worker, op int, format string, args ...any) {
	v := Violation{Worker: worker, Op: op, Msg: fmt.Sprintf(format, args...)}
	if op >= 0 {
		v.Line = r.script.Ops[op].String()
	}
	r.mu.Lock()
	if len(r.violations) < 8 {
		r.violations = append(r.violations, v)
		if worker >= 0 && len(r.violations) == 1 {
			r.recent = r.workers[worker].log.dump()
		}
	}
	r.mu.Unlock()
	r.stop.Store(true)
}

func (r *runState) pulse() { r.progress.Add(1) }

// captureMayRecord reports whether some capture may have recorded between
// the epoch taken before a call and now.
func (r *runState) captureMayRecord(epoch uint64) bool {
	return r.capturing.Load() > 0 || r.captureEpoch.Load() != epoch
}

// watchdog fails the run when no API call returned for stall: it dumps
// every goroutine's stack and each worker's last operations, then panics
// (a deadlocked test cannot fail politely).
func (r *runState) watchdog(done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, since := r.progress.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if p := r.progress.Load(); p != last {
			last, since = p, time.Now()
			continue
		}
		if time.Since(since) < stall {
			continue
		}
		fmt.Fprintf(os.Stderr, "shadow: seed %d (%s): no progress for %v: deadlock?\n", r.script.Seed, r.cfg.Name, stall)
		for _, w := range r.workers {
			fmt.Fprintf(os.Stderr, "\tgoroutine %d, last operations:\n%s", w.id, w.log.dump())
		}
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		panic(fmt.Sprintf("shadow: seed %d: no progress for %v (stacks above)", r.script.Seed, stall))
	}
}

// worker runs one script goroutine's operations against its shadow.
type worker struct {
	run       *runState
	id        int
	ops       []int // its operations' indices in Script.Ops
	at        int   // the index of the operation running
	allocs    map[int]*alloc
	live      []*alloc // live allocations, oldest first
	bufs      map[Ref]gpumem.Buffer
	graphs    map[GraphID]*graph
	seenMoves uint64
	log       opLog
}

func newWorker(run *runState, id int) *worker {
	return &worker{run: run, id: id, at: -1, allocs: map[int]*alloc{}, bufs: map[Ref]gpumem.Buffer{}, graphs: map[GraphID]*graph{}}
}

func (w *worker) loop() {
	defer func() {
		if p := recover(); p != nil {
			w.fail("panic: %v\n%s", p, debug.Stack())
		}
	}()
	for _, i := range w.ops {
		if w.run.stop.Load() {
			return
		}
		w.at = i
		op := w.run.script.Ops[i]
		w.log.add(fmt.Sprintf("#%d %s", i, op))
		op.act.run(w)
		w.run.ops.Add(1)
	}
	w.at = -1
}

func (w *worker) fail(format string, args ...any) { w.run.violate(w.id, w.at, format, args...) }

// void skips an operation whose buffer or graph is absent (its allocation
// or capture failed at run time, or it was freed or closed).
func (w *worker) void(format string, args ...any) {
	w.run.void.Add(1)
	w.log.note("void: " + fmt.Sprintf(format, args...))
}

// pick is the executor's own choice among n (which handle a verification
// reads, whether through Map): a function of the operation's index and
// salt, so a replay chooses the same.
func (w *worker) pick(n int, salt uint64) int {
	return int(mix(uint64(w.at+1)<<24^salt) % uint64(n))
}

// lock takes the read side of the gates of the given streams, in index
// order (a capture takes one write side and nothing else, so no cycle).
func (w *worker) lock(streams ...int) func() {
	var mask uint64
	for _, s := range streams {
		mask |= 1 << s
	}
	return w.lockMask(mask)
}

func (w *worker) lockMask(mask uint64) func() {
	g := w.run.gates
	for i := range g {
		if mask&(1<<i) != 0 {
			g[i].RLock()
		}
	}
	return func() {
		for i := range g {
			if mask&(1<<i) != 0 {
				g[i].RUnlock()
			}
		}
	}
}

// opLog keeps a goroutine's last operations for the failure report.
type opLog struct {
	mu   sync.Mutex
	ents [logLen]string
	n    int
}

func (l *opLog) add(s string) {
	l.mu.Lock()
	l.ents[l.n%logLen] = s
	l.n++
	l.mu.Unlock()
}

// note appends to the latest entry (an operation's outcome).
func (l *opLog) note(s string) {
	l.mu.Lock()
	if l.n > 0 {
		l.ents[(l.n-1)%logLen] += " → " + s
	}
	l.mu.Unlock()
}

func (l *opLog) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i := max(0, l.n-logLen); i < l.n; i++ {
		fmt.Fprintf(&b, "\t\t%s\n", l.ents[i%logLen])
	}
	return b.String()
}
