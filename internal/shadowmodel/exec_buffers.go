package shadowmodel

// The executor's buffers: allocation, handles, writes, reads and maps, and
// the operations that may relocate them (cleanups, defragmentation), each
// checked against the shadow.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/gpumem/gpumem"
)

// alloc is one allocation as its goroutine's shadow knows it.
type alloc struct {
	id     int
	size   uint64
	owner  int
	refs   []Ref  // live handles
	data   rope   // expected bytes once init; nil on Sim
	init   bool   // written whole at least once
	failed ranges // bytes whose last writer failed or was skipped
	// foreign: streams other than the owner that enqueued work on it since
	// its last successful Read (a Read may wait on their fences; see lock).
	foreign uint64
	// used: every stream that enqueued work on it.
	used uint64
	live bool
}

// put records that x was written at off (host only): the first write of
// an allocation covers all of it (the executor voids any other).
func (a *alloc) put(off uint64, x rope) {
	if a.init {
		a.data = a.data.replace(off, x)
		return
	}
	a.data = x
}

// wrote records a successful write of [off, off+n) (x: its bytes on host).
func (a *alloc) wrote(off, n uint64, x rope, host bool) {
	if host {
		a.put(off, x)
	}
	a.failed = a.failed.sub(off, off+n)
	if off == 0 && n == a.size || !host {
		a.init = true
	}
}

// handle returns the allocation and buffer of a live handle, or nils.
func (w *worker) handle(r Ref) (*alloc, gpumem.Buffer) {
	a := w.allocs[r.Alloc]
	if a == nil || !a.live || !slices.Contains(a.refs, r) {
		return nil, gpumem.Buffer{}
	}
	return a, w.bufs[r]
}

// allocErr classifies an Alloc error: out of memory where explainable,
// exhausted page sizes (64 outdated pools pinned, possible when relocations
// are refused or pages guarded); anything else is a violation.
func (w *worker) allocErr(what string, size uint64, err error) {
	switch {
	case errors.Is(err, gpumem.ErrOutOfMemory) && w.run.oomOK:
		w.run.ooms.Add(1)
	case errors.Is(err, gpumem.ErrPageSizesExhausted):
	case errors.Is(err, gpumem.ErrOutOfMemory):
		w.fail("%s of %d bytes: %v (no capacity and no injected fault explains it)", what, size, err)
	default:
		w.fail("%s of %d bytes: unexpected error %v", what, size, err)
	}
}

func (op allocOp) run(w *worker) {
	run := w.run
	unlock := w.lock(op.S)
	st := run.streams[op.S]
	var closeWindow func()
	if op.Mode != auto {
		closeWindow = st.Window(op.Mode.memory())
	}
	b, err := st.Alloc(bg, op.Size)
	if closeWindow != nil {
		closeWindow()
		closeWindow() // idempotent: must not close another goroutine's window
	}
	unlock()
	run.pulse()
	if err != nil {
		w.log.note(err.Error())
		w.allocErr("Alloc", op.Size, err)
		return
	}
	if b.Size() != op.Size || b.Stream() != st {
		w.fail("Alloc(%d) on stream %d returned a buffer of %d bytes on %s", op.Size, op.S, b.Size(), b.Stream().Name())
	}
	a := &alloc{id: op.A.Alloc, size: op.Size, owner: op.S, refs: []Ref{op.A}, live: true}
	w.allocs[a.id] = a
	w.live = append(w.live, a)
	w.bufs[op.A] = b
	w.log.note(fmt.Sprintf("buffer %d", b.ID()))
}

func (op freeOp) run(w *worker) {
	a, b := w.handle(op.Ref)
	if a == nil {
		w.void("%s is not live", op.Ref)
		return
	}
	w.free(a, b, op.Ref)
}

// free frees handle r of a; the last one frees the allocation.
func (w *worker) free(a *alloc, b gpumem.Buffer, r Ref) {
	err := b.Free()
	w.run.pulse()
	if err != nil {
		w.fail("Free of a live handle %s: %v", r, err)
	}
	a.refs = slices.DeleteFunc(a.refs, func(x Ref) bool { return x == r })
	if len(a.refs) == 0 {
		a.live = false
		w.live = slices.DeleteFunc(w.live, func(x *alloc) bool { return x == a })
	}
}

func (op cloneOp) run(w *worker) {
	a, b := w.handle(op.From)
	if a == nil {
		w.void("%s is not live", op.From)
		return
	}
	c := b.Clone()
	w.run.pulse()
	if c.IsZero() {
		w.fail("Clone of a live handle of a%d returned nil", a.id)
		return
	}
	if c.Size() != a.size || c.ID() != b.ID() {
		w.fail("Clone of a%d: size %d id %d, want %d and %d", a.id, c.Size(), c.ID(), a.size, b.ID())
	}
	w.bufs[op.To] = c
	a.refs = append(a.refs, op.To)
}

func (op writeOp) run(w *worker) {
	a, b := w.handle(op.Ref)
	host := !w.run.sim()
	switch {
	case a == nil:
		w.void("%s is not live", op.Ref)
		return
	case op.N == 0 || op.N > a.size:
		w.void("a write of %d bytes into a%d of %d", op.N, a.id, a.size)
		return
	case host && !a.init && op.N != a.size:
		w.void("a partial write of a%d, never written whole", a.id)
		return
	}
	var pat rope
	var data []byte
	if host {
		pat = w.run.base.pat(op.Key, op.N)
		data = pat[0].bytes() // a window of the base: no copy
	} else {
		data = make([]byte, op.N)
	}
	unlock := w.lock(a.owner)
	err := b.Write(bg, data)
	unlock()
	w.run.pulse()
	if err != nil {
		w.fail("Write of %d bytes into a%d: %v", op.N, a.id, err)
		return
	}
	a.wrote(0, op.N, pat, host)
}

func (op readOp) run(w *worker) {
	a, b := w.handle(op.Ref)
	if a == nil {
		w.void("%s is not live", op.Ref)
		return
	}
	if op.Map {
		w.readMapped(a, b, "Read (Map)")
		return
	}
	w.read(a, b, "Read")
}

// read reads a through b and compares with the shadow.
func (w *worker) read(a *alloc, b gpumem.Buffer, why string) {
	unlock := w.lockMask(a.foreign | 1<<a.owner)
	got, err := b.Read(bg)
	unlock()
	w.run.pulse()
	if w.checkRead(a, got, err, why) {
		a.foreign = 0
	}
}

// readMapped checks a through a mapping: no copy.
func (w *worker) readMapped(a *alloc, b gpumem.Buffer, why string) {
	unlock := w.lockMask(a.foreign | 1<<a.owner)
	m, err := b.Map(bg)
	unlock()
	w.run.pulse()
	var got []byte
	if err == nil {
		got = m.Bytes()
	}
	if w.checkRead(a, got, err, why) {
		a.foreign = 0
	}
	if err == nil {
		m.Release()
	}
}

// verify reads a through a handle the executor picks: large buffers often
// through a mapping, as the generator's reads.
func (w *worker) verify(a *alloc, why string) {
	r := a.refs[w.pick(len(a.refs), uint64(a.id))]
	b := w.bufs[r]
	w.log.add(fmt.Sprintf("\t%s %s (%d bytes, %d failed ranges)", why, r, a.size, len(a.failed)))
	cfg := w.run.cfg
	if a.size > 4*smallRange && !w.run.sim() && (!cfg.device() || cfg.HostMaps) && w.pick(4, uint64(a.id)<<8) != 0 {
		w.readMapped(a, b, why+" (Map)")
		return
	}
	w.read(a, b, why)
}

// checkRead checks what a Read (or Map) returned against the shadow and
// reports whether it returned the bytes.
func (w *worker) checkRead(a *alloc, got []byte, err error, why string) bool {
	if err != nil {
		w.log.note(err.Error())
	}
	if len(a.failed) > 0 {
		if !errors.Is(err, gpumem.ErrUnwritten) {
			w.fail("%s of a%d returned %v; want ErrUnwritten: the last writer of bytes %v failed or was skipped", why, a.id, errOrBytes(err), a.failed)
		}
		return false
	}
	if w.run.sim() {
		if a.size == 0 && err == nil || errors.Is(err, gpumem.ErrNotSupported) {
			return true
		}
		w.fail("%s of a%d on Sim: %v; want ErrNotSupported (no byte is marked)%s", why, a.id, err, unwrittenHint(err))
		return false
	}
	if err != nil {
		w.fail("%s of a%d: %v; no byte's last writer failed%s", why, a.id, err, unwrittenHint(err))
		return false
	}
	if uint64(len(got)) != a.size {
		w.fail("%s of a%d: %d bytes, want %d", why, a.id, len(got), a.size)
		return false
	}
	if a.init && !a.data.equal(got) {
		w.fail("%s of a%d (owner stream %d): bytes differ from the shadow: %s", why, a.id, a.owner, diff(got, a.data.materialize()))
		return false
	}
	if a.init {
		w.run.compared.Add(a.size)
	}
	return true
}

func errOrBytes(err error) string {
	if err == nil {
		return "the bytes (nil error)"
	}
	return err.Error()
}

func unwrittenHint(err error) string {
	if errors.Is(err, gpumem.ErrUnwritten) {
		return " (a spurious ErrUnwritten: cf. defects 4 and 6)"
	}
	return ""
}

// diff describes how got differs from want.
func diff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	first, n := -1, 0
	for i := range got {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			n++
		}
	}
	zeros := bytes.Count(got, []byte{0})
	junk := bytes.Count(got, []byte{junkByte})
	return fmt.Sprintf("%d of %d bytes differ, first at %d (got %#x want %#x); %d zero bytes, %d 0xEE bytes (a failing op's junk)",
		n, len(got), first, got[max(first, 0)], want[max(first, 0)], zeros, junk)
}

// mapped maps a, compares, optionally runs a cleanup while the mapping is
// held (the mapped page must not move), compares again, releases.
func (op mapOp) run(w *worker) {
	a, b := w.handle(op.Ref)
	if a == nil {
		w.void("%s is not live", op.Ref)
		return
	}
	unlock := w.lockMask(a.foreign | 1<<a.owner)
	m, err := b.Map(bg)
	unlock()
	w.run.pulse()
	if err != nil {
		if w.checkRead(a, nil, err, "Map") {
			a.foreign = 0
		}
		return
	}
	if !w.checkRead(a, m.Bytes(), nil, "Map") {
		m.Release()
		return
	}
	a.foreign = 0
	if op.Cleanup {
		w.cleanup(-1)
		w.checkRead(a, m.Bytes(), nil, "mapping after Cleanup")
	}
	m.Release()
	m.Release() // idempotent
}

func (op syncOp) run(w *worker) { w.sync(op.S) }

func (w *worker) sync(s int) {
	unlock := w.lock(s)
	err := w.run.streams[s].Synchronize(bg)
	unlock()
	w.run.pulse()
	if err != nil {
		w.fail("Synchronize stream %d: %v", s, err)
	}
}

func (op streamCleanupOp) run(w *worker) { w.cleanup(op.S) }
func (cleanupOp) run(w *worker)          { w.cleanup(-1) }
func (verifyOp) run(w *worker)           { w.checkRelocated("periodic") }

// cleanup runs Stream.Cleanup (s ≥ 0) or Device.Cleanup (s < 0), then
// verifies the goroutine's buffers if a relocation moved anything.
func (w *worker) cleanup(s int) {
	run := w.run
	epoch := run.captureEpoch.Load()
	var err error
	if s < 0 {
		err = run.d.Cleanup(bg)
	} else {
		err = run.streams[s].Cleanup(bg)
	}
	run.pulse()
	if err != nil {
		w.log.note(err.Error())
		if !errors.Is(err, gpumem.ErrRecording) || !run.captureMayRecord(epoch) {
			w.fail("Cleanup: %v", err)
		}
		return
	}
	w.checkRelocated("Cleanup")
}

// run runs Device.Defragment, then verifies the goroutine's buffers if
// anything moved. The result must agree with the limits.
func (op defragmentOp) run(w *worker) {
	run := w.run
	epoch := run.captureEpoch.Load()
	opts := gpumem.DefragOptions{MaxMoves: op.Moves, MaxBytes: op.Bytes}
	res, err := run.d.Defragment(bg, opts)
	run.pulse()
	if err != nil {
		w.log.note(err.Error())
		if !errors.Is(err, gpumem.ErrRecording) || !run.captureMayRecord(epoch) {
			w.fail("Defragment: %v", err)
		}
		return
	}
	if opts.MaxMoves > 0 && res.Moves > uint64(opts.MaxMoves) {
		w.fail("Defragment %+v moved %d allocations", opts, res.Moves)
	}
	if opts.MaxBytes > 0 && res.BytesMoved > opts.MaxBytes {
		w.fail("Defragment %+v moved %d bytes", opts, res.BytesMoved)
	}
	if res.Moves > 0 && res.PagesFreed == 0 {
		w.fail("Defragment moved %d allocations and gave no page back", res.Moves)
	}
	w.checkRelocated("Defragment")
}

// checkRelocated verifies every buffer of the goroutine when a relocation
// moved something since the last check.
func (w *worker) checkRelocated(why string) {
	moves := w.run.d.Stats().Relocation.Moves
	if moves == w.seenMoves {
		return
	}
	w.seenMoves = moves
	w.run.relocVerifies.Add(1)
	for _, a := range slices.Clone(w.live) {
		if w.run.stop.Load() {
			return
		}
		w.verify(a, "verify after relocation ("+why+")")
	}
}

func (op statsOp) run(w *worker) {
	run := w.run
	run.checkStats(w.id, w.at, run.d.Stats())
	if op.Report {
		run.checkReport(w.id, w.at, run.d.Report())
	}
	run.pulse()
}

// run changes the shadow's expectation of one byte: the model's own test
// that a divergence is found and reported (never generated).
func (op mispredictOp) run(w *worker) {
	a := w.allocs[op.A.Alloc]
	if a == nil || !a.live || !a.init || w.run.sim() || op.Off >= a.size {
		w.void("nothing to mispredict at a%d[%d]", op.A.Alloc, op.Off)
		return
	}
	want := a.data.slice(op.Off, op.Off+1).materialize()
	a.data = a.data.replace(op.Off, rope{{src: []byte{^want[0]}, n: 1}})
}
