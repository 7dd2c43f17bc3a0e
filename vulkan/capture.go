// Capture: a recorded command buffer submitted again on every launch,
// Vulkan's natural graph.
//
// While a queue records, each op's commands go into one command buffer
// begun with SIMULTANEOUS_USE (so launches may overlap), and the staging
// buffers and descriptor sets they use stay with it; nothing is submitted
// and the ops take no number. EndCapture seals it into a *commandGraph;
// Replay submits it as one step. gpumem's page guards keep every buffer the
// recording resolved in place until the graph closes, so the recorded
// buffers and offsets stay valid.
//
// What a recording cannot express invalidates it (EndCapture then yields
// no graph), as the host queues and cuda do: a host wait on the recording
// queue or on a fence of it (stream.ErrCaptureUnsupported), a cross-stream
// wait on a step not yet complete (stream.ErrCaptureCrossStream), a failed
// op, a Read or mapped Write (they synchronise with the host), and a graph
// launched inside another capture (no nesting: Vulkan would need
// secondary command buffers).

package vulkan

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/internal/backendkit"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// recording is an open capture.
type recording struct {
	backendkit.Recording
	bt *batch
}

var _ stream.Recorder = (*queue)(nil)

// commandGraph is the stream.Exec a queue seals: a recorded command
// buffer, what its commands use, and the number of ops recorded. Close
// frees it (the device's Graph.Close does, after its launches); the queue
// frees it at the latest when it closes.
type commandGraph struct {
	q   *queue
	ops int
	bt  *batch // sealed; nil once released (under q.mu)
}

var _ stream.Exec = (*commandGraph)(nil)

// Len implements stream.Exec: the number of recorded ops.
func (g *commandGraph) Len() int { return g.ops }

// Recording implements stream.Recorder.
func (q *queue) Recording() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rec != nil
}

// BeginCapture implements stream.Recorder: later ops are recorded into one
// command buffer until EndCapture. Relocation copies not yet submitted are
// submitted first.
func (q *queue) BeginCapture(o stream.Owner) error {
	if err := backendkit.BeginOwner("vulkan", o); err != nil {
		return err
	}
	q.opMu.Lock()
	defer q.opMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.closedErr("begin capture")
	}
	if q.rec != nil {
		return q.rec.Busy("vulkan", q.index, o)
	}
	if err := q.submitLooseLocked(); err != nil {
		return err
	}
	q.rec = &recording{Recording: backendkit.Recording{Owner: o}, bt: &batch{reusable: true}}
	return nil
}

// EndCapture implements stream.Recorder: the recording is closed in every
// case; when o owns it, doomed is nil and nothing invalidated it, its
// command buffer is sealed into a *commandGraph.
func (q *queue) EndCapture(o stream.Owner, doomed error) (stream.Exec, error) {
	q.opMu.Lock()
	defer q.opMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	rec := q.rec
	if rec == nil {
		return nil, backendkit.NotRecording("vulkan", q.index, o, doomed)
	}
	errs := rec.Refusals("vulkan", o, doomed)
	if len(errs) > 0 {
		q.discardRecordingLocked()
		return nil, errors.Join(errs...)
	}
	q.rec = nil
	bt := rec.bt
	if bt.cb != 0 {
		q.barrier(bt.cb, vk.PipelineStageAllCommands, vk.AccessMemoryWrite, vk.PipelineStageHost, vk.AccessHostRead)
		if err := check("vkEndCommandBuffer", vk.Call(q.b.dev.fn.EndCommandBuffer, bt.cb)); err != nil {
			q.b.notePoison(err)
			q.dropBatchLocked(bt)
			return nil, fmt.Errorf("vulkan: end capture on stream %d: %w", q.index, err)
		}
	}
	bt.sealed = true
	g := &commandGraph{q: q, ops: rec.Ops, bt: bt}
	if q.execs == nil {
		q.execs = make(map[*commandGraph]struct{})
	}
	q.execs[g] = struct{}{}
	return g, nil
}

// discardRecordingLocked drops the open recording and what it held (its
// command buffer was never submitted).
func (q *queue) discardRecordingLocked() {
	bt := q.rec.bt
	q.rec = nil
	if bt.cb != 0 {
		// Begun, perhaps with commands: reset before reuse.
		vk.Call(q.b.dev.fn.ResetCommandBuffer, bt.cb, 0)
	}
	q.dropBatchLocked(bt)
}

// RefuseWhileRecording invalidates an open recording and says why
// (backendkit.Waiter).
func (q *queue) RefuseWhileRecording(cause string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rec == nil {
		return nil
	}
	return q.rec.RefuseWait("vulkan", cause)
}

// Replay implements stream.Recorder: submits e (a *commandGraph this queue
// recorded) as one step, after the pending waits. Inside a capture it
// invalidates the recording: graphs do not nest here.
func (q *queue) Replay(e stream.Exec) error {
	g, ok := e.(*commandGraph)
	if !ok || g == nil || g.q != q {
		return fmt.Errorf("vulkan: replay: %T is not a graph recorded on this queue (stream %d): %w", e, q.index, stream.ErrInvalid)
	}
	q.opMu.Lock()
	defer q.opMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.closedErr("replay")
	}
	if g.bt == nil {
		return fmt.Errorf("vulkan: replay of a closed graph: %w", stream.ErrInvalid)
	}
	if q.rec != nil {
		return fmt.Errorf("vulkan: replay inside a capture on stream %d: %w: %w", q.index, ErrUnsupported,
			q.rec.Invalidate("a graph launched inside the capture (graphs do not nest on vulkan)"))
	}
	if err := q.submitLooseLocked(); err != nil {
		return err
	}
	if _, err := q.submitLocked(g.bt, "graph launch"); err != nil {
		return fmt.Errorf("vulkan: replay on stream %d: %w", q.index, err)
	}
	q.pollLocked()
	return nil
}

// Close frees the graph's command buffer, staging buffers and descriptor
// sets once its launches completed (it waits for them). Idempotent.
func (g *commandGraph) Close() error {
	q := g.q
	f, err := q.Fence()
	if err == nil {
		err = q.WaitSeq(context.Background(), f.Seq)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil // the queue's Close released it
	}
	g.releaseLocked()
	return err
}

// releaseLocked gives back what the graph holds (its launches complete).
func (g *commandGraph) releaseLocked() {
	q := g.q
	bt := g.bt
	if bt == nil {
		return
	}
	g.bt = nil
	delete(q.execs, g)
	bt.sealed = false
	if bt.cb != 0 {
		vk.Call(q.b.dev.fn.ResetCommandBuffer, bt.cb, 0)
	}
	q.dropBatchLocked(bt)
}
