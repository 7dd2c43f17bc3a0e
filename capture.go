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
//  2. Rehearsal: the device notes the warmup's allocations and frees on the
//     capturing stream, in order; Begin runs that sequence once more against
//     the stream's memory, pages allowed and nothing released (AddOnly),
//     before the queue records. The pools then hold room laid out for the
//     recording that repeats the warmup: its transient peak, not its whole
//     working set. That room stays bound for the recording (a held room,
//     memory.RecordingRoom) until the seal: between Begin and each of the
//     recording's allocations the device lock goes, and free room would be
//     anyone's meanwhile — another graph sealing over a buffer on the page
//     guards it, and a guarded page serves nothing new. Each allocation of
//     the recording takes the bytes its rehearsal counterpart took.
//  3. While a stream records: its reservations may only use held room
//     (Forbidden), other streams may add pages but release and renumber
//     nothing (AddOnly), relocation and cleanup refuse, host syncs on the
//     recording stream doom it, and its deferred frees wait. A buffer the
//     recording allocated and frees again, used by nothing but the
//     recording's own ops, gives its slice back to the recording's later
//     allocations (stream-ordered reuse: the graph runs its ops in recorded
//     order, so every use of the freed buffer precedes every use of the
//     next one), through the held room, and its room is held at the seal.
//  4. Sealing guards every page the recording touched, in whichever stream's
//     memory it lives, read from the current location (never a cached
//     index): a guarded page serves nothing new, is never released and never
//     relocated. Room the recording gave back to itself is held instead
//     (its free parts bound, capture_reuse.go), so what a launch writes
//     stays the graph's while the rest of its page serves. Graph.Close
//     drops the guards and the held room.
//
// A recording that could not seal marks every range it declared written, so
// later reads fail (ErrUnwritten) instead of returning bytes nothing wrote.

package gpumem

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/gpumem/gpumem/internal/capture"
	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
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
	s *Stream
	// rehearsal is the warmup's allocations and frees on s, in order;
	// warm maps a buffer allocated on s while Prepared, not yet freed, to
	// its allocation's number in it. Begin runs the sequence again
	// (rehearseLocked).
	rehearsal []rehearsalStep
	allocs    int
	warm      map[*handle.Descriptor]int
	// rehearsalRefused is the first reservation the rehearsal could not
	// make (the storage refused a page, or the device was full): a
	// recording that then finds no held room says why (Stream.Alloc).
	rehearsalRefused error
	// room holds, from the rehearsal until the seal, the bytes the
	// rehearsal's last run placed the warmup's allocations on, so that no
	// other goroutine's call (another graph's seal guarding the page, above
	// all) can take them before the recording's allocations do; given
	// holds the slices of recorded buffers whose room went back to the
	// recording, given back to room once their buffer's free completes
	// (giveBackLocked). nil: nothing held (no rehearsal, or its room could
	// not be held), and the recording finds free room as it may.
	room  *memory.RecordingRoom
	given []handle.Location
	// recorded maps a buffer allocated on s while Recording to the window's
	// bindings of it (touched and written): when its last reference goes
	// and nothing else binds it, they are released and its slice serves
	// the recording again (freedLocked). returned lists the pages such room
	// lies on, for the seal to guard.
	recorded map[*handle.Descriptor]*recordedBuffer
	returned []returnedRoom
	touched  []touch        // resolved by recorded ops
	written  []writtenRange // declared Write/ReadWrite by recorded ops
	// opWritten[i] is the range of written that recorded op i declared, so
	// a replayed op that fails marks only its own outputs.
	opWritten [][2]int
	opReads   [][]readRange // per recorded op, the ranges it reads
	slots     *launchSlots  // the recorded closures' launch entries (graph_writes.go)
	retained  [][]byte      // host bytes recorded copies read
}

// rehearsalStep is one step of the warmup: an allocation of size bytes
// (free < 0), or the free of allocation number free. keep marks a free
// whose counterpart in the recording will not give its slice back (its
// pool guards allocations, not pages, or something besides the buffer
// bound it): the rehearsal holds that room to its end, as the recording
// will to its seal.
type rehearsalStep struct {
	size uint64
	free int
	keep bool
}

type touch struct {
	b      *handle.Binding
	owner  *Stream
	writes bool
}

// distinctUses keeps one binding per allocation (writes if any use wrote),
// releasing the duplicates and skipping the bindings a recorded buffer's
// free released already.
func distinctUses(touched []touch) []touch {
	index := make(map[*handle.Descriptor]int, len(touched))
	var out []touch
	for _, t := range touched {
		if t.b.Released() {
			continue
		}
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

// writtenRange is a range a recorded op declared written. Its binding is
// released early when the buffer's room went back to the recording
// (freedLocked); the descriptor it names still identifies the range's
// writes at each launch (a later recorded op reading it depends on them),
// but no mark is placed or cleared through it: nothing can read the
// bytes of a freed buffer.
type writtenRange struct {
	b        *handle.Binding
	owner    *Stream
	off, len uint64
}

// allocatedLocked notes a buffer allocated on the capturing stream: during
// warmup as a rehearsal step, while recording as the recording's own.
func (c *captureState) allocatedLocked(b Buffer) {
	// The window and the graph it seals key on what they see for as long
	// as they live: the device keeps those descriptors (H6).
	b.h.Descriptor().Keep()
	switch c.s.capture.Phase() {
	case capture.Prepared:
		c.warm[b.h.Descriptor()] = c.allocs
		c.allocs++
		c.rehearsal = append(c.rehearsal, rehearsalStep{size: b.size, free: -1})
	case capture.Recording:
		c.recorded[b.h.Descriptor()] = &recordedBuffer{size: b.size}
	}
}

// freedLocked is told of b's free before its handle goes. The free of the
// last user reference of a warmup buffer is a rehearsal step; that of a
// buffer the recording allocated, which nothing but the window's own
// bindings holds (no mapping, hold, graph or other stream's pending use)
// and whose pool guards whole pages, releases those bindings, so the slice
// serves the recording's later allocations on s (given to the room held
// for the recording once b's handle went: giveBackLocked), and notes its
// page for the seal to hold. Every use of b is a recorded op enqueued before
// this free and every use of what takes the slice next one enqueued after,
// and a graph runs its ops in recorded order on one queue (a cross-stream
// wait dooms the recording), so at each launch the two never overlap.
func (c *captureState) freedLocked(b Buffer) {
	desc := b.h.Descriptor()
	if desc.Handles() > 2 {
		return // another user reference (a Clone) keeps the buffer
	}
	switch c.s.capture.Phase() {
	case capture.Prepared:
		if i, ok := c.warm[desc]; ok {
			keep := desc.Refs() != 2 || !c.s.mem.GuardsWholePage(desc.Location())
			c.rehearsal = append(c.rehearsal, rehearsalStep{free: i, keep: keep})
			delete(c.warm, desc)
		}
	case capture.Recording:
		r, ok := c.recorded[desc]
		if !ok {
			return
		}
		delete(c.recorded, desc)
		if c.returnRoomLocked(b, r) && c.room != nil { // else kept bound until the seal, as any touched buffer
			c.given = append(c.given, desc.Location())
		}
	}
}

// giveBackLocked hands the room of the recorded buffers just freed back to
// the recording's held room (Buffer.Free calls it once the buffer's last
// reference went): free room would be anyone's until the recording's next
// allocation, which the rehearsal placed there.
func (c *captureState) giveBackLocked() {
	for _, loc := range c.given {
		c.room.Give(loc)
	}
	c.given = c.given[:0]
}

// releaseRoomLocked lets go of the room held for the recording: from the
// seal on, what its graph writes is guarded or held by the graph itself.
func (c *captureState) releaseRoomLocked() {
	if c.room != nil {
		c.room.Release()
		c.room = nil
	}
	c.given = nil
}

// touchedLocked records a buffer a recorded op resolved; the binding keeps
// its slice from reuse until the seal even if the buffer is freed.
func (c *captureState) touchedLocked(r resolved) {
	if !c.s.capture.Recording() {
		return
	}
	h := r.use.Buffer.h
	h.Descriptor().Keep() // as allocatedLocked
	t := touch{b: h.Binding(), owner: r.owner, writes: r.use.Access.writes()}
	c.touched = append(c.touched, t)
	rb := c.recorded[h.Descriptor()]
	if rb != nil {
		rb.bs = append(rb.bs, t.b)
	}
	if r.use.Access.writes() {
		w := writtenRange{b: h.Binding(), owner: r.owner, off: r.use.Offset, len: r.use.Size}
		c.written = append(c.written, w)
		if rb != nil {
			rb.bs = append(rb.bs, w.b)
		}
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

// endWarmupLocked forgets the warmup's buffers still live: their frees are
// no rehearsal steps.
func (c *captureState) endWarmupLocked() {
	clear(c.warm)
}

// discardLocked releases everything the window held (no graph).
func (c *captureState) discardLocked() {
	c.endWarmupLocked()
	c.rehearsal = nil
	c.releaseRoomLocked()
	for _, t := range c.touched {
		if !t.b.Released() {
			t.b.Release()
		}
	}
	c.touched = nil
	for _, w := range c.written {
		if !w.b.Released() {
			w.b.Release()
		}
	}
	c.written = nil
	c.retained = nil
	clear(c.recorded)
	c.returned = nil
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
	s.cap = &captureState{s: s, warm: make(map[*handle.Descriptor]int), recorded: make(map[*handle.Descriptor]*recordedBuffer), slots: &launchSlots{}}
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
	if len(s.deferred) > 0 && s.capture.Phase() == capture.Prepared {
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
	s.cap.endWarmupLocked()
	s.rehearseLocked()
	if h := d.hist; h != nil {
		h.noteGrowthLocked(s, 0) // the rehearsal may have grown the arena
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

// rehearseLocked runs the warmup's allocations and frees on s once more,
// before the queue records, with pages allowed but nothing released
// (AddOnly), after one periodic cleanup, lets go of its holds, and then
// holds for the recording the bytes its last run placed the allocations on
// (s.cap.room). The recording, which may only use held room, repeats
// the warmup, and each of its allocations takes from that room the bytes
// its counterpart took. Left free, the room would be anyone's once Begin
// lets go of the device lock: another graph sealing over a buffer on the
// same page guards the page, which then serves nothing new (R7, design
// §10.2). The warmup alone would not do: it began with less
// room than the recording starts with (the pages it added), so first fit
// placed some of its buffers elsewhere than the recording will, and a page
// it used may since have been guarded (another stream's graph sealed over
// a buffer on it), which serves nothing new. A reservation the storage
// refuses is skipped: the recording will say so if it needs that room.
//
// A refusal may be the layout's fault rather than the device's: the pages
// the rehearsal starts on were laid out by what ran before the window, and
// the room they hold in holes no size of the sequence fits is what the
// refused page lacked. Then, where releases are allowed (no other stream
// records), the rehearsal lets go of its holds, gives back s's empty pages
// (an explicit cleanup of s's memory, as make-room's first stage would on
// a refused Allow reservation: nothing records yet) and runs once more,
// adding pages in the sequence's own order (design §10.2).
func (s *Stream) rehearseLocked() {
	steps := s.cap.rehearsal
	s.cap.rehearsal, s.cap.allocs = nil, 0
	if len(steps) == 0 {
		return
	}
	var refused error
	var placed []memory.RoomStep
	if s.d.otherRecordsLocked(s) {
		placed, refused = s.rehearseSettledLocked(steps)
	} else {
		// What an Allow reservation would give back first (outdated pages
		// the warmup emptied): the recording can use none of it, and with
		// nothing released during the rehearsal it would stay held beside
		// the pages the rehearsal adds. Not while another stream records:
		// that forbids releases on every stream.
		s.mem.Cleanup(pool.Periodic)
		placed, refused = s.rehearseSettledLocked(steps)
		if memory.MaySucceedAfterReclaim(refused) {
			// Only a refusal that giving memory back can cure: a buffer too
			// large for any page, or a poisoned device, is refused again.
			s.mem.Cleanup(pool.Explicit)
			if h := s.d.hist; h != nil {
				h.cleanupLocked(s, false)
			}
			placed, refused = s.rehearseSettledLocked(steps)
		}
	}
	s.cap.rehearsalRefused = refused
	// The lock goes when Begin returns, and another goroutine's call may
	// then reach the room the last run laid out before the recording's
	// reservation does: hold it. A refusal leaves it free, as before.
	if room, err := s.mem.HoldRoom(placed); err == nil {
		s.cap.room = room
	} else {
		s.d.log.Warn("gpumem: the room the rehearsal laid out could not be held for the recording", "stream", s.name, "err", err)
	}
}

// rehearseSettledLocked runs steps until a run adds no storage, at most
// maxRehearsals times, and returns the last run's placements and refusal.
// A run that added storage started from fewer pages than the recording
// will: the arena carves from the tightest page (pool PL33), and a page
// added late in one run, empty at the start of the next, may be the
// tightest for an early reservation there. The recording takes the last
// run's placements from the room held for it (RecordingRoom), so a run
// that settles leaves that room on the fewest pages. A refused run is not
// repeated (rehearseLocked decides what follows).
func (s *Stream) rehearseSettledLocked(steps []rehearsalStep) ([]memory.RoomStep, error) {
	for run := 1; ; run++ {
		before := s.mem.BytesAllocated()
		placed, refused := s.rehearseOnceLocked(steps)
		if refused != nil || run == maxRehearsals || s.mem.BytesAllocated() <= before {
			return placed, refused
		}
	}
}

// maxRehearsals bounds the runs of one rehearsal (rehearseSettledLocked).
// Each run only adds pages, so the runs settle; a sequence that still adds
// on its last run leaves the recording to find what it can.
const maxRehearsals = 4

// rehearseOnceLocked runs steps once (AddOnly), lets go of every hold, and
// returns where each allocation was placed, in order, and the first
// reservation the storage refused (nil: none).
func (s *Stream) rehearseOnceLocked(steps []rehearsalStep) ([]memory.RoomStep, error) {
	var refused error
	held := make([]*handle.Handle, 0, len(steps))
	placed := make([]memory.RoomStep, 0, len(steps))
	for _, st := range steps {
		if st.free >= 0 {
			if h := held[st.free]; h != nil && !st.keep {
				h.Release()
				held[st.free] = nil
			}
			continue
		}
		h, err := s.mem.Reserve(st.size, memory.AddOnly, pool.Bind{})
		if err != nil {
			h = nil
			if refused == nil {
				refused = fmt.Errorf("%d bytes: %w", st.size, err)
			}
			placed = append(placed, memory.RoomStep{Size: st.size})
		} else {
			placed = append(placed, s.mem.Placement(h, st.size))
		}
		held = append(held, h)
	}
	for _, h := range held {
		if h != nil {
			h.Release()
		}
	}
	return placed, refused
}

// otherRecordsLocked reports whether a stream other than s records (s's own
// window may already be in phase Recording while its queue does not record
// yet, as during Begin).
func (d *Device) otherRecordsLocked(s *Stream) bool {
	for _, t := range d.streams {
		if t != s && t.capture.Recording() {
			return true
		}
	}
	return false
}

// captureWindowOpenLocked reports whether any stream has a capture window
// open (prepared for warmup, or recording).
func (d *Device) captureWindowOpenLocked() bool {
	for _, t := range d.streams {
		if t.capture.Phase() != capture.NoCapture {
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
// discarding its rehearsal.
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

	// Live buffers on room the recording reused: what each launch
	// overwrites, or a recorded read of it that refuses the seal
	// (capture_reuse.go).
	scratch, overlapUses, rerr := c.liveOverlapsLocked()
	guards, held := s.guardTouchedLocked(c)
	// After the guards and holds: room a launch writes stays the graph's.
	c.releaseRoomLocked()
	uses := distinctUses(append(c.touched, overlapUses...)) // kept for the graph's life: launches order on them
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
	if err == nil && rerr != nil {
		err = rerr
		if cl, ok := exec.(io.Closer); ok {
			_ = cl.Close() // sealed by the backend, refused here
		}
		exec = nil
	}
	if err != nil || exec == nil {
		if err == nil {
			err = fmt.Errorf("%w: backend sealed no graph", ErrCaptureInvalidated)
		}
		for _, g := range guards {
			g.Release()
		}
		for _, b := range held {
			b.Release()
		}
		for _, u := range uses {
			u.b.Release()
		}
		f := d.g.Fail(fmt.Errorf("gpumem: capture on %s could not seal: %w", s.name, err), "capture")
		outs := outputsOfWritten(c.written)
		for _, w := range c.written {
			if w.b.Released() {
				continue // a recorded buffer freed in the window: nobody reads it
			}
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
	g := &Graph{s: s, id: uint64(tok.owner), exec: exec, guards: guards, uses: uses, retained: c.retained, written: c.written, scratch: scratch, held: held}
	if _, replaysOps := exec.(*hostqueue.OpList); replaysOps && len(c.opWritten) == exec.Len() {
		// Replays run the recorded closures: per-op records (graph_writes.go).
		g.opWritten, g.opReads, g.slots = c.opWritten, c.opReads, c.slots
	}
	return g, nil
}

// guardTouchedLocked takes one guard per distinct touched page (allocation
// guards per allocation), in the memory of the stream that owns it, at the
// current location, and one per page on which a recorded buffer's room went
// back to the recording (those lie in s's memory; nothing renumbers its
// pages while it records).
func (s *Stream) guardTouchedLocked(c *captureState) (guards []*pool.PageGuard, held []*handle.Binding) {
	type pageKey struct {
		owner *Stream
		pool  uint8
		page  uint32
	}
	seenPage := make(map[pageKey]bool)
	seenAlloc := make(map[*handle.Descriptor]bool)
	for _, r := range c.returned {
		// The recording gave this room back to itself: a launch writes it,
		// so nothing new may be placed there while the graph lives. Its free
		// parts are held (bound slices of their own); the rest of the page
		// serves as usual. Should that fail (a granule the storage would not
		// map), the whole page is guarded instead.
		loc := handle.MustLocation(r.pool, int(r.page), 0)
		if bs, err := s.mem.HoldFree(loc, r.region); err == nil {
			held = append(held, bs...)
			continue
		}
		k := pageKey{s, r.pool, r.page}
		if seenPage[k] {
			continue
		}
		if g, ok := s.mem.Guard(loc); ok {
			seenPage[k] = true
			guards = append(guards, g)
		}
	}
	c.returned = nil
	for _, t := range c.touched {
		if t.b.Released() {
			continue
		}
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
	return guards, held
}

// Capture runs the whole capture sequence: prepare, fn as warmup, begin, fn
// recorded, end. On every error path the window is closed and nothing is
// left guarded or held.
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
	// scratch are bytes of live buffers each launch overwrites with an
	// earlier buffer's (capture_reuse.go): marked at every launch. held
	// binds the free parts of room the recording reused, which launches
	// write: released at Close.
	scratch []scratchRange
	held    []*handle.Binding
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
		if !w.b.Released() {
			_ = w.owner.mem.ReleaseMarks(w.b, w.off, w.len)
		}
	}
	g.markScratchLocked()
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
		if !w.b.Released() {
			_ = w.owner.mem.MarkFailure(w.b, f, w.off, w.len)
		}
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
	for _, b := range g.held {
		b.Release()
	}
	g.held = nil
	for _, w := range g.written {
		if !w.b.Released() {
			w.b.Release()
		}
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
