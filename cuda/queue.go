// Queue: a stream.Queue over a driver stream, with events as fences.
//
// Structure. Every step that takes a sequence number (an op, a graph launch,
// a marker covering relocation copies) runs on the stream's executor and is
// followed there by cuEventRecord of one event: the step is complete once
// that event is. The pending list holds (seq, event) in sequence order. A
// watcher goroutine, locked to its own thread with the context current,
// takes the oldest pending event, cuEventSynchronize's it and advances
// completed (an atomic), so Completed never blocks and never touches the
// driver. Events go back to a free list for reuse.
//
// Invariants:
//   - (Q1) Sequence numbers are issued on the executor, under mu, in the
//     order the steps were submitted to the stream; pending is in that
//     order and holds every issued step not yet seen complete.
//   - (Q2) completed only grows; it is the seq of the newest pending entry
//     whose event synchronised without error (or that has no event: see
//     Q5), all older ones having done so too. After the first error
//     (cuEventSynchronize failing, or a sticky fault) it stops, and every
//     wait on a later seq returns that error.
//   - (Q3) An event is recycled only by the watcher, under mu, after it
//     completed; WaitFence reads another queue's pending event and calls
//     cuStreamWaitEvent on it while holding that queue's mu, so the event
//     cannot be re-recorded for a later step in between.
//   - (Q4) While a capture is open, ops run on the executor (their launches
//     are captured) and take no number; no event is recorded into the
//     capture. A host wait or an unmet cross-stream wait invalidates it in
//     software (a backendkit.Recording), as the host queues do, and EndCapture then
//     yields no graph.
//   - (Q5) When the event of a step cannot be created or recorded and the
//     error is not sticky (out of resources, say), the executor
//     synchronises the stream instead (cuStreamSynchronize, under mu: a
//     rare stall) and issues the step without an event, already complete
//     on the device: the watcher passes it, WaitFence has nothing to wait
//     for. Only if that synchronisation fails too is the step an error.
//   - (Q6) The stream may be closed under the queue (driverStream.Close,
//     primaryContext.Close): its close hook marks the queue closed and wakes the
//     watcher, which drains what is pending (the events outlive the
//     stream) and exits; queue.Close then cleans up on the device executor
//     and returns.
//
// Locks. Never two queues' mu at once except in WaitFence, which holds only
// the waited-on queue's mu (its own state is read first and released), so
// no cycle. No mu is held across an executor call.

package cuda

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumem/gpumem/internal/backendkit"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// queue is a stream.Queue over one driver stream, made by
// Backend.NewQueue. Enqueue runs the op on the stream's executor (where it
// launches work asynchronously on the stream) and records an event for its
// sequence number; Completed reads what a watcher thread observed; Flush has
// nothing to do (work is submitted at Enqueue). Captures use
// cuStreamBeginCapture_v2 in thread-local mode on the executor; the sealed
// Exec is an instantiated graph that Replay launches with cuGraphLaunch.
// Every method is safe for concurrent use.
type queue struct {
	b     *Backend
	index int
	s     *driverStream

	issued    atomic.Uint64 // last seq issued; written on the executor under mu
	completed atomic.Uint64 // last seq complete; written by the watcher under mu

	mu       sync.Mutex // guards the fields below
	wake     *sync.Cond // on mu: pending grew, or the queue closed
	pending  []pendingStep
	free     []*event // completed events, ready for reuse
	dead     []*event // events of failed steps, destroyed at Close
	progress chan struct{}
	failures []stream.OpFailure
	asyncErr error                 // first error the watcher saw (Q2)
	rec      *backendkit.Recording // open capture; nil: none
	unfenced bool                  // device copies enqueued since the last event
	copyFrom time.Time             // when the first of the unfenced copies was enqueued
	execs    map[*graphExecutable]struct{}
	closed   bool

	// gate is taken by the watcher before each event it synchronises;
	// tests hold it to keep completions unobserved (deterministically).
	gate sync.Mutex

	watchDone chan struct{} // closed when the watcher exits
	closeOnce sync.Once
	closeErr  error
}

// pendingStep is an issued step whose completion the watcher has not seen.
type pendingStep struct {
	seq  uint64
	name string
	ev   *event // nil when err != nil
	err  error  // recording the event failed

	copyFrom time.Time // the step covers device copies enqueued from then (zero: none)
}

var _ stream.Recorder = (*queue)(nil)

// newQueue creates the stream (with its executor) and starts the watcher.
func newQueue(b *Backend, index int) (*queue, error) {
	s, err := b.ctx.NewStream()
	if err != nil {
		b.notePoison(err)
		return nil, err
	}
	q := &queue{b: b, index: index, s: s, execs: make(map[*graphExecutable]struct{}),
		watchDone: make(chan struct{})}
	q.wake = sync.NewCond(&q.mu)
	ready := make(chan error, 1)
	go q.watch(ready)
	if err := <-ready; err != nil {
		<-q.watchDone
		return nil, errors.Join(err, s.Close())
	}
	s.setOnClose(q.streamClosed)
	return q, nil
}

// streamClosed is the stream's close hook (Q6): the queue takes no more
// work and the watcher exits once nothing is pending.
func (q *queue) streamClosed() {
	q.mu.Lock()
	q.closed = true
	q.wake.Broadcast()
	q.mu.Unlock()
}

// Stream returns the driver stream the queue runs on.
func (q *queue) Stream() *driverStream { return q.s }

// watch is the watcher: on its own locked thread with the context current,
// it synchronises pending events in order and advances completed. It exits
// once the queue is closed and nothing is pending. Its thread is never
// unlocked (see executor).
func (q *queue) watch(ready chan<- error) {
	runtime.LockOSThread()
	defer close(q.watchDone)
	d := q.b.ctx.drv
	if err := d.check("cuCtxSetCurrent", d.CuCtxSetCurrent(q.b.ctx.ctx)); err != nil {
		ready <- err
		return
	}
	ready <- nil
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for len(q.pending) == 0 && !q.closed {
			q.wake.Wait()
		}
		if len(q.pending) == 0 {
			return
		}
		p := q.pending[0]
		failed := q.asyncErr
		q.mu.Unlock()
		err := failed
		switch {
		case err != nil:
		case p.err != nil:
			err = p.err
		case p.ev == nil: // complete when issued (Q5)
		default:
			q.gate.Lock()
			err = d.check("cuEventSynchronize", d.CuEventSynchronize(p.ev.h))
			q.gate.Unlock()
		}
		q.mu.Lock()
		q.pending[0] = pendingStep{}
		q.pending = q.pending[1:]
		if err != nil {
			if q.asyncErr == nil {
				q.asyncErr = fmt.Errorf("cuda: stream %d: work up to step %d (%q) did not complete: %w", q.index, p.seq, p.name, err)
				q.b.notePoison(err)
			}
			q.failures = append(q.failures, stream.OpFailure{Seq: p.seq, Name: p.name, Err: q.asyncErr})
			if p.ev != nil {
				q.dead = append(q.dead, p.ev)
			}
		} else {
			if p.ev != nil {
				q.free = append(q.free, p.ev)
			}
			if !p.copyFrom.IsZero() {
				q.b.clock.copy.Add(int64(time.Since(p.copyFrom)))
			}
			q.completed.Store(p.seq)
		}
		if q.progress != nil {
			close(q.progress)
			q.progress = nil
		}
	}
}

// markLocked issues the next sequence number for the work just submitted to
// the stream and records its event. It runs on the executor with q.mu held.
// When no event can be had for a non-sticky reason, it synchronises the
// stream instead (Q5).
func (q *queue) markLocked(name string) uint64 {
	d := q.b.ctx.drv
	var ev *event
	var err error
	if n := len(q.free); n > 0 {
		ev = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		ev = &event{s: q.s}
		if err = d.check("cuEventCreate", d.CuEventCreate(&ev.h, eventDisableTiming)); err != nil {
			ev = nil
		}
	}
	if ev != nil {
		if err = d.check("cuEventRecord", d.CuEventRecord(ev.h, q.s.h)); err == nil {
			return q.issueLocked(name, ev, nil)
		}
		q.dead = append(q.dead, ev)
	}
	if !storage.IsDevicePoisoned(err) {
		serr := d.check("cuStreamSynchronize", d.CuStreamSynchronize(q.s.h))
		if serr == nil {
			return q.issueLocked(name, nil, nil)
		}
		err = fmt.Errorf("%w (and synchronising the stream instead failed: %w)", err, serr)
	}
	return q.issueLocked(name, nil, err)
}

func (q *queue) issueLocked(name string, ev *event, err error) uint64 {
	seq := q.issued.Load() + 1
	q.issued.Store(seq)
	p := pendingStep{seq: seq, name: name, ev: ev, err: err}
	if q.unfenced {
		p.copyFrom = q.copyFrom
	}
	q.pending = append(q.pending, p)
	q.unfenced = false
	q.wake.Signal()
	if err != nil {
		q.b.notePoison(err)
	}
	return seq
}

// do runs fn on the stream's executor, refusing a closed queue with an
// error wrapping stream.ErrClosed.
func (q *queue) do(call string, fn func() error) error {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return q.closedErr(call)
	}
	err := q.s.exec.Do(func() error {
		if q.s.isClosed() {
			return fmt.Errorf("%w (its stream was closed)", q.closedErr(call))
		}
		return fn()
	})
	if errors.Is(err, ErrClosed) && !errors.Is(err, stream.ErrClosed) {
		return fmt.Errorf("%w (%w)", q.closedErr(call), err)
	}
	return err
}

// closedErr is the error of a call on a closed queue.
func (q *queue) closedErr(call string) error { return backendkit.Closed("cuda", q.index, call) }

// Enqueue implements stream.Queue. op.Run runs now, on the stream's
// executor, after every op enqueued before it; the work it launches on the
// stream is asynchronous. An event recorded after it gives the op's
// sequence number. A failed Run is reported by TakeFailures. While the
// queue records, Run's launches are captured and seq is 0; then a failed
// Run invalidates the recording and is returned.
func (q *queue) Enqueue(op stream.Op) (seq uint64, err error) {
	if op.Run == nil {
		return 0, fmt.Errorf("cuda: enqueue: op %q has no Run: %w", op.Name, stream.ErrInvalid)
	}
	err = q.do("enqueue", func() error {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return q.closedErr("enqueue")
		}
		rec := q.rec
		refused := rec.Refuse("cuda", fmt.Sprintf("enqueue %q", op.Name))
		q.mu.Unlock()
		if refused != nil {
			return refused
		}
		runErr := backendkit.RunOp(op)
		q.b.notePoison(runErr)
		q.mu.Lock()
		defer q.mu.Unlock()
		if rec != nil {
			return rec.Recorded("cuda", op.Name, runErr)
		}
		seq = q.markLocked(op.Name)
		if runErr != nil {
			q.failures = append(q.failures, stream.OpFailure{Seq: seq, Name: op.Name, Err: runErr})
		}
		return nil
	})
	return seq, err
}

// copyDtoD enqueues a device-to-device copy (Backend.CopyOnDevice); the next
// Fence covers it.
func (q *queue) copyDtoD(dst, src uintptr, n uint64) error {
	return q.do("copy on device", func() error {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.closed {
			return q.closedErr("copy on device")
		}
		if q.rec != nil {
			return backendkit.CopyWhileRecording("cuda", q.index)
		}
		d := q.b.ctx.drv
		t0 := time.Now()
		if err := d.check("cuMemcpyDtoDAsync_v2", d.CuMemcpyDtoDAsync(dst, src, uintptr(n), q.s.h)); err != nil {
			q.b.notePoison(err)
			return fmt.Errorf("cuda: stream %d: copy %d bytes %#x -> %#x: %w", q.index, n, src, dst, err)
		}
		if !q.unfenced {
			q.copyFrom = t0
		}
		q.unfenced = true
		return nil
	})
}

// Flush implements stream.Queue: nothing is held back (work is submitted
// at Enqueue). After Close it returns an error wrapping stream.ErrClosed.
func (q *queue) Flush() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.closedErr("flush")
	}
	return nil
}

// Fence implements stream.Queue: a fence covering every step enqueued so
// far, device copies included (a marker event is recorded for copies
// enqueued since the last step).
func (q *queue) Fence() (stream.Fence, error) {
	q.mu.Lock()
	closed, unfenced := q.closed, q.unfenced
	q.mu.Unlock()
	if closed {
		return stream.Fence{}, q.closedErr("fence")
	}
	if unfenced {
		err := q.do("fence", func() error {
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.unfenced && q.rec == nil && !q.closed {
				q.markLocked("device copies")
			}
			return nil
		})
		if err != nil {
			return stream.Fence{}, err
		}
	}
	return stream.Fence{Q: q, Seq: q.issued.Load()}, nil
}

// Completed implements stream.Queue: the seq of the last step the watcher
// saw complete. It reads an atomic only.
func (q *queue) Completed() uint64 { return q.completed.Load() }

// Wait implements stream.Queue: blocks until f has passed, ctx is done or
// the stream failed (the error, matching gpumem.ErrDevicePoisoned for a
// sticky fault). On a recording queue, or with a fence of a recording
// queue, it returns at once with stream.ErrCaptureUnsupported and
// invalidates that recording, as the host queues do.
func (q *queue) Wait(ctx context.Context, f stream.Fence) error {
	return backendkit.Wait("cuda", q, ctx, f)
}

// RefuseWhileRecording invalidates an open recording and says why
// (backendkit.Waiter).
func (q *queue) RefuseWhileRecording(cause string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rec.RefuseWait("cuda", cause)
}

// WaitSeq blocks until step seq completed, ctx is done or the stream
// failed (backendkit.Waiter).
func (q *queue) WaitSeq(ctx context.Context, seq uint64) error {
	if err := backendkit.Beyond("cuda", "wait", seq, q.issued.Load(), q.index); err != nil {
		return err
	}
	for {
		if q.completed.Load() >= seq {
			return nil
		}
		q.mu.Lock()
		if q.completed.Load() >= seq {
			q.mu.Unlock()
			return nil
		}
		if err := q.asyncErr; err != nil {
			q.mu.Unlock()
			return err
		}
		if q.progress == nil {
			q.progress = make(chan struct{})
		}
		ch := q.progress
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("cuda: wait for step %d of stream %d (completed %d): %w", seq, q.index, q.completed.Load(), ctx.Err())
		}
	}
}

// WaitFence implements stream.Queue: later work on this stream waits, on
// the device, for f (cuStreamWaitEvent on f's event); the caller does not
// block. A fence of this queue, or one already passed, adds nothing. A
// fence of another kind of queue is waited for on the host. While this
// queue records, a fence not yet passed invalidates the recording
// (stream.ErrCaptureCrossStream): the graph could not express it.
func (q *queue) WaitFence(f stream.Fence) error {
	if f.Seq == 0 {
		return q.Flush()
	}
	if backendkit.NilQueue(f.Q) {
		return fmt.Errorf("cuda: wait fence: fence %d has no queue: %w", f.Seq, stream.ErrInvalid)
	}
	if f.Q == stream.Queue(q) {
		return q.Flush()
	}
	t, ok := f.Q.(*queue)
	if !ok || t.b.ctx != q.b.ctx {
		return backendkit.WaitForeign(q, f)
	}
	if err := backendkit.Beyond("cuda", "wait fence", f.Seq, t.issued.Load(), t.index); err != nil {
		return err
	}
	return q.do("wait fence", func() error {
		// The recording state changes only on this executor: stable here.
		q.mu.Lock()
		closed, recording := q.closed, q.rec != nil
		q.mu.Unlock()
		if closed {
			return q.closedErr("wait fence")
		}
		t.mu.Lock()
		if t.completed.Load() >= f.Seq {
			t.mu.Unlock()
			return nil
		}
		if err := t.asyncErr; err != nil {
			t.mu.Unlock()
			return err
		}
		// Incomplete and no error: pending holds the step (Q1, Q2).
		var i uint64
		if len(t.pending) > 0 {
			i = f.Seq - t.pending[0].seq
		}
		if len(t.pending) == 0 || i >= uint64(len(t.pending)) || t.pending[i].seq != f.Seq {
			t.mu.Unlock()
			panic(fmt.Sprintf("cuda: stream %d: step %d neither complete nor pending", t.index, f.Seq))
		}
		p := t.pending[i]
		if recording {
			t.mu.Unlock()
			q.mu.Lock()
			err := q.rec.RefuseCrossStream("cuda", fmt.Sprintf("wait on incomplete step %d of stream %d", f.Seq, t.index))
			q.mu.Unlock()
			return err
		}
		if p.err != nil {
			t.mu.Unlock()
			return p.err
		}
		if p.ev == nil { // complete on the device when issued (Q5)
			t.mu.Unlock()
			return nil
		}
		d := q.b.ctx.drv
		err := d.check("cuStreamWaitEvent", d.CuStreamWaitEvent(q.s.h, p.ev.h, 0))
		t.mu.Unlock()
		q.b.notePoison(err)
		return err
	})
}

// RefuseCrossStreamWhileRecording refuses a wait on another queue's
// incomplete step while q records, invalidating the recording; nil when q
// does not record (backendkit.ForeignWaiter).
func (q *queue) RefuseCrossStreamWhileRecording(cause string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rec.RefuseCrossStream("cuda", cause)
}

// TakeFailures implements stream.Queue: failed ops and steps the device
// did not complete, since the last call, in sequence order.
func (q *queue) TakeFailures() []stream.OpFailure {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.failures
	q.failures = nil
	return f
}

// Recording implements stream.Queue.
func (q *queue) Recording() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rec != nil
}

// BeginCapture implements stream.Queue: cuStreamBeginCapture_v2 in
// thread-local mode, on the stream's executor. While it is open the
// backend's storages keep their frees queued.
func (q *queue) BeginCapture(o stream.Owner) error {
	if err := backendkit.BeginOwner("cuda", o); err != nil {
		return err
	}
	q.b.capMu.Lock()
	defer q.b.capMu.Unlock()
	return q.do("begin capture", func() error {
		q.mu.Lock()
		closed, rec := q.closed, q.rec
		q.mu.Unlock()
		if closed {
			return q.closedErr("begin capture")
		}
		if err := rec.Busy("cuda", q.index, o); err != nil {
			return err
		}
		// Device copies not yet covered by an event get one now: a Fence
		// taken during the capture (which records no event) covers them.
		q.mu.Lock()
		if q.unfenced {
			q.markLocked("device copies")
		}
		q.mu.Unlock()
		if err := q.s.BeginCapture(); err != nil {
			q.b.notePoison(err)
			return fmt.Errorf("cuda: begin capture on stream %d: %w", q.index, err)
		}
		q.mu.Lock()
		q.rec = &backendkit.Recording{Owner: o}
		q.mu.Unlock()
		q.b.capturing++
		return nil
	})
}

// EndCapture implements stream.Queue: cuStreamEndCapture on the executor
// (the driver capture is closed in every case), then, when o owns the
// capture, doomed is nil and nothing invalidated it, cuGraphInstantiate:
// the Exec is a *graphExecutable.
func (q *queue) EndCapture(o stream.Owner, doomed error) (stream.Exec, error) {
	q.b.capMu.Lock()
	defer q.b.capMu.Unlock()
	var x *graphExecutable
	err := q.do("end capture", func() error {
		q.mu.Lock()
		rec := q.rec
		q.rec = nil
		q.mu.Unlock()
		if rec == nil {
			return backendkit.NotRecording("cuda", q.index, o, doomed)
		}
		q.b.capturing--
		g, endErr := q.s.EndCapture()
		q.b.notePoison(endErr)
		errs := rec.Refusals("cuda", o, doomed)
		if endErr != nil {
			errs = append(errs, fmt.Errorf("cuda: end capture on stream %d: %w", q.index, endErr))
		}
		if len(errs) > 0 {
			if g != nil {
				errs = append(errs, g.Destroy())
			}
			return errors.Join(errs...)
		}
		gx, err := g.Instantiate()
		err = errors.Join(err, g.Destroy())
		if err != nil {
			q.b.notePoison(err)
			if gx != nil {
				err = errors.Join(err, gx.Destroy())
			}
			return fmt.Errorf("cuda: instantiating the graph captured on stream %d: %w", q.index, err)
		}
		x = &graphExecutable{q: q, x: gx, ops: rec.Ops}
		q.mu.Lock()
		q.execs[x] = struct{}{}
		q.mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// Replay implements stream.Queue: cuGraphLaunch of e (a *graphExecutable
// of this backend) on the stream, then an event for its sequence number.
// While the queue records, the launch is captured as a child graph.
func (q *queue) Replay(e stream.Exec) error {
	x, ok := e.(*graphExecutable)
	if !ok || x == nil || x.q == nil || x.q.b != q.b {
		return fmt.Errorf("cuda: replay: %T is not a graph of this cuda backend: %w", e, stream.ErrInvalid)
	}
	return q.do("replay", func() error {
		q.mu.Lock()
		closed, rec := q.closed, q.rec
		refused := rec.Refuse("cuda", "replay")
		q.mu.Unlock()
		if closed {
			return q.closedErr("replay")
		}
		if refused != nil {
			return refused
		}
		if err := x.launch(q.s); err != nil {
			q.b.notePoison(err)
			err = fmt.Errorf("cuda: replay on stream %d: %w", q.index, err)
			if rec != nil {
				q.mu.Lock()
				rec.Invalidate(err.Error())
				q.mu.Unlock()
			}
			return err
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		if rec != nil {
			rec.Ops += x.ops
			return nil
		}
		q.markLocked("graph launch")
		return nil
	})
}

// Close implements stream.Queue: the steps already enqueued complete (the
// watcher sees them), an open capture is ended and discarded, then events,
// graphs and the stream are destroyed. Idempotent; later calls return
// errors wrapping stream.ErrClosed except Completed, Wait and TakeFailures.
func (q *queue) Close() error {
	first := false
	q.closeOnce.Do(func() { first, q.closeErr = true, q.close() })
	if !first {
		return nil
	}
	return q.closeErr
}

func (q *queue) close() error {
	var errs []error
	q.b.capMu.Lock()
	// On the executor, so no Enqueue is between its check and its event.
	ran := false
	err := q.s.exec.Do(func() error {
		ran = true
		rec := q.markClosed()
		if rec == nil || q.s.isClosed() {
			return nil
		}
		g, err := q.s.EndCapture()
		if g != nil {
			err = errors.Join(err, g.Destroy())
		}
		return err
	})
	if !ran {
		// The stream was closed first (Q6): its executor is gone, and with
		// the driver stream any capture on it.
		q.markClosed()
		err = nil
	}
	q.b.capMu.Unlock()
	errs = append(errs, err)
	<-q.watchDone

	q.mu.Lock()
	events := append(q.free, q.dead...)
	q.free, q.dead = nil, nil
	execs := make([]*graphExecutable, 0, len(q.execs))
	for x := range q.execs {
		execs = append(execs, x)
	}
	q.mu.Unlock()
	for _, x := range execs {
		errs = append(errs, x.Close())
	}
	if len(events) > 0 {
		// The events outlive a closed stream: cleanup falls back to the
		// device executor, and to nothing once the context is gone.
		errs = append(errs, q.s.cleanup(func() error {
			d := q.b.ctx.drv
			var first error
			for _, ev := range events {
				if err := d.check("cuEventDestroy_v2", d.CuEventDestroy(ev.h)); err != nil && first == nil {
					first = err
				}
			}
			return first
		}))
	}
	errs = append(errs, q.s.Close())
	q.b.forget(q)
	if q.b.Poisoned() != nil {
		// Every call fails on a poisoned context and what the queue held
		// dies with it; the poison itself is reported by Poisoned and by
		// every wait.
		return nil
	}
	return errors.Join(errs...)
}

// markClosed marks the queue closed, wakes the watcher and takes the open
// recording, if any, out of the backend's count of captures. q.b.capMu
// must be held.
func (q *queue) markClosed() *backendkit.Recording {
	q.mu.Lock()
	q.closed = true
	rec := q.rec
	q.rec = nil
	q.wake.Broadcast()
	q.mu.Unlock()
	if rec != nil {
		q.b.capturing--
	}
	return rec
}

// graphExecutable is the stream.Exec a queue seals: an instantiated graph
// (CUgraphExec) and the number of ops recorded into it. Close destroys it;
// the queue that captured it destroys it at the latest when it closes.
type graphExecutable struct {
	q   *queue
	ops int

	mu sync.Mutex // guards x
	x  *graphExec // nil once destroyed
}

var _ stream.Exec = (*graphExecutable)(nil)

// Len implements stream.Exec: the number of recorded ops.
func (g *graphExecutable) Len() int { return g.ops }

// launch enqueues one replay on s (cuGraphLaunch), holding mu so that
// Close cannot destroy the graph under the call.
func (g *graphExecutable) launch(s *driverStream) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.x == nil {
		return fmt.Errorf("cuda: replay of a destroyed graph: %w", stream.ErrInvalid)
	}
	return s.LaunchGraph(g.x)
}

// Close destroys the executable graph (cuGraphExecDestroy); launches
// already enqueued still run. Idempotent.
func (g *graphExecutable) Close() error {
	g.mu.Lock()
	x := g.x
	g.x = nil
	g.mu.Unlock()
	if x == nil {
		return nil
	}
	g.q.mu.Lock()
	delete(g.q.execs, g)
	g.q.mu.Unlock()
	err := x.Destroy()
	g.q.b.notePoison(err)
	return err
}

// RunsOpsOn implements stream.Executor: ops run on the stream's executor
// thread, so the caller runs one exactly when it is on that thread (g is not
// needed).
func (q *queue) RunsOpsOn(stream.Goroutine) bool { return q.s.exec.onWorker() }

// WaitCompleted implements stream.Completer: it waits for the watcher to see
// step seq complete, which is no host synchronisation of the stream.
func (q *queue) WaitCompleted(ctx context.Context, seq uint64) error { return q.WaitSeq(ctx, seq) }

var (
	_ stream.Executor  = (*queue)(nil)
	_ stream.Completer = (*queue)(nil)
)

// RunsOpsAtEnqueue implements stream.EnqueueRunner: Enqueue runs the op on
// the executor and returns once it has.
func (q *queue) RunsOpsAtEnqueue() bool { return true }

var _ stream.EnqueueRunner = (*queue)(nil)
