package shadowmodel

// The generator: each goroutine draws its operations from the mix
// (mixWeights) with its own random source, over its own model of what it
// holds (live allocations and handles, which are written, which bytes
// carry a failure, its graphs). The goroutines draw in lockstep, one step
// each in turn, so the few choices they share (how many wait faults the
// run has) are deterministic too. The generator assumes every allocation
// and capture succeeds: where one does not at run time (out of memory),
// the executor finds the buffer absent and counts the operations over it
// as void (Totals.Void) instead of running them.

import (
	"math/rand/v2"
	"slices"

	"github.com/gpumem/gpumem"
)

// Gen says what Generate draws.
type Gen struct {
	// Steps is the draws from the operation mix over all goroutines: each
	// draws Steps/Workers (at least one). A draw makes zero or more
	// operations (an allocation also writes its bytes; a draw that finds
	// nothing to act on makes none).
	Steps int
	// Known lists known defects whose triggering patterns the generator
	// avoids (see the package doc). Default none: full checking.
	Known []int
	// Race caps the large sizes for a run under the race detector.
	Race bool
}

const (
	maxGraphs  = 2        // live graphs per goroutine
	maxStale   = 8        // freed handles kept per goroutine for misuse checks
	maxAllocs  = 48       // live allocations per goroutine
	smallRange = 64 << 10 // most ops' ranges stay below this
	verifyGap  = 500      // steps between a goroutine's periodic relocation checks (verify-moved)
)

// Generate draws a script for seed on configuration cfg.
func Generate(seed uint64, cfg Config, g Gen) *Script {
	gen := &generator{cfg: cfg, known: map[int]bool{}, sizeCap: cfg.sizeCap(g.Race), budget: cfg.budget()}
	for _, k := range g.Known {
		gen.known[k] = true
	}
	perWorker := max(1, g.Steps/cfg.Workers)
	workers := make([]*genWorker, cfg.Workers)
	for i := range workers {
		workers[i] = &genWorker{g: gen, id: i, r: rand.New(rand.NewPCG(seed, uint64(i)+1)), steps: perWorker}
	}
	for step := range perWorker {
		for _, w := range workers {
			w.step = step
			w.do(w.pickOp())
			if step%verifyGap == verifyGap-1 {
				w.emit(verifyOp{})
			}
		}
	}
	known := slices.Sorted(func(yield func(int) bool) {
		for k := range gen.known {
			if !yield(k) {
				return
			}
		}
	})
	return &Script{Seed: seed, Steps: perWorker * cfg.Workers, Config: cfg, Known: known, Ops: gen.ops}
}

type generator struct {
	cfg             Config
	known           map[int]bool
	sizeCap, budget uint64
	waitFaults      int // refused copy-queue waits armed so far (at most 2 a run)
	ops             []Op
}

func (g *generator) sim() bool { return g.cfg.Backend == Sim }

// genAlloc is one allocation as its goroutine's generator knows it.
type genAlloc struct {
	id      int
	size    uint64
	owner   int
	refs    []Ref // live handles
	clones  int   // clones made so far (names the next)
	init    bool  // written whole at least once
	failed  ranges
	foreign uint64 // streams other than the owner that used it since a read (known defect 15)
	used    uint64 // every stream that used it (known defect 2)
	live    bool
}

func (a *genAlloc) ref(r *rand.Rand) Ref { return a.refs[r.IntN(len(a.refs))] }

// wrote records a successful write of [off, off+n).
func (a *genAlloc) wrote(off, n uint64, sim bool) {
	a.failed = a.failed.sub(off, off+n)
	if off == 0 && n == a.size || sim {
		a.init = true
	}
}

func known(a *genAlloc) bool { return a.init && a.size > 0 }

type genGraph struct {
	id       GraphID
	stream   int
	a, b, c  *genAlloc
	every    int
	launches int
}

func (g *genGraph) failing(r int) bool { return g.every > 0 && r > 0 && r%g.every == 0 }

type staleRef struct {
	ref  Ref
	size uint64
}

// genWorker is one goroutine's generator.
type genWorker struct {
	g           *generator
	id          int
	r           *rand.Rand
	allocs      []*genAlloc
	liveBytes   uint64
	graphs      []*genGraph
	stale       []staleRef
	nextAlloc   int
	nextGraph   int
	step, steps int
}

func (w *genWorker) emit(a action) { w.g.ops = append(w.g.ops, Op{Worker: w.id, act: a}) }

func (w *genWorker) streams() int { return w.g.cfg.Streams }

// mixOp is a kind of draw from the mix.
type mixOp int

const (
	mAlloc mixOp = iota
	mAllocWindow
	mFree
	mClone
	mWrite
	mEnqueue
	mFailing
	mConsumeFailed
	mEnqueueThenFree
	mRead
	mMap
	mSync
	mStreamCleanup
	mDeviceCleanup
	mDefragment
	mStats
	mCapture
	mLaunch
	mGraphClose
	mRacyClose
	mMisuse
	mFault
	mDelay
	mixOps
)

// mixWeights is the operation mix (relative weights).
var mixWeights = [mixOps]int{
	mAlloc: 100, mAllocWindow: 10, mFree: 70, mClone: 15, mWrite: 70,
	mEnqueue: 300, mFailing: 35, mConsumeFailed: 35, mEnqueueThenFree: 35,
	mRead: 110, mMap: 15, mSync: 30, mStreamCleanup: 8, mDeviceCleanup: 10, mDefragment: 6,
	mStats: 10, mCapture: 6, mLaunch: 25, mGraphClose: 4, mRacyClose: 2,
	mMisuse: 10, mFault: 8, mDelay: 5,
}

func (w *genWorker) pickOp() mixOp {
	total := 0
	for _, v := range mixWeights {
		total += v
	}
	x := w.r.IntN(total)
	for k, v := range mixWeights {
		if x < v {
			return mixOp(k)
		}
		x -= v
	}
	return mRead
}

func (w *genWorker) do(k mixOp) {
	g, cfg := w.g, w.g.cfg
	switch k {
	case mAlloc:
		if w.liveBytes > g.budget || len(w.allocs) >= maxAllocs {
			w.free(w.pickAlloc(nil))
			return
		}
		w.alloc(w.r.IntN(w.streams()), w.pickSize(), auto, w.r.IntN(100) < 85)
	case mAllocWindow:
		if w.liveBytes > g.budget || len(w.allocs) >= maxAllocs {
			return
		}
		m := persistent
		if w.r.IntN(2) == 0 {
			m = dedicated
		}
		w.alloc(w.r.IntN(w.streams()), w.pickSize(), m, true)
	case mFree:
		w.free(w.pickAlloc(nil))
	case mClone:
		w.clone()
	case mWrite:
		w.write(w.pickAlloc(nil), w.r.IntN(3) == 0)
	case mEnqueue:
		w.enqueue(succeed, false, false)
	case mFailing:
		w.enqueue(failMode(1+w.r.IntN(2)), false, false)
	case mConsumeFailed:
		w.enqueue(succeed, true, false)
	case mEnqueueThenFree:
		w.enqueue(succeed, false, true)
	case mRead:
		// Large buffers are read less often: their bytes are checked at
		// every relocation and at the end anyway.
		if a := w.pickAlloc(func(a *genAlloc) bool { return a.size <= 1<<20 || w.r.IntN(4) == 0 }); a != nil {
			w.read(a)
		}
	case mMap:
		if cfg.device() && !cfg.HostMaps {
			return // no host bytes to map (see Config.HostMaps)
		}
		if a := w.pickAlloc(nil); a != nil {
			w.mapped(a)
		}
	case mSync:
		w.sync(w.r.IntN(w.streams()))
	case mStreamCleanup:
		w.cleanup(w.r.IntN(w.streams()))
	case mDeviceCleanup:
		w.cleanup(-1)
	case mDefragment:
		var op defragmentOp
		switch w.r.IntN(3) {
		case 1:
			op.Moves = 1 + w.r.IntN(4)
		case 2:
			op.Bytes = 1 + w.r.Uint64N(4<<20)
		}
		w.emit(op)
	case mStats:
		w.emit(statsOp{Report: w.r.IntN(4) == 0})
	case mCapture:
		w.capture()
	case mLaunch:
		if len(w.graphs) > 0 {
			w.launch(w.graphs[w.r.IntN(len(w.graphs))])
		}
	case mGraphClose:
		if len(w.graphs) > 0 {
			w.closeGraph(w.r.IntN(len(w.graphs)))
		}
	case mRacyClose:
		if len(w.graphs) > 0 && !g.sim() && !g.known[1] {
			w.racyClose(w.r.IntN(len(w.graphs)))
		}
	case mMisuse:
		w.misuse()
	case mFault:
		if cfg.Faulty {
			w.injectFault()
		}
	case mDelay:
		if !g.sim() {
			w.delay(w.r.IntN(w.streams()))
		}
	}
}

// pickSize draws an allocation size: mostly small, some page-sized, a few
// large ones that make the arena grow and leave outdated pages behind.
func (w *genWorker) pickSize() uint64 {
	// The large sizes ramp up over the goroutine's run: pages grow (and
	// leave outdated pages behind) throughout, not only in the first steps.
	c := max(2<<20, w.g.sizeCap*uint64(min(w.step+w.steps/8, w.steps))/uint64(max(1, w.steps)))
	c = min(c, w.g.sizeCap)
	var n uint64
	switch x := w.r.IntN(100); {
	case x < 1:
		return 0
	case x < 40:
		n = 1 + w.r.Uint64N(4096)
	case x < 65:
		n = 4096 + w.r.Uint64N(smallRange-4096)
	case x < 85:
		n = smallRange + w.r.Uint64N(1<<20-smallRange)
	case x < 95:
		n = 1<<20 + w.r.Uint64N(max(1, c/2))
	default:
		n = c/2 + w.r.Uint64N(max(1, c/2))
	}
	return max(1, min(n, c))
}

// pickAlloc draws one of the goroutine's allocations satisfying ok (nil:
// any), or nil.
func (w *genWorker) pickAlloc(ok func(*genAlloc) bool) *genAlloc {
	if len(w.allocs) == 0 {
		return nil
	}
	start := w.r.IntN(len(w.allocs))
	for i := range w.allocs {
		a := w.allocs[(start+i)%len(w.allocs)]
		if ok == nil || ok(a) {
			return a
		}
	}
	return nil
}

// alloc allocates on stream s, in mode m, and optionally writes a whole
// pattern so the bytes are known.
func (w *genWorker) alloc(s int, size uint64, m mode, init bool) *genAlloc {
	w.nextAlloc++
	a := &genAlloc{id: w.nextAlloc, size: size, owner: s, refs: []Ref{{Alloc: w.nextAlloc}}, live: true}
	w.emit(allocOp{A: a.refs[0], S: s, Size: size, Mode: m})
	w.allocs = append(w.allocs, a)
	w.liveBytes += size
	switch {
	case !init:
	case size > smallRange && w.r.IntN(4) != 0:
		// A fill op writes the storage straight from the pattern, where
		// Write first copies the bytes: cheaper for large buffers.
		// On the owner stream, as Write: a capture of the buffer must not
		// find another stream's pending use of it (its recording would
		// wait on it, which dooms it).
		w.submit(s, fill, []genUse{{a: a, ref: a.refs[0], access: gpumem.Write, n: size}}, nil, []uint64{w.r.Uint64()}, succeed)
	default:
		w.write(a, false)
	}
	return a
}

// free drops one handle; the last one frees the allocation.
func (w *genWorker) free(a *genAlloc) {
	if a == nil {
		return
	}
	i := w.r.IntN(len(a.refs))
	ref := a.refs[i]
	if len(a.refs) == 1 && w.g.cfg.Granular && w.g.known[2] {
		w.syncStreams(a.used | 1<<a.owner)
	}
	w.emit(freeOp{Ref: ref})
	a.refs = slices.Delete(a.refs, i, i+1)
	w.stale = append(w.stale, staleRef{ref, a.size})
	if len(w.stale) > maxStale {
		w.stale = w.stale[1:]
	}
	if len(a.refs) == 0 {
		a.live = false
		w.liveBytes -= a.size
		w.allocs = slices.DeleteFunc(w.allocs, func(x *genAlloc) bool { return x == a })
	}
}

// syncStreams synchronizes every stream in mask (known defects 2 and 15).
func (w *genWorker) syncStreams(mask uint64) {
	for s := range w.streams() {
		if mask&(1<<s) != 0 {
			w.sync(s)
		}
	}
}

func (w *genWorker) clone() {
	a := w.pickAlloc(nil)
	if a == nil || len(a.refs) >= 4 {
		return
	}
	a.clones++
	to := Ref{Alloc: a.id, Clone: a.clones}
	w.emit(cloneOp{From: a.ref(w.r), To: to})
	a.refs = append(a.refs, to)
}

// write writes a pattern from offset 0: the whole buffer, or (partial and
// already known) a prefix.
func (w *genWorker) write(a *genAlloc, partial bool) {
	if a == nil {
		return
	}
	n := a.size
	if partial && a.init && n > 1 {
		n = 1 + w.r.Uint64N(n-1)
	}
	if n == 0 {
		a.init = true // nothing to write (Write of nothing is tested on freed buffers)
		return
	}
	var key uint64
	if w.g.sim() {
		// Sim holds no bytes: a short write (its range is all the shadow
		// tracks there) spares copying megabytes of nothing.
		n = min(n, 4096)
	} else {
		key = w.r.Uint64()
	}
	w.emit(writeOp{Ref: a.ref(w.r), N: n, Key: key})
	a.wrote(0, n, w.g.sim())
}

// genUse is one use of an op being drawn.
type genUse struct {
	a      *genAlloc
	ref    Ref
	access gpumem.Access
	off, n uint64
}

func (u genUse) reads() bool  { return u.access != gpumem.Write }
func (u genUse) writes() bool { return u.access != gpumem.Read }

// pickRange draws a range of a (length ≤ maxLen): often all of it.
func (w *genWorker) pickRange(a *genAlloc, maxLen uint64) (off, n uint64) {
	maxLen = min(maxLen, a.size)
	whole := 3
	if a.size > 4*smallRange {
		whole = 12 // every byte copied costs, most of all under -race
	}
	if maxLen == a.size && w.r.IntN(whole) == 0 {
		return 0, a.size
	}
	n = 1 + w.r.Uint64N(maxLen)
	if w.r.IntN(4) != 0 && n > smallRange {
		n = 1 + w.r.Uint64N(smallRange) // keep most ops cheap
	}
	off = w.r.Uint64N(a.size - n + 1)
	return off, n
}

// enqueue draws one op over the goroutine's buffers. fail makes the op
// fail; consumeFailed picks an input range a failure left unwritten (the
// op must be skipped); thenFree frees the input right after the enqueue
// (the op must still read the bytes it was enqueued over).
func (w *genWorker) enqueue(fail failMode, consumeFailed, thenFree bool) {
	sh := shape(w.r.IntN(4))
	var in *genAlloc
	switch {
	case consumeFailed:
		in = w.pickAlloc(func(a *genAlloc) bool { return known(a) && len(a.failed) > 0 })
		if in == nil {
			fail = failError // make a failure to consume later
		} else if sh == fill {
			sh = xform
		}
	case thenFree:
		in = w.pickAlloc(func(a *genAlloc) bool { return known(a) && a.size >= 1<<20 })
		if sh == fill || sh == inplace {
			sh = xform
		}
	}
	if in == nil {
		in = w.pickAlloc(known)
	}
	if in == nil {
		return
	}
	var us []genUse
	var rots, keys []uint64
	switch sh {
	case xform, verify:
		off, n := w.pickRange(in, in.size)
		if consumeFailed && len(in.failed) > 0 {
			f := in.failed[w.r.IntN(len(in.failed))]
			off = f.lo + w.r.Uint64N(f.hi-f.lo)
			n = min(in.size-off, 1+w.r.Uint64N(smallRange))
			if thenFree || w.r.IntN(3) == 0 { // sometimes start before the failed bytes
				back := w.r.Uint64N(off + 1)
				off, n = off-back, min(in.size-(off-back), n+back)
			}
		}
		us = append(us, genUse{a: in, ref: in.ref(w.r), access: gpumem.Read, off: off, n: n})
		outs := 1 + w.r.IntN(2)
		if sh == verify {
			outs = w.r.IntN(2) // a second input, or none
		}
		for range outs {
			o := w.pickOutput(us, n)
			if o.a == nil {
				break
			}
			if sh == verify {
				o.access = gpumem.Read
			}
			us = append(us, o)
			rots = append(rots, w.r.Uint64N(n))
		}
		if sh == xform && len(us) == 1 {
			sh = verify
		}
	case inplace:
		off, n := w.pickRange(in, in.size)
		us = append(us, genUse{a: in, ref: in.ref(w.r), access: gpumem.ReadWrite, off: off, n: n})
		rots = append(rots, w.r.Uint64N(n))
	case fill:
		off, n := w.pickRange(in, in.size)
		us = append(us, genUse{a: in, ref: in.ref(w.r), access: gpumem.Write, off: off, n: n})
		keys = append(keys, w.r.Uint64())
	}
	s := w.r.IntN(w.streams())
	if thenFree && !w.g.sim() && w.r.IntN(2) == 0 {
		w.delay(s) // widen the window in which the freed input is pending
	}
	w.submit(s, sh, us, rots, keys, fail)
	if thenFree && in.live {
		for len(in.refs) > 0 && in.live {
			w.free(in)
		}
		if w.r.IntN(3) == 0 {
			w.cleanup(-1) // a cleanup while the freed input's reader is pending
		}
	}
}

// pickOutput picks an output range of length n that overlaps no range in
// us (same allocation: disjoint ranges only).
func (w *genWorker) pickOutput(us []genUse, n uint64) genUse {
	for range 4 {
		a := w.pickAlloc(func(a *genAlloc) bool { return known(a) && a.size >= n })
		if a == nil {
			return genUse{}
		}
		off := w.r.Uint64N(a.size - n + 1)
		clash := false
		for _, u := range us {
			if u.a == a && u.off < off+n && off < u.off+u.n {
				clash = true
			}
		}
		if !clash {
			return genUse{a: a, ref: a.ref(w.r), access: gpumem.Write, off: off, n: n}
		}
	}
	return genUse{}
}

// submit emits the op on stream s and applies it to the generator's model.
func (w *genWorker) submit(s int, sh shape, us []genUse, rots, keys []uint64, fail failMode) {
	// Some ops call back into the device, as a kernel allocating scratch
	// memory would (Stream.Enqueue says what an op may call).
	callsDevice := w.r.IntN(20) == 0 && !w.g.known[13]
	scratch := 1 + w.r.Uint64N(smallRange)
	op := enqueueOp{S: s, Shape: sh, Fail: fail, Rots: rots}
	if callsDevice {
		op.Calls = scratch
	}
	if len(keys) > 0 {
		op.Key = keys[0]
	}
	skipped := false
	for _, u := range us {
		if u.reads() && u.a.failed.intersects(u.off, u.off+u.n) {
			skipped = true
		}
		// Sometimes Size 0: "the rest of the buffer".
		rest := u.off+u.n == u.a.size && w.r.IntN(4) == 0
		op.Uses = append(op.Uses, use{Access: u.access, Ref: u.ref, Off: u.off, N: u.n, Rest: rest})
	}
	w.emit(op)
	for _, u := range us {
		if u.a.owner != s {
			u.a.foreign |= 1 << s
		}
		u.a.used |= 1 << s
		if !u.writes() {
			continue
		}
		if skipped || fail != succeed {
			u.a.failed = u.a.failed.add(u.off, u.off+u.n)
			continue
		}
		u.a.wrote(u.off, u.n, w.g.sim())
	}
	if fail != succeed && (w.g.known[4] || w.g.known[5]) {
		w.sync(s)
	}
}

// delay emits an op that sleeps briefly on stream s.
func (w *genWorker) delay(s int) {
	w.emit(delayOp{S: s, D: durationMicros(100 + w.r.IntN(900))})
}

// read reads a through a random handle: large buffers often through a
// mapping (no copy).
func (w *genWorker) read(a *genAlloc) {
	cfg := w.g.cfg
	if a.size > 4*smallRange && !w.g.sim() && (!cfg.device() || cfg.HostMaps) && w.r.IntN(4) != 0 {
		w.emit(readOp{Ref: a.ref(w.r), Map: true})
	} else {
		w.simSettle(a)
		w.emit(readOp{Ref: a.ref(w.r)})
	}
	if len(a.failed) == 0 {
		a.foreign = 0
	}
}

// simSettle synchronizes, on Sim under known defect 15, the streams a may
// have pending work on, so its Read or Map sees their failures.
func (w *genWorker) simSettle(a *genAlloc) {
	if w.g.sim() && w.g.known[15] {
		w.syncStreams(a.foreign | 1<<a.owner)
	}
}

func (w *genWorker) mapped(a *genAlloc) {
	w.simSettle(a)
	w.emit(mapOp{Ref: a.ref(w.r), Cleanup: w.r.IntN(3) == 0})
	if len(a.failed) == 0 {
		a.foreign = 0
	}
}

func (w *genWorker) sync(s int) { w.emit(syncOp{S: s}) }

// cleanup emits Stream.Cleanup (s ≥ 0) or Device.Cleanup (s < 0).
func (w *genWorker) cleanup(s int) {
	if s < 0 {
		w.emit(cleanupOp{})
		return
	}
	w.emit(streamCleanupOp{S: s})
}
