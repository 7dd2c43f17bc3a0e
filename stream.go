package gpumem

import (
	"context"
	"fmt"

	"github.com/gpumem/gpumem/internal/capture"
	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// Stream is an ordered asynchronous work queue with its own memory. Work on
// one stream runs in order; two streams may overlap, and the device orders
// them where they share a buffer.
type Stream struct {
	d     *Device
	index int
	name  string
	q     stream.Queue
	rec   stream.Recorder // q as a recorder; nil when the backend's queues cannot record
	mem   *memory.Manager
	st    *countedStorage
	// self is streamsOf{d, s} as a relocation.Streams, made once so the
	// allocation fast path does not box it anew on every Alloc.
	self relocation.Streams

	// Guarded by d.mu:
	capture  capture.State
	deferred []deferredUse  // bindings of foreign buffers, in seq order
	pending  []*writeRecord // ops that write, not yet known complete, in seq order (writes.go)
	cap      *captureState  // the open capture window's records, nil outside one
}

// deferredUse keeps a foreign buffer's slice from reuse until this stream
// completes the op that used it (X1).
type deferredUse struct {
	b     *handle.Binding
	seq   uint64
	owner *Stream
}

// output is one written range of an op, kept until the op is known to have
// completed, so a failure can mark exactly the bytes it left unwritten.
type output struct {
	d        *handle.Descriptor
	owner    *Stream
	off, len uint64
	// freed: the range belongs to a buffer the recording freed and whose
	// room went back to it (capture_reuse.go). It still orders the ops
	// that read it, but no failure is marked through it: nobody can read
	// those bytes, and its descriptor may still name the free slice.
	freed bool
}

// descRef lets a bare descriptor be looked up (identity-checked) without
// counting as a reference: an op's outputs must not keep slices from reuse.
type descRef struct{ d *handle.Descriptor }

func (r descRef) Descriptor() *handle.Descriptor { return r.d }

// Name returns the stream's name ("stream-0", …).
func (s *Stream) Name() string { return s.name }

// Device returns the stream's device.
func (s *Stream) Device() *Device { return s.d }

// Queue returns the stream's queue.
func (s *Stream) Queue() stream.Queue { return s.q }

// Access says how an op uses a buffer.
type Access uint8

const (
	// Read: the op reads the range.
	Read Access = iota
	// Write: the op writes the whole range.
	Write
	// ReadWrite: both.
	ReadWrite
)

func (a Access) reads() bool  { return a != Write }
func (a Access) writes() bool { return a != Read }

// Use declares one buffer range an op touches. Size 0 means the rest of the
// buffer from Offset.
type Use struct {
	Buffer Buffer
	Access Access
	Offset uint64
	Size   uint64
}

// Window opens a mode window (Persistent or Dedicated) for the stream's next
// allocations; calling the returned function closes it. Windows nest.
func (s *Stream) Window(mode Mode) (closeWindow func()) {
	m := mode.internal()
	borrowed := s.d.lockOrBorrow()
	s.mem.SetMode(m)
	if h := s.d.hist; h != nil {
		h.windowLocked(s, m)
	}
	s.d.unlock(borrowed)
	closed := false
	return func() {
		borrowed := s.d.lockOrBorrow()
		defer s.d.unlock(borrowed)
		if !closed {
			closed = true
			s.mem.SetMode(memory.Auto)
			if h := s.d.hist; h != nil {
				h.windowLocked(s, memory.Auto)
			}
		}
	}
}

// Enqueue submits an op over the buffers it uses. Every buffer is resolved
// now, under the device lock, and run receives the resolved windows in the
// order of uses; it runs later on the stream's executor and must not keep
// them (on WithSim it runs before Enqueue returns, after the lock is
// released; an Enqueue made from inside an op leaves it held until the
// stream's next flush or wait).
//
// Failures follow stream order. An op whose run fails (or panics) leaves the
// ranges it declared Write or ReadWrite unwritten, except bytes a later
// enqueued op (on any stream) writes; reads of them report the failure
// (ErrUnwritten). An op reading bytes whose latest writer failed is skipped
// and its outputs marked in turn, whether the failure was known when it was
// enqueued or not.
//
// From inside run an op may call the device for work that does not wait
// for streams: Alloc (which then neither relocates nor reclaims; it may
// return ErrOutOfMemory where a caller outside an op would have waited for
// room), Free, Clone, Enqueue, Write, Window, Stats and Report, on any
// stream. Calls that wait for streams (Synchronize, Read, Map, Cleanup,
// PrepareCapture/Capture, Graph.Close, Device.Close) return ErrCalledFromOp
// instead of waiting for the op itself. On a backend whose queues run an op
// inside Enqueue while the enqueuing caller holds the device (cuda), the op
// borrows the device: Free, Clone, Window, Stats, Report and the accessors
// work, and every other call returns ErrCalledFromOp.
func (s *Stream) Enqueue(name string, uses []Use, run func(res []storage.Resource) error) error {
	if run == nil {
		return fmt.Errorf("%w: op %q has no function", ErrInvalidUse, name)
	}
	d := s.d
	if err := d.lockUnlessBorrowed("Stream.Enqueue"); err != nil {
		return err
	}
	err := s.enqueueLocked(name, uses, run)
	d.mu.Unlock()
	s.flushHeld()
	return err
}

// resolved is one use resolved under the lock.
type resolved struct {
	use   Use
	owner *Stream
	res   storage.Resource
}

func (s *Stream) enqueueLocked(name string, uses []Use, run func([]storage.Resource) error) error {
	if invariantsOn {
		s.d.assertLocked("enqueueLocked")
	}
	d := s.d
	d.admitWorkLocked() // a settle may hold new work back (settle.go)
	if d.closed {
		return ErrClosed
	}
	d.collectFailuresLocked()
	rs := make([]resolved, len(uses))
	for i, u := range uses {
		r, err := s.resolveUseLocked(u)
		if err != nil {
			return fmt.Errorf("gpumem: op %q use %d: %w", name, i, err)
		}
		rs[i] = r
	}
	// An input carrying a failure: skip the op, hand the failure on.
	for _, r := range rs {
		if !r.use.Access.reads() {
			continue
		}
		f, ok, err := r.owner.mem.FindFailure(r.use.Buffer.h, r.use.Offset, r.use.Size)
		if err != nil || !ok {
			continue
		}
		rec := handle.SkipRecord{Op: name, Input: r.use.Buffer.h.ID()}
		for _, w := range rs {
			if w.use.Access.writes() {
				rec.Outputs = append(rec.Outputs, w.use.Buffer.h.ID())
				_ = w.owner.mem.MarkFailure(w.use.Buffer.h, f, w.use.Offset, w.use.Size)
			}
		}
		d.g.Skip(f, rec)
		d.markedLocked(s, name, outputsOf(rs), f)
		if s.capture.Recording() {
			// A graph cannot represent a skipped op: it would replay
			// without it forever. The recording is doomed.
			err := fmt.Errorf("gpumem: op %q recorded on %s reads bytes a failure left unwritten: %w", name, s.name, d.g.Report(f, r.use.Buffer.h.ID()))
			s.capture.Fail(err)
			return err
		}
		return nil
	}
	// Cross-stream ordering (X1, X2).
	for _, r := range rs {
		if err := s.orderAfterLocked(r.use.Buffer.h, r.owner); err != nil {
			return err
		}
	}
	res := make([]storage.Resource, len(rs))
	for i, r := range rs {
		res[i] = r.res
	}
	// Stream-order failure marks (writes.go): what the op depends on, and
	// its record as a writer. A recorded op runs at every launch, long after
	// these records are gone: it gets neither.
	var w *writeRecord
	var deps []dependency
	if !s.capture.Recording() {
		var outs []output
		for _, r := range rs {
			desc := r.use.Buffer.h.Descriptor()
			if r.use.Access.reads() {
				deps = d.dependenciesLocked(desc, r.use.Buffer.h.ID(), r.use.Offset, r.use.Size, deps)
			}
			if r.use.Access.writes() {
				outs = append(outs, output{d: desc, owner: r.owner, off: r.use.Offset, len: r.use.Size})
			}
		}
		if len(outs) > 0 {
			w = d.newWriteRecordLocked(s, name, outs)
		}
	}
	call := func() error { return run(res) }
	if s.capture.Recording() && s.cap != nil {
		call = slotRun(s.cap.slots, len(s.cap.opReads), call) // graph_writes.go
	} else {
		call = wrapRun(w, deps, call)
	}
	endLend := d.lendLocked(s) // a queue that runs the op now: it borrows the device (settle.go)
	seq, err := s.q.Enqueue(stream.Op{Name: name, Run: call})
	endLend()
	if err != nil {
		f := d.g.Fail(fmt.Errorf("gpumem: op %q could not be enqueued on %s: %w", name, s.name, err), name)
		for _, r := range rs {
			if r.use.Access.writes() {
				_ = r.owner.mem.MarkFailure(r.use.Buffer.h, f, r.use.Offset, r.use.Size)
			}
		}
		d.markedLocked(s, name, outputsOf(rs), f)
		d.g.Prune()
		if s.capture.Recording() {
			s.capture.Fail(err)
		}
		return err
	}
	s.afterEnqueueLocked(seq, rs, w)
	return nil
}

// resolveUseLocked checks a use and resolves its window.
func (s *Stream) resolveUseLocked(u Use) (resolved, error) {
	b := u.Buffer
	if err := b.valid(); err != nil {
		return resolved{}, err
	}
	if b.s.d != s.d {
		return resolved{}, ErrForeignBuffer
	}
	if !b.liveLocked() {
		return resolved{}, b.errFreed()
	}
	if u.Offset > b.size || (u.Size != 0 && u.Size > b.size-u.Offset) {
		return resolved{}, fmt.Errorf("%w: range [%d, +%d) outside buffer %d of %d bytes", ErrInvalidUse, u.Offset, u.Size, b.id, b.size)
	}
	if u.Size == 0 {
		u.Size = b.size - u.Offset
	}
	whole, err := b.s.mem.Resolve(b.h)
	if err != nil {
		return resolved{}, err
	}
	return resolved{use: u, owner: b.s, res: window(whole, u.Offset, u.Size)}, nil
}

// window narrows a resolved allocation to [off, off+size).
func window(r storage.Resource, off, size uint64) storage.Resource {
	out := storage.Resource{Region: r.Region.Sub(off, size)}
	if r.Bytes != nil {
		out.Bytes = r.Bytes[off : off+size : off+size]
	}
	if r.Ptr != 0 {
		out.Ptr = r.Ptr + uintptr(off)
	}
	return out
}

// orderAfterLocked makes s's next op wait for what it must follow: the
// owner's last use of a foreign buffer (X1), or other streams' uses of one
// of s's own buffers (X2).
func (s *Stream) orderAfterLocked(ref handle.Ref, owner *Stream) error {
	if invariantsOn {
		s.d.assertLocked("orderAfterLocked")
	}
	d := s.d
	desc := ref.Descriptor()
	var waits []stream.Fence
	if owner != s {
		cursor, err := owner.mem.Cursor(ref)
		if err != nil {
			return err
		}
		if cursor > owner.q.Completed() {
			waits = append(waits, stream.Fence{Q: owner.q, Seq: cursor})
		}
		// Pending uses by third streams: without these waits two foreign
		// streams using one buffer (one of them writing) would race.
		waits = append(waits, d.foreign.pendingFor(desc, s.q)...)
	} else {
		d.foreign.dropPassed(desc)
		waits = append(waits, d.foreign.pendingFor(desc, nil)...)
	}
	for _, f := range waits {
		if s.capture.Recording() {
			err := fmt.Errorf("%w: %s would wait on %d of another stream", ErrCaptureCrossStream, s.name, f.Seq)
			s.capture.Fail(err)
			return err
		}
		if err := s.q.WaitFence(f); err != nil {
			return err
		}
	}
	return nil
}

// afterEnqueueLocked records what an enqueued op means for the buffers it
// used: cursors, deferred foreign bindings, X2 notes, and its record as a
// writer (w, nil when it writes nothing).
func (s *Stream) afterEnqueueLocked(seq uint64, rs []resolved, w *writeRecord) {
	if invariantsOn {
		s.d.assertLocked("afterEnqueueLocked")
	}
	d := s.d
	for _, r := range rs {
		h := r.use.Buffer.h
		if s.cap != nil {
			s.cap.touchedLocked(r)
		}
		if seq == 0 {
			continue // recorded, not run: nothing written, nothing to order yet
		}
		if r.use.Access.writes() {
			_ = r.owner.mem.ReleaseMarks(h, r.use.Offset, r.use.Size)
		}
		if r.owner == s {
			_ = s.mem.SetCursor(h, seq)
			continue
		}
		s.deferred = append(s.deferred, deferredUse{b: h.Binding(), seq: seq, owner: r.owner})
		d.foreign.note(h.Descriptor(), stream.Fence{Q: s.q, Seq: seq})
	}
	if seq == 0 && s.cap != nil {
		s.cap.recordedOpLocked(rs)
	}
	if seq != 0 && w != nil {
		w.seq = seq
		d.registerLocked(w)
	}
}

// dropPassed removes from the front of list (ordered by seq) every element
// whose seq ≤ done, calling each on it first (nil: nothing to do).
func dropPassed[T any](list []T, done uint64, seq func(T) uint64, each func(T)) []T {
	n := 0
	for n < len(list) && seq(list[n]) <= done {
		if each != nil {
			each(list[n])
		}
		n++
	}
	if n == 0 {
		return list
	}
	clear(list[:n])
	return list[n:]
}

// releasePassedLocked releases the deferred bindings whose ops completed.
func (s *Stream) releasePassedLocked() {
	if invariantsOn {
		s.d.assertLocked("releasePassedLocked")
	}
	if len(s.deferred) == 0 {
		return
	}
	s.deferred = dropPassed(s.deferred, s.q.Completed(), func(u deferredUse) uint64 { return u.seq }, s.releaseDeferredLocked)
}

func (s *Stream) releaseDeferredLocked(u deferredUse) {
	s.d.foreign.dropQueue(u.b.Descriptor(), s.q, u.seq)
	u.b.Release()
}

// drainDeferredLocked waits on a fence covering every deferred use and
// releases them all (not while s records: its deferred list is held).
func (s *Stream) drainDeferredLocked() {
	if s.capture.Recording() {
		return
	}
	s.waitDeferredLocked()
}

// waitDeferredLocked waits on a fence covering every deferred use and
// releases them; after a failed wait (not poison) it leaks them instead.
func (s *Stream) waitDeferredLocked() {
	if invariantsOn {
		s.d.assertLocked("waitDeferredLocked")
	}
	if len(s.deferred) == 0 {
		return
	}
	last := s.deferred[len(s.deferred)-1].seq
	if err := s.q.Wait(context.Background(), stream.Fence{Q: s.q, Seq: last}); err != nil {
		if !storage.IsDevicePoisoned(err) {
			// Unknown whether the work completed: leak the bindings so the
			// slices are never reused under it (design §7.5).
			s.d.log.Error("gpumem: waiting for cross-stream uses failed; leaking their buffers", "stream", s.name, "err", err)
			s.deferred = nil
			return
		}
	}
	for _, u := range s.deferred {
		s.releaseDeferredLocked(u)
	}
	s.deferred = nil
}

// waitAllLocked waits until every op enqueued on s so far completed.
func (s *Stream) waitAllLocked() error {
	f, err := s.q.Fence()
	if err != nil {
		return err
	}
	return s.q.Wait(context.Background(), f)
}

// Synchronize waits until every op enqueued on the stream so far has run.
// Failed ops do not fail it: their failures surface on reads of the bytes
// they left unwritten. On a recording stream it returns ErrRecording and
// dooms the recording.
func (s *Stream) Synchronize(ctx context.Context) error {
	d := s.d
	if err := d.lockUnlessBorrowed("Stream.Synchronize"); err != nil {
		return err
	}
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	if err := s.refuseHostSyncLocked("Synchronize"); err != nil {
		d.mu.Unlock()
		return err
	}
	f, err := s.q.Fence()
	if err == nil {
		err = d.refuseWaitFromOpLocked(f)
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.q.Wait(ctx, f); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.collectFailuresLocked()
	s.releasePassedLocked()
	s.st.releasePassed()
	return nil
}

// refuseHostSyncLocked refuses a host sync on a recording stream and dooms
// the recording: the sealed graph would not represent the run.
func (s *Stream) refuseHostSyncLocked(op string) error {
	if !s.capture.Recording() {
		return nil
	}
	err := fmt.Errorf("%w: %s on %s, which records a graph", ErrRecording, op, s.name)
	s.capture.Fail(err)
	return err
}

// Cleanup gives this stream's memory back now: refused while a stream
// records; otherwise its deferred frees drain, what its outdated pages hold
// is relocated, and its empty pages go back. When that needs streams' work
// done it waits without holding the device lock; when ctx ends first it
// returns ctx's error with nothing done.
func (s *Stream) Cleanup(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d := s.d
	if err := d.lockUnlessBorrowed("Stream.Cleanup"); err != nil {
		return err
	}
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	err := d.cleanupLocked(ctx, []*Stream{s})
	d.releaseAndUnlock(err == nil)
	return err
}
