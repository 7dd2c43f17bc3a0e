// Graph capture on a stream (design §10).
//
// Lifecycle: PrepareCapture → warmup (the caller runs the work once) →
// BeginCapture → record (work is recorded, not run) → EndCapture → Graph
// (Launch any number of times, Close). Stream.Capture runs the whole
// sequence and cleans up on every error path.
//
//  1. Prepare relocates every stream's memory with reason Capture (room
//     MayAllocate): a recording may touch memory any stream owns, and every
//     page it touches is guarded for the graph's life, where no relocation
//     can empty it.
//  2. Priming: a buffer allocated on the capturing stream and freed while
//     Prepared keeps its slice (the device holds a binding), so the pools
//     grow to the warmup's whole working set, not its transient peak; Begin
//     releases them, and the recording finds all that room held.
//  3. While a stream records: its reservations may only use held room
//     (Forbidden), other streams may add pages but release and renumber
//     nothing (AddOnly), relocation and cleanup refuse, host syncs on the
//     recording stream doom it, and its deferred frees wait.
//  4. Sealing guards every page the recording touched, in whichever stream's
//     memory it lives, read from the current location (never a cached
//     index): a guarded page serves nothing new, is never released and never
//     relocated. Graph.Close drops the guards.
//
// A recording that could not seal marks every range it declared written, so
// later reads fail (ErrUnwritten) instead of returning bytes nothing wrote.

package gpumem

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/memory"
	"github.com/gpumem/gpumem/relocation"
	"github.com/gpumem/gpumem/stream"
)

// CaptureToken is the owner of one capture window, minted by PrepareCapture
// and passed to BeginCapture, EndCapture and AbortCapture.
type CaptureToken struct {
	s     *Stream
	owner stream.Owner
}

// captureState is what an open capture window records on its stream. It
// lives from PrepareCapture until the window closes (under the device lock).
type captureState struct {
	s        *Stream
	prepared map[*handle.Descriptor]bool // allocated on s while Prepared
	primed   []*handle.Binding           // freed while Prepared, kept until Begin
	// primedSizes are the requested sizes of the primed buffers: Begin
	// makes sure held room fits each of them again (ensurePrimedRoomLocked).
	primedSizes []uint64
	touched     []touch        // resolved by recorded ops
	written     []writtenRange // declared Write/ReadWrite by recorded ops
	// opWritten[i] is the range of written that recorded op i declared, so
	// a replayed op that fails marks only its own outputs.
	opWritten [][2]int
	opReads   [][]readRange // per recorded op, the ranges it reads
	slots     *launchSlots  // the recorded closures' launch entries (graph_writes.go)
	retained  [][]byte      // host bytes recorded copies read
}

type touch struct {
	b      *handle.Binding
	owner  *Stream
	writes bool
}

// distinctUses keeps one binding per allocation (writes if any use wrote),
// releasing the duplicates.
func distinctUses(touched []touch) []touch {
	index := make(map[*handle.Descriptor]int, len(touched))
	var out []touch
	for _, t := range touched {
		if i, ok := index[t.b.Descriptor()]; ok {
			out[i].writes = out[i].writes || t.writes
			t.b.Release()
			continue
		}
		index[t.b.Descriptor()] = len(out)
		out = append(out, t)
	}
	return out
}

type writtenRange struct {
	b        *handle.Binding
	owner    *Stream
	off, len uint64
}

// allocatedLocked notes a buffer allocated on the capturing stream during
// warmup, so its free primes its slice.
func (c *captureState) allocatedLocked(b *Buffer) {
	if c.s.capture.Phase() == stream.Prepared {
		c.prepared[b.h.Descriptor()] = true
	}
}

// freedLocked primes the slice of a warmup buffer freed while Prepared.
func (c *captureState) freedLocked(b *Buffer) {
	desc := b.h.Descriptor()
	if c.s.capture.Phase() == stream.Prepared && c.prepared[desc] {
		c.primed = append(c.primed, b.h.Binding())
		c.primedSizes = append(c.primedSizes, b.size)
		delete(c.prepared, desc)
	}
}

// touchedLocked records a buffer a recorded op resolved; the binding keeps
// its slice from reuse until the seal even if the buffer is freed.
func (c *captureState) touchedLocked(r resolved) {
	if !c.s.capture.Recording() {
		return
	}
	h := r.use.Buffer.h
	c.touched = append(c.touched, touch{b: h.Binding(), owner: r.owner, writes: r.use.Access.writes()})
	if r.use.Access.writes() {
		c.written = append(c.written, writtenRange{b: h.Binding(), owner: r.owner, off: r.use.Offset, len: r.use.Size})
	}
}

// recordedOpLocked closes the written ranges of the op just recorded and
// keeps the ranges it reads.
func (c *captureState) recordedOpLocked(rs []resolved) {
	if !c.s.capture.Recording() {
		return
	}
	var reads []readRange
	for _, r := range rs {
		if r.use.Access.reads() {
			h := r.use.Buffer.h
			reads = append(reads, readRange{d: h.Descriptor(), id: h.ID(), off: r.use.Offset, len: r.use.Size})
		}
	}
	c.opReads = append(c.opReads, reads)
	start := 0
	if n := len(c.opWritten); n > 0 {
		start = c.opWritten[n-1][1]
	}
	c.opWritten = append(c.opWritten, [2]int{start, len(c.written)})
}

// retainLocked keeps host bytes a recorded copy reads alive with the graph.
func (c *captureState) retainLocked(data []byte) {
	if c.s.capture.Recording() {
		c.retained = append(c.retained, data)
	}
}

// releasePrimedLocked releases every primed binding.
func (c *captureState) releasePrimedLocked() {
	for _, b := range c.primed {
		b.Release()
	}
	c.primed = nil
	clear(c.prepared)
}

// discardLocked releases everything the window held (no graph).
func (c *captureState) discardLocked() {
	c.releasePrimedLocked()
	for _, t := range c.touched {
		t.b.Release()
	}
	c.touched = nil
	for _, w := range c.written {
		w.b.Release()
	}
	c.written = nil
	c.retained = nil
}

// PrepareCapture opens a capture window on s and relocates every stream's
// memory (reason Capture). Run the workload once (warmup), then
// BeginCapture with the token.
func (s *Stream) PrepareCapture() (*CaptureToken, error) {
	d := s.d
	if err := d.lockUnlessBorrowed("Stream.PrepareCapture"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	if s.rec == nil {
		return nil, fmt.Errorf("%w: the %s backend's queues cannot record graphs", ErrNotSupported, d.backend.Name())
	}
	d.nextTok++
	tok := &CaptureToken{s: s, owner: d.nextTok}
	if err := s.capture.Prepare(tok.owner); err != nil {
		return nil, fmt.Errorf("gpumem: prepare capture on %s: %w", s.name, err)
	}
	s.cap = &captureState{s: s, prepared: make(map[*handle.Descriptor]bool), slots: &launchSlots{}}
	if err := relocation.RelocateDevice(streamsOf{d: d, s: s}, relocation.Capture); err != nil {
		// The relocation could not wait (an op called, or the device closed
		// meanwhile): the window closes again.
		_ = s.capture.Abort(tok.owner)
		s.cap = nil
		return nil, fmt.Errorf("gpumem: prepare capture on %s: %w", s.name, err)
	}
	if h := d.hist; h != nil {
		h.captureLocked(s, phasePrepare, uint64(tok.owner))
	}
	return tok, nil
}

// BeginCapture starts recording: from now on work enqueued on s is recorded,
// not run, until EndCapture. A refusal by the queue closes the window; prepare
// and begin can be retried.
func (s *Stream) BeginCapture(tok *CaptureToken) error {
	d := s.d
	if err := d.lockUnlessBorrowed("Stream.BeginCapture"); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if err := s.checkToken(tok); err != nil {
		return err
	}
	if h := d.hist; h != nil {
		h.captureLocked(s, phaseBegin, uint64(tok.owner))
	}
	// Checked first: a fenced wait on a stream already recording would
	// invalidate that recording.
	if len(s.deferred) > 0 && s.capture.Phase() == stream.Prepared {
		// Drained below, before the queue records: wait for them with the
		// lock released first (settle.go).
		if err := d.settleLocked(nil); err != nil {
			return fmt.Errorf("gpumem: begin capture on %s: %w", s.name, err)
		}
		if err := s.checkToken(tok); err != nil {
			return err
		}
	}
	if err := s.capture.Begin(tok.owner); err != nil {
		return fmt.Errorf("gpumem: begin capture on %s: %w", s.name, err)
	}
	s.waitDeferredLocked() // the queue does not record yet
	s.cap.releasePrimedLocked()
	s.ensurePrimedRoomLocked()
	if h := d.hist; h != nil {
		h.noteGrowthLocked(s, 0) // the primed room may have grown the arena
	}
	if err := s.rec.BeginCapture(tok.owner); err != nil {
		_, _ = s.capture.End(tok.owner)
		_ = s.capture.TakeFailure()
		s.cap.discardLocked()
		s.cap = nil
		d.counters.captures.Abandoned++
		return fmt.Errorf("gpumem: begin capture on %s: %w", s.name, err)
	}
	return nil
}

// ensurePrimedRoomLocked makes sure, before the queue records, that held
// room fits every primed buffer again: a page a primed slot lies on may have
// been guarded since (another stream's graph sealed over a buffer on it),
// and a guarded page serves nothing new. Each size is reserved from held
// room; one that does not fit is reserved with page updates allowed (the
// queue does not record yet); then all are released, leaving the room free.
func (s *Stream) ensurePrimedRoomLocked() {
	sizes := s.cap.primedSizes
	s.cap.primedSizes = nil
	var held []*handle.Handle
	for _, size := range sizes {
		h, err := s.mem.Reserve(size, memory.Forbidden)
		if err != nil {
			if h, err = s.mem.Reserve(size, memory.Allow); err != nil {
				continue // the recording will say so, if it needs the room
			}
		}
		held = append(held, h)
	}
	for _, h := range held {
		h.Release()
	}
}

// captureWindowOpenLocked reports whether any stream has a capture window
// open (prepared for warmup, or recording).
func (d *Device) captureWindowOpenLocked() bool {
	for _, t := range d.streams {
		if t.capture.Phase() != stream.NoCapture {
			return true
		}
	}
	return false
}

// checkToken refuses a nil token or one of another stream.
func (s *Stream) checkToken(tok *CaptureToken) error {
	if tok == nil || tok.s != s {
		return fmt.Errorf("%w: capture token of another stream (or nil) used on %s", ErrWrongOwner, s.name)
	}
	return nil
}

// AbortCapture closes a window that was prepared but never began,
// releasing the primed slices.
func (s *Stream) AbortCapture(tok *CaptureToken) error {
	d := s.d
	if err := d.lockUnlessBorrowed("Stream.AbortCapture"); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if err := s.checkToken(tok); err != nil {
		return err
	}
	if err := s.capture.Abort(tok.owner); err != nil {
		return fmt.Errorf("gpumem: abort capture on %s: %w", s.name, err)
	}
	if h := d.hist; h != nil {
		h.captureLocked(s, phaseAbort, uint64(tok.owner))
	}
	if s.cap != nil {
		s.cap.discardLocked()
		s.cap = nil
	}
	d.counters.captures.Abandoned++
	return nil
}

// EndCapture seals the recording into a Graph. A recording that was doomed
// (a reservation needing a page, a host sync, a cross-stream wait), ended by
// another token, or refused by the backend gives no graph: the error says
// why, and every range it declared written reads as ErrUnwritten.
func (s *Stream) EndCapture(tok *CaptureToken) (*Graph, error) {
	d := s.d
	if err := d.lockUnlessBorrowed("Stream.EndCapture"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if err := s.checkToken(tok); err != nil {
		return nil, err
	}
	if h := d.hist; h != nil {
		h.captureLocked(s, phaseEnd, uint64(tok.owner))
	}
	wasRecording := s.capture.Recording()
	owner, endErr := s.capture.End(tok.owner)
	if endErr != nil && !wasRecording {
		// No window, or one still Prepared (now aborted).
		if s.cap != nil {
			s.cap.discardLocked()
			s.cap = nil
			d.counters.captures.Abandoned++
		}
		return nil, fmt.Errorf("gpumem: end capture on %s: %w", s.name, endErr)
	}
	_ = owner
	doomed := s.capture.TakeFailure()
	exec, qerr := s.rec.EndCapture(tok.owner, doomed)
	c := s.cap
	s.cap = nil

	guards := s.guardTouchedLocked(c)
	uses := distinctUses(c.touched) // kept for the graph's life: launches order on them
	c.touched = nil
	// The deferred uses held through the recording go once their ops pass;
	// release the passed ones now and leave the rest to later calls rather
	// than wait for them under the lock.
	s.releasePassedLocked()
	s.st.releasePassed()

	// The queue's error already carries the doom and a wrong owner (it
	// saw the same token); the state machine's only when the queue has none.
	err := qerr
	if err == nil {
		err = endErr
	}
	if err != nil || exec == nil {
		if err == nil {
			err = fmt.Errorf("%w: backend sealed no graph", ErrCaptureInvalidated)
		}
		for _, g := range guards {
			g.Release()
		}
		for _, u := range uses {
			u.b.Release()
		}
		f := d.g.Fail(fmt.Errorf("gpumem: capture on %s could not seal: %w", s.name, err), "capture")
		outs := outputsOfWritten(c.written)
		for _, w := range c.written {
			_ = w.owner.mem.MarkFailure(w.b, f, w.off, w.len)
			w.b.Release()
		}
		c.written = nil
		d.markedLocked(s, "capture", outs, f)
		d.g.Prune()
		d.counters.captures.Doomed++
		return nil, fmt.Errorf("gpumem: end capture on %s: %w", s.name, err)
	}
	d.counters.captures.Sealed++
	g := &Graph{s: s, id: uint64(tok.owner), exec: exec, guards: guards, uses: uses, retained: c.retained, written: c.written}
	if _, replaysOps := exec.(*stream.OpList); replaysOps && len(c.opWritten) == exec.Len() {
		// Replays run the recorded closures: per-op records (graph_writes.go).
		g.opWritten, g.opReads, g.slots = c.opWritten, c.opReads, c.slots
	}
	return g, nil
}

// guardTouchedLocked takes one guard per distinct touched page (allocation
// guards per allocation), in the memory of the stream that owns it, at the
// current location.
func (s *Stream) guardTouchedLocked(c *captureState) []*pool.PageGuard {
	type pageKey struct {
		owner *Stream
		pool  uint8
		page  uint32
	}
	seenPage := make(map[pageKey]bool)
	seenAlloc := make(map[*handle.Descriptor]bool)
	var guards []*pool.PageGuard
	for _, t := range c.touched {
		loc := t.b.Location()
		desc := t.b.Descriptor()
		if seenAlloc[desc] {
			continue
		}
		g, ok := t.owner.mem.Guard(loc)
		if !ok {
			continue
		}
		if g.IsPageGuard() {
			k := pageKey{t.owner, loc.Pool(), loc.Page()}
			if seenPage[k] {
				g.Release()
				continue
			}
			seenPage[k] = true
		} else {
			seenAlloc[desc] = true
		}
		guards = append(guards, g)
	}
	return guards
}

// Capture runs the whole capture sequence: prepare, fn as warmup, begin, fn
// recorded, end. On every error path the window is closed and nothing is
// left guarded or primed.
func (s *Stream) Capture(ctx context.Context, fn func(context.Context, *Stream) error) (g *Graph, err error) {
	tok, err := s.PrepareCapture()
	if err != nil {
		return nil, err
	}
	defer func() {
		// fn panicked: close the window (the caller has no token to do it
		// with), then let the panic go on.
		if r := recover(); r != nil {
			s.doomCapture(fmt.Errorf("gpumem: capture function panicked: %v", r))
			if _, endErr := s.EndCapture(tok); endErr != nil && errors.Is(endErr, ErrCaptureState) {
				_ = s.AbortCapture(tok)
			}
			panic(r)
		}
	}()
	if err := fn(ctx, s); err != nil {
		return nil, errors.Join(fmt.Errorf("gpumem: capture warmup: %w", err), s.AbortCapture(tok))
	}
	if err := s.BeginCapture(tok); err != nil {
		if !errors.Is(err, ErrCaptureState) {
			return nil, err
		}
		return nil, errors.Join(err, s.AbortCapture(tok))
	}
	if err := fn(ctx, s); err != nil {
		s.doomCapture(err) // the recording is incomplete: it must not seal
		_, endErr := s.EndCapture(tok)
		return nil, errors.Join(fmt.Errorf("gpumem: capture recording: %w", err), endErr)
	}
	return s.EndCapture(tok)
}

// doomCapture marks the open recording as failed.
func (s *Stream) doomCapture(err error) {
	if err := s.d.lockUnlessBorrowed("Capture"); err != nil {
		return
	}
	defer s.d.mu.Unlock()
	s.capture.Fail(err)
}

// Graph is a sealed recording: replay it with Launch, release it with
// Close. While it lives, every page it touched is guarded.
type Graph struct {
	s        *Stream
	id       uint64 // its capture token's number: the history's graph
	exec     stream.Exec
	guards   []*pool.PageGuard
	uses     []touch // one binding per allocation the recording resolved
	retained [][]byte
	written  []writtenRange
	// opWritten[i] is the range of written recorded op i writes, opReads[i]
	// what it reads, slots the entries its closure takes at each replay; nil
	// when replays do not run the recorded closures (a driver graph).
	opWritten [][2]int
	opReads   [][]readRange
	slots     *launchSlots
	// closing is set (under the device lock) when Close begins: a Launch
	// after that point could enqueue work that outlives the bindings Close
	// is about to drop, so it is refused from then on.
	closing bool
	closed  bool // under the device lock
}

// valid refuses a nil Graph or one not made by EndCapture or Capture.
func (g *Graph) valid() error {
	if g == nil || g.s == nil || g.exec == nil {
		return fmt.Errorf("%w: nil graph, or one not made by Stream.Capture or EndCapture", ErrInvalidUse)
	}
	return nil
}

// Ops returns the number of recorded ops (0 for a zero Graph).
func (g *Graph) Ops() int {
	if g.valid() != nil {
		return 0
	}
	return g.exec.Len()
}

// Launch enqueues the recorded work on the graph's stream. A failed enqueue
// marks every range the graph writes. Once Close has begun, Launch returns
// ErrClosed: a launch never outlives the graph's bindings.
func (g *Graph) Launch(ctx context.Context) error {
	if err := g.valid(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := g.s
	d := s.d
	if err := d.lockUnlessBorrowed("Graph.Launch"); err != nil {
		return err
	}
	defer s.flushHeld() // after the unlock below: held queues run the launch now
	defer d.mu.Unlock()
	d.admitWorkLocked() // a settle may hold new work back (settle.go)
	if d.closed {
		return ErrClosed
	}
	if g.closing || g.closed {
		return fmt.Errorf("%w: the graph was closed; capture a new one", ErrClosed)
	}
	if h := d.hist; h != nil {
		h.captureLocked(s, phaseLaunch, g.id)
	}
	if err := s.refuseHostSyncLocked("Graph.Launch"); err != nil {
		return err
	}
	d.collectFailuresLocked()
	// Cross-stream ordering as for any op (X1, X2): the launch follows the
	// owners' pending uses of the buffers it touches.
	for _, u := range g.uses {
		if err := s.orderAfterLocked(u.b, u.owner); err != nil {
			return fmt.Errorf("gpumem: graph launch on %s: %w", s.name, err)
		}
	}
	before, _ := s.q.Fence()
	undo := func() {}
	if g.slots != nil {
		undo = g.prepareLaunchLocked(before.Seq)
	}
	if err := s.rec.Replay(g.exec); err != nil {
		undo()
		g.markWrittenLocked(fmt.Errorf("gpumem: graph launch on %s: %w", s.name, err))
		return err
	}
	after, err := s.q.Fence()
	if err != nil {
		return nil
	}
	// The launch is the latest use of every buffer it touches: later ops
	// on other streams order after it; its writes replace failure marks,
	// and a replayed op that fails marks again what it writes (writes.go).
	for _, w := range g.written {
		_ = w.owner.mem.ReleaseMarks(w.b, w.off, w.len)
	}
	g.recordLaunchLocked(before.Seq, after.Seq)
	for _, u := range g.uses {
		if u.owner == s {
			_ = s.mem.SetCursor(u.b, after.Seq)
		} else {
			d.foreign.note(u.b.Descriptor(), after)
		}
	}
	return nil
}

// recordLaunchLocked enters the launch's steps (before, after] as writers:
// one record per replayed op with its own outputs, or, when the steps do
// not map to recorded ops, every step writing everything the graph writes.
func (g *Graph) recordLaunchLocked(before, after uint64) {
	s := g.s
	d := s.d
	if len(g.written) == 0 || g.slots != nil {
		return // nothing written, or registered per op before the replay
	}
	all := outputsOfWritten(g.written)
	for seq := before + 1; seq <= after; seq++ {
		w := d.newWriteRecordLocked(s, "graph launch", all)
		w.seq = seq
		d.registerLocked(w)
	}
}

// markWrittenLocked marks every range the graph writes with a failure.
func (g *Graph) markWrittenLocked(err error) {
	d := g.s.d
	f := d.g.Fail(err, "launch")
	for _, w := range g.written {
		_ = w.owner.mem.MarkFailure(w.b, f, w.off, w.len)
	}
	d.markedLocked(g.s, "launch", outputsOfWritten(g.written), f)
	d.g.Prune()
}

// Close waits for the graph's stream, then drops the guards (the pages
// become ordinary: carvable, releasable, relocatable) and the retained
// bytes. It is idempotent.
func (g *Graph) Close() error {
	if err := g.valid(); err != nil {
		return err
	}
	s := g.s
	d := s.d
	if err := d.lockUnlessBorrowed("Graph.Close"); err != nil {
		return err
	}
	if g.closed {
		d.mu.Unlock()
		return nil
	}
	if err := s.refuseHostSyncLocked("Graph.Close"); err != nil {
		d.mu.Unlock()
		return err
	}
	// From here on no Launch is accepted, so the fence below covers every
	// launch there will ever be.
	f, ferr := s.q.Fence()
	if ferr == nil {
		if err := d.refuseWaitFromOpLocked(f); err != nil {
			d.mu.Unlock()
			return fmt.Errorf("gpumem: closing graph: %w", err)
		}
	}
	g.closing = true
	d.mu.Unlock()
	if ferr == nil {
		if err := s.q.Wait(context.Background(), f); err != nil && !errors.Is(err, ErrDevicePoisoned) {
			return fmt.Errorf("gpumem: closing graph: %w", err)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	if h := d.hist; h != nil {
		h.captureLocked(s, phaseClose, g.id)
	}
	for _, gd := range g.guards {
		gd.Release()
	}
	g.guards = nil
	for _, w := range g.written {
		w.b.Release()
	}
	g.written = nil
	for _, u := range g.uses {
		if u.owner != s {
			d.foreign.dropPassedOf(u.b.Descriptor(), s.q) // its launches have run (synced above)
		}
		u.b.Release()
	}
	g.uses = nil
	g.retained = nil
	// A driver graph holds device resources: destroy it now, not when the
	// stream closes.
	if c, ok := g.exec.(io.Closer); ok {
		_ = c.Close()
	}
	return nil
}
