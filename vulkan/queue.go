// Queue: a stream.Queue over a VkQueue, with a timeline semaphore as its
// fences.
//
// Structure. Every step that takes a sequence number (an op, a batch of
// relocation copies, a host synchronisation inside an op) is one
// vkQueueSubmit that signals the queue's timeline semaphore to that number:
// the step is complete once the semaphore's counter reaches it, so
// Completed reads the counter and fences need no other object. An op's
// commands are recorded into one command buffer while its run function
// runs (the op runs inside Enqueue, on the caller's goroutine) and
// submitted after it returns; relocation copies go into a loose command
// buffer submitted by the next Fence, Flush, Enqueue or Close.
//
// Ordering. Several gpumem streams may share one VkQueue, and submissions
// on one VkQueue may overlap: every recorded command is preceded by a full
// pipeline barrier, whose first scope reaches back over everything
// submitted earlier on the VkQueue, so a stream's commands run in its
// order (and after the other streams' earlier commands on the same
// VkQueue, a stricter order than gpumem needs). The one exception: in a
// loose batch (relocation copies), a copy that depends on none of the
// copies since the last barrier follows them without one. Each command buffer ends
// with a barrier making device writes visible to the host, for Read's
// mapped path. A cross-stream WaitFence adds a semaphore wait, on the
// other queue's semaphore at the fence's number, to the next submission.
//
// Invariants:
//   - (V1) issued only grows, under mu, and only after vkQueueSubmit
//     accepted the submission that signals it: a fence (and a semaphore
//     wait) never names a value no submission will signal.
//   - (V2) A step's command buffer, staging buffers and descriptor sets are
//     reclaimed only once the semaphore's counter reached its number
//     (poll), or at Close after waiting for every issued step.
//   - (V3) Ops run one at a time (opMu), and only the goroutine running
//     one records into the op batch; everything else touches the queue's
//     state under mu, which is never held while an op's run function runs.
//   - (V4) vkQueueSubmit on a shared VkQueue runs under its hwQueue.mu.

package vulkan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpumem/gpumem/internal/backendkit"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// Queue is a stream.Queue on a VkQueue, made by Backend.NewQueue. Enqueue
// runs the op at once on the caller's goroutine, recording its commands,
// and submits them; Completed reads the timeline semaphore; Wait waits for
// it on the host (vkWaitSemaphores). Captures record the ops into one
// command buffer that Replay submits again (capture.go). Every method is
// safe for concurrent use.
type queue struct {
	b     *Backend
	index int
	hw    *hwQueue
	sem   uint64 // VkSemaphore, timeline
	pool  uint64 // VkCommandPool, used under mu

	opMu    sync.Mutex    // one op at a time (V3)
	running atomic.Uint64 // goroutine running an op now, 0 when none

	issued    atomic.Uint64
	completed atomic.Uint64
	// stagingHeld counts the staging buffers of submitted steps not yet
	// reclaimed: a step that completed keeps its until the next poll,
	// which an idle queue never makes, so an explicit cleanup
	// (Backend.Release) polls the queues where it is not 0.
	stagingHeld atomic.Int64

	semMu sync.RWMutex // read: the semaphore is queried; write: Close destroys it
	gone  bool         // the semaphore is destroyed; under semMu

	mu       sync.Mutex // guards the fields below
	op       *batch     // the running op's commands
	loose    *batch     // device copies outside ops
	waits    []semWait  // for the next submission
	inflight []*step
	freeCBs  []uintptr
	descPool []*descriptorPool
	failures []stream.OpFailure
	asyncErr error
	rec      *recording // open capture (capture.go); nil: none
	execs    map[*commandGraph]struct{}
	closed   bool
}

// batch is a command buffer being recorded and what it holds on to.
type batch struct {
	cb      uintptr // 0 until the first command
	staging []*allocation
	sets    []descriptorSet
	// uses are the storage allocations its commands use (each once); a
	// free of one waits for the batch's step (alloc.go).
	uses   []*allocation
	useSet map[*allocation]struct{} // uses, once there are many
	// copies are the regions the copies recorded since the last barrier
	// touch (loose batches: relocation copies only), so a copy that
	// touches none of what they write, and writes none of what they
	// touch, needs no barrier before it (CopyOnDevice).
	copies []copyRange
	// reusable: the buffer is begun for resubmission (a capture's);
	// sealed: it is ended and owned by a commandGraph, so a submission
	// neither records into it nor reclaims it.
	reusable, sealed bool
}

// copyRange is a region of a buffer a copy reads or writes.
type copyRange struct {
	buf, off, size uint64
	write          bool
}

func (r copyRange) overlaps(o copyRange) bool {
	return r.buf == o.buf && r.off < o.off+o.size && o.off < r.off+r.size
}

// maxBarrierFreeCopies bounds the copies recorded without a barrier
// between them (the hazard check is quadratic in them).
const maxBarrierFreeCopies = 64

// copyNeedsBarrier reports whether a copy reading src and writing dst must
// wait for the copies recorded since the last barrier: it reads or writes
// what one of them writes, or writes what one reads.
func (bt *batch) copyNeedsBarrier(src, dst copyRange) bool {
	if bt.cb == 0 || len(bt.copies) == 0 || len(bt.copies) >= 2*maxBarrierFreeCopies {
		return true
	}
	for _, c := range bt.copies {
		if c.overlaps(dst) || (c.write && c.overlaps(src)) {
			return true
		}
	}
	return false
}

// use notes that bt records a command on a.
func (bt *batch) use(a *allocation) {
	if bt.useSet != nil {
		if _, ok := bt.useSet[a]; ok {
			return
		}
		bt.useSet[a] = struct{}{}
	} else {
		for _, u := range bt.uses {
			if u == a {
				return
			}
		}
		if len(bt.uses) >= 16 {
			bt.useSet = make(map[*allocation]struct{}, 2*len(bt.uses))
			for _, u := range bt.uses {
				bt.useSet[u] = struct{}{}
			}
			bt.useSet[a] = struct{}{}
		}
	}
	bt.uses = append(bt.uses, a)
	a.recorded()
}

// step is a submitted batch, complete when the semaphore reaches seq.
type step struct {
	seq     uint64
	cb      uintptr // 0: none to reclaim (none, or a CommandGraph's)
	staging []*allocation
	sets    []descriptorSet
}

// semWait is a semaphore wait of a later submission.
type semWait struct {
	sem   uint64
	value uint64
}

// queueMark is a point in a queue's order (an allocation's last use on
// that queue; every queue's issued step for WaitOutsideStreams).
type queueMark struct {
	q   *queue
	seq uint64
}

var (
	_ stream.Queue         = (*queue)(nil)
	_ stream.Executor      = (*queue)(nil)
	_ stream.Completer     = (*queue)(nil)
	_ stream.EnqueueRunner = (*queue)(nil)
	_ stream.Issuer        = (*queue)(nil)
)

func newQueue(b *Backend, index int, hw *hwQueue) (*queue, error) {
	d := b.dev
	q := &queue{b: b, index: index, hw: hw}
	tci := &vk.SemaphoreTypeCreateInfo{SType: vk.StSemaphoreTypeCreateInfo, SemaphoreType: vk.SemaphoreTypeTimeline}
	sci := &vk.SemaphoreCreateInfo{SType: vk.StSemaphoreCreateInfo, PNext: unsafe.Pointer(tci)}
	if err := check("vkCreateSemaphore", vk.Call(d.fn.CreateSemaphore, d.h, uintptr(unsafe.Pointer(sci)), 0, uintptr(unsafe.Pointer(&q.sem)))); err != nil {
		b.notePoison(err)
		return nil, fmt.Errorf("vulkan: stream %d: %w", index, err)
	}
	pci := &vk.CommandPoolCreateInfo{SType: vk.StCommandPoolCreateInfo, Flags: vk.CommandPoolResetCommandBuffer, QueueFamilyIndex: d.family}
	if err := check("vkCreateCommandPool", vk.Call(d.fn.CreateCommandPool, d.h, uintptr(unsafe.Pointer(pci)), 0, uintptr(unsafe.Pointer(&q.pool)))); err != nil {
		vk.Call(d.fn.DestroySemaphore, d.h, uintptr(q.sem), 0)
		b.notePoison(err)
		return nil, fmt.Errorf("vulkan: stream %d: %w", index, err)
	}
	return q, nil
}

// Index returns the index of the gpumem stream the queue serves.
func (q *queue) Index() int { return q.index }

func (q *queue) closedErr(call string) error { return backendkit.Closed("vulkan", q.index, call) }

// Enqueue implements stream.Queue: op.Run runs now, on the caller's
// goroutine, after every op enqueued before it; the commands it records
// (copies, dispatches) are submitted when it returns, as one step whose
// number is returned. A failed Run is reported by TakeFailures (what it
// recorded is still submitted, so the step completes). Enqueue fails when
// the queue is closed or the submission is refused.
func (q *queue) Enqueue(op stream.Op) (uint64, error) {
	if op.Run == nil {
		return 0, fmt.Errorf("vulkan: enqueue: op %q has no Run: %w", op.Name, stream.ErrInvalid)
	}
	q.opMu.Lock()
	defer q.opMu.Unlock()
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return 0, q.closedErr("enqueue")
	}
	if err := q.submitLooseLocked(); err != nil {
		q.mu.Unlock()
		return 0, err
	}
	// What completed goes back first: the op may take its staging buffers
	// from the pool.
	q.pollLocked()
	rec := q.rec
	if rec != nil {
		if err := rec.Refuse("vulkan", fmt.Sprintf("enqueue %q", op.Name)); err != nil {
			q.mu.Unlock()
			return 0, err
		}
		q.op = rec.bt // recorded into the capture's command buffer
	} else {
		q.op = &batch{}
	}
	q.mu.Unlock()

	q.running.Store(uint64(stream.CurrentGoroutine()))
	runErr := backendkit.RunOp(op)
	q.running.Store(0)
	q.b.notePoison(runErr)

	q.mu.Lock()
	defer q.mu.Unlock()
	bt := q.op
	q.op = nil
	if rec != nil {
		return 0, rec.Recorded("vulkan", op.Name, runErr)
	}
	seq, err := q.submitLocked(bt, op.Name)
	if err != nil {
		return 0, err
	}
	if runErr != nil {
		q.failures = append(q.failures, stream.OpFailure{Seq: seq, Name: op.Name, Err: runErr})
	}
	q.pollLocked()
	return seq, nil
}

// commandsLocked returns bt's command buffer, begun, with a full barrier
// recorded before the command the caller records next (see Ordering).
func (q *queue) commandsLocked(bt *batch) (uintptr, error) {
	d := q.b.dev
	if bt.cb == 0 {
		var cb uintptr
		if n := len(q.freeCBs); n > 0 {
			cb = q.freeCBs[n-1]
			q.freeCBs = q.freeCBs[:n-1]
		} else {
			ai := &vk.CommandBufferAllocateInfo{SType: vk.StCommandBufferAllocateInfo, CommandPool: q.pool, Level: vk.CommandBufferLevelPrimary, CommandBufferCount: 1}
			if err := check("vkAllocateCommandBuffers", vk.Call(d.fn.AllocateCommandBuffers, d.h, uintptr(unsafe.Pointer(ai)), uintptr(unsafe.Pointer(&cb)))); err != nil {
				q.b.notePoison(err)
				return 0, fmt.Errorf("vulkan: stream %d: %w", q.index, err)
			}
		}
		flags := uint32(vk.CommandBufferOneTimeSubmit)
		if bt.reusable {
			flags = vk.CommandBufferSimultaneousUse
		}
		bi := &vk.CommandBufferBeginInfo{SType: vk.StCommandBufferBeginInfo, Flags: flags}
		if err := check("vkBeginCommandBuffer", vk.Call(d.fn.BeginCommandBuffer, cb, uintptr(unsafe.Pointer(bi)))); err != nil {
			q.freeCBs = append(q.freeCBs, cb)
			q.b.notePoison(err)
			return 0, fmt.Errorf("vulkan: stream %d: %w", q.index, err)
		}
		bt.cb = cb
	}
	q.barrier(bt.cb, vk.PipelineStageAllCommands, vk.AccessMemoryWrite, vk.PipelineStageAllCommands, vk.AccessMemoryRead|vk.AccessMemoryWrite)
	bt.copies = bt.copies[:0]
	return bt.cb, nil
}

// barrier records a global memory barrier.
func (q *queue) barrier(cb uintptr, srcStage, srcAccess, dstStage, dstAccess uint32) {
	mb := &vk.MemoryBarrier{SType: vk.StMemoryBarrier, SrcAccessMask: srcAccess, DstAccessMask: dstAccess}
	vk.Call(q.b.dev.fn.CmdPipelineBarrier, cb, uintptr(srcStage), uintptr(dstStage), 0, 1, uintptr(unsafe.Pointer(mb)), 0, 0, 0, 0)
}

// submitLocked submits bt (nil or empty: a submission without commands,
// which still waits and signals) with the pending semaphore waits, and
// signals the semaphore to the next number, which it returns (V1).
func (q *queue) submitLocked(bt *batch, name string) (uint64, error) {
	d := q.b.dev
	if err := q.b.Poisoned(); err != nil {
		q.dropBatchLocked(bt)
		return 0, fmt.Errorf("vulkan: stream %d: submit %q on a poisoned device: %w", q.index, name, err)
	}
	var cbs []uintptr
	if bt != nil && bt.sealed {
		if bt.cb != 0 { // a recording of ops that recorded no commands has none
			cbs = []uintptr{bt.cb}
		}
	} else if bt != nil && bt.cb != 0 {
		q.barrier(bt.cb, vk.PipelineStageAllCommands, vk.AccessMemoryWrite, vk.PipelineStageHost, vk.AccessHostRead)
		if err := check("vkEndCommandBuffer", vk.Call(d.fn.EndCommandBuffer, bt.cb)); err != nil {
			q.b.notePoison(err)
			q.dropBatchLocked(bt)
			return 0, fmt.Errorf("vulkan: stream %d: step %q: %w", q.index, name, err)
		}
		cbs = []uintptr{bt.cb}
	}
	seq := q.issued.Load() + 1
	signal := []uint64{seq}
	sems := []uint64{q.sem}
	var waitSems, waitVals []uint64
	var stages []uint32
	for _, w := range q.waits {
		waitSems = append(waitSems, w.sem)
		waitVals = append(waitVals, w.value)
		stages = append(stages, vk.PipelineStageAllCommands)
	}
	tsi := &vk.TimelineSemaphoreSubmitInfo{
		SType:                     vk.StTimelineSemaphoreSubmitInfo,
		WaitSemaphoreValueCount:   uint32(len(waitVals)),
		PWaitSemaphoreValues:      ptrOrNil(waitVals),
		SignalSemaphoreValueCount: 1,
		PSignalSemaphoreValues:    unsafe.Pointer(&signal[0]),
	}
	si := &vk.SubmitInfo{
		SType:                vk.StSubmitInfo,
		PNext:                unsafe.Pointer(tsi),
		WaitSemaphoreCount:   uint32(len(waitSems)),
		PWaitSemaphores:      ptrOrNil(waitSems),
		PWaitDstStageMask:    ptrOrNil(stages),
		CommandBufferCount:   uint32(len(cbs)),
		PCommandBuffers:      ptrOrNil(cbs),
		SignalSemaphoreCount: 1,
		PSignalSemaphores:    unsafe.Pointer(&sems[0]),
	}
	q.hw.mu.Lock()
	r := vk.Call(d.fn.QueueSubmit, q.hw.h, 1, uintptr(unsafe.Pointer(si)), 0)
	q.hw.mu.Unlock()
	if err := check("vkQueueSubmit", r); err != nil {
		q.b.notePoison(err)
		q.dropBatchLocked(bt)
		if q.asyncErr == nil {
			q.asyncErr = fmt.Errorf("vulkan: stream %d: step %q was not submitted: %w", q.index, name, err)
		}
		return 0, q.asyncErr
	}
	q.waits = nil
	st := &step{seq: seq}
	if bt != nil && !bt.sealed {
		st.cb, st.staging, st.sets = bt.cb, bt.staging, bt.sets
		q.stagingHeld.Add(int64(len(st.staging)))
	}
	q.inflight = append(q.inflight, st)
	q.issued.Store(seq)
	if bt != nil {
		watch := false
		for _, a := range bt.uses {
			if a.submitted(q, seq, !bt.sealed) {
				watch = true
			}
		}
		if !bt.sealed {
			bt.uses, bt.useSet = nil, nil
		}
		if watch {
			q.b.reap.kick()
		}
	}
	return seq, nil
}

// ptrOrNil returns a pointer to s's first element, nil when s is empty.
func ptrOrNil[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// dropBatchLocked gives back what a batch that will not be submitted held.
// Its command buffer was never submitted, so it can be reset now.
func (q *queue) dropBatchLocked(bt *batch) {
	if bt == nil || bt.sealed {
		return
	}
	if bt.cb != 0 {
		vk.Call(q.b.dev.fn.ResetCommandBuffer, bt.cb, 0)
		q.freeCBs = append(q.freeCBs, bt.cb)
	}
	for _, a := range bt.staging {
		q.b.putStaging(a)
	}
	q.freeSetsLocked(bt.sets)
	watch := false
	for _, a := range bt.uses {
		if a.dropped() {
			watch = true
		}
	}
	bt.uses, bt.useSet = nil, nil
	if watch {
		q.b.reap.kick()
	}
}

// submitLooseLocked submits the relocation copies recorded outside ops.
func (q *queue) submitLooseLocked() error {
	if q.loose == nil {
		return nil
	}
	bt := q.loose
	q.loose = nil
	_, err := q.submitLocked(bt, "device copies")
	return err
}

// poll is pollLocked under mu; nothing once the queue is closed (Close
// reclaimed everything).
func (q *queue) poll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.pollLocked()
	}
}

// pollLocked reclaims what the completed steps held (V2) and advances
// completed.
func (q *queue) pollLocked() {
	v, err := q.counter()
	if err != nil {
		q.noteAsyncLocked(err)
		return
	}
	q.reclaimLocked(v)
}

// reclaimStaging polls the queue when its submitted steps hold staging
// buffers, so those of the completed ones go back to the pool (or the
// driver) though nothing is enqueued after them. It takes mu briefly and
// never waits for the device.
func (q *queue) reclaimStaging() {
	if q.stagingHeld.Load() == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.pollLocked()
	}
}

func (q *queue) reclaimLocked(v uint64) {
	n := 0
	for n < len(q.inflight) && q.inflight[n].seq <= v {
		st := q.inflight[n]
		if st.cb != 0 {
			vk.Call(q.b.dev.fn.ResetCommandBuffer, st.cb, 0)
			q.freeCBs = append(q.freeCBs, st.cb)
		}
		for _, a := range st.staging {
			q.b.putStaging(a)
		}
		q.stagingHeld.Add(-int64(len(st.staging)))
		q.freeSetsLocked(st.sets)
		q.inflight[n] = nil
		n++
	}
	q.inflight = q.inflight[n:]
	q.advance(v)
}

// advance raises completed to v (it only grows).
func (q *queue) advance(v uint64) {
	for {
		c := q.completed.Load()
		if v <= c || q.completed.CompareAndSwap(c, v) {
			return
		}
	}
}

// passed reports whether step seq completed, or can no longer run: the
// device was lost.
func (q *queue) passed(seq uint64) bool {
	return q.Completed() >= seq || q.b.Poisoned() != nil
}

// waitBrief waits at most waitPoll for step seq (the releaser's watch); the
// caller looks at the queue again after.
func (q *queue) waitBrief(seq uint64) {
	if q.passed(seq) {
		return
	}
	switch r := q.waitPolled(seq); r {
	case vk.Success, vk.Timeout:
	default:
		q.b.notePoison(check("vkWaitSemaphores", r))
		time.Sleep(waitPoll) // not a loss: look again later, not at once
	}
}

// waitPolled waits at most waitPoll for step seq on the semaphore
// (vkWaitSemaphores), advancing completed when it passed; a destroyed
// semaphore's queue waited for all it issued (VK_SUCCESS).
func (q *queue) waitPolled(seq uint64) int32 {
	d := q.b.dev
	sems, vals := []uint64{q.sem}, []uint64{seq}
	wi := &vk.SemaphoreWaitInfo{SType: vk.StSemaphoreWaitInfo, SemaphoreCount: 1, PSemaphores: unsafe.Pointer(&sems[0]), PValues: unsafe.Pointer(&vals[0])}
	q.semMu.RLock()
	r := int32(vk.Success)
	if !q.gone {
		r = vk.Call(d.fn.WaitSemaphores, d.h, uintptr(unsafe.Pointer(wi)), uintptr(waitPoll.Nanoseconds()))
	}
	q.semMu.RUnlock()
	if r == vk.Success {
		q.advance(seq)
	}
	return r
}

// counter reads the semaphore's value.
func (q *queue) counter() (uint64, error) {
	q.semMu.RLock()
	defer q.semMu.RUnlock()
	if q.gone {
		return q.completed.Load(), nil
	}
	var v uint64
	err := check("vkGetSemaphoreCounterValue", vk.Call(q.b.dev.fn.GetSemaphoreCounterValue, q.b.dev.h, uintptr(q.sem), uintptr(unsafe.Pointer(&v))))
	return v, err
}

// noteAsyncLocked keeps the first error of the device's work.
func (q *queue) noteAsyncLocked(err error) {
	q.b.notePoison(err)
	if q.asyncErr == nil {
		q.asyncErr = fmt.Errorf("vulkan: stream %d: work after step %d did not complete: %w", q.index, q.completed.Load(), err)
		q.failures = append(q.failures, stream.OpFailure{Seq: q.issued.Load(), Name: "device work", Err: q.asyncErr})
	}
}

// Flush implements stream.Queue: submits the relocation copies recorded
// outside ops (ops are submitted at Enqueue).
func (q *queue) Flush() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.closedErr("flush")
	}
	return q.submitLooseLocked()
}

// Fence implements stream.Queue: a fence covering every step so far,
// relocation copies included (they are submitted now).
func (q *queue) Fence() (stream.Fence, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return stream.Fence{}, q.closedErr("fence")
	}
	if err := q.submitLooseLocked(); err != nil {
		return stream.Fence{}, err
	}
	return stream.Fence{Q: q, Seq: q.issued.Load()}, nil
}

// Issued implements stream.Issuer: the number of the last step submitted.
func (q *queue) Issued() uint64 { return q.issued.Load() }

// Completed implements stream.Queue: the semaphore's counter (a query
// that never blocks), or the last value seen once the device failed.
func (q *queue) Completed() uint64 {
	if v, err := q.counter(); err == nil {
		q.advance(v)
	}
	return q.completed.Load()
}

// Wait implements stream.Queue: blocks until f has passed, ctx is done or
// the device failed (the error then matches gpumem.ErrDevicePoisoned).
//
// On a recording queue, or with a fence of a recording queue, it returns
// at once with stream.ErrCaptureUnsupported and invalidates that
// recording, as the host queues do.
func (q *queue) Wait(ctx context.Context, f stream.Fence) error {
	return backendkit.Wait("vulkan", q, ctx, f)
}

// WaitCompleted implements stream.Completer.
func (q *queue) WaitCompleted(ctx context.Context, seq uint64) error { return q.WaitSeq(ctx, seq) }

// waitPoll is how long one vkWaitSemaphores call waits before ctx is
// looked at again.
const waitPoll = 20 * time.Millisecond

// waitSeq blocks until step seq completed, ctx is done or the device
// failed.
func (q *queue) WaitSeq(ctx context.Context, seq uint64) error {
	if err := backendkit.Beyond("vulkan", "wait", seq, q.issued.Load(), q.index); err != nil {
		return err
	}
	for {
		if q.completed.Load() >= seq {
			return nil
		}
		q.mu.Lock()
		aerr := q.asyncErr
		q.mu.Unlock()
		if aerr != nil {
			return aerr
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("vulkan: wait for step %d of stream %d (completed %d): %w", seq, q.index, q.completed.Load(), err)
		}
		switch r := q.waitPolled(seq); r {
		case vk.Success, vk.Timeout:
		default:
			q.mu.Lock()
			q.noteAsyncLocked(check("vkWaitSemaphores", r))
			aerr = q.asyncErr
			q.mu.Unlock()
			return aerr
		}
	}
}

// WaitFence implements stream.Queue: later work on this queue waits, on
// the device, for f (a semaphore wait in the next submission); the caller
// does not block. A fence of this queue, or one already passed, adds
// nothing; a fence of another backend's queue is waited for on the host.
func (q *queue) WaitFence(f stream.Fence) error {
	if f.Seq == 0 || (!backendkit.NilQueue(f.Q) && f.Q == stream.Queue(q)) {
		return q.Flush()
	}
	if backendkit.NilQueue(f.Q) {
		return fmt.Errorf("vulkan: wait fence: fence %d has no queue: %w", f.Seq, stream.ErrInvalid)
	}
	t, ok := f.Q.(*queue)
	if !ok || t.b != q.b {
		return backendkit.WaitForeign(q, f)
	}
	if err := backendkit.Beyond("vulkan", "wait fence", f.Seq, t.issued.Load(), t.index); err != nil {
		return err
	}
	if t.Completed() >= f.Seq {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.closedErr("wait fence")
	}
	if q.rec != nil {
		return q.rec.RefuseCrossStream("vulkan", fmt.Sprintf("wait on incomplete step %d of stream %d", f.Seq, t.index))
	}
	for i, w := range q.waits {
		if w.sem == t.sem {
			q.waits[i].value = max(w.value, f.Seq)
			return nil
		}
	}
	q.waits = append(q.waits, semWait{sem: t.sem, value: f.Seq})
	return nil
}

// TakeFailures implements stream.Queue.
func (q *queue) TakeFailures() []stream.OpFailure {
	q.mu.Lock()
	defer q.mu.Unlock()
	f := q.failures
	q.failures = nil
	return f
}

// RunsOpsOn implements stream.Executor: ops run on the goroutine that
// enqueues them, while it is inside Enqueue.
func (q *queue) RunsOpsOn(g stream.Goroutine) bool {
	return g != 0 && uint64(g) == q.running.Load()
}

// RunsOpsAtEnqueue implements stream.EnqueueRunner: yes.
func (q *queue) RunsOpsAtEnqueue() bool { return true }

// hostSyncLocked submits what the running op recorded so far (with the
// pending waits) and waits for it on the host, so the host may touch
// mapped memory next in stream order. Called inside an op, with mu held;
// it releases mu while waiting.
func (q *queue) hostSyncLocked(name string) error {
	if q.rec != nil {
		return fmt.Errorf("vulkan: %s inside a capture needs a host synchronisation: %w: %w", name,
			stream.ErrCaptureUnsupported, q.rec.Invalidate(name+" waited on the host"))
	}
	bt := q.op
	q.op = &batch{}
	seq, err := q.submitLocked(bt, name+" (host sync)")
	if err != nil {
		return err
	}
	q.mu.Unlock()
	err = q.WaitSeq(context.Background(), seq)
	q.mu.Lock()
	return err
}

// Close implements stream.Queue: the steps already enqueued complete, then
// the command buffers, descriptor pools, command pool and semaphore are
// destroyed. Idempotent; later calls return errors wrapping
// stream.ErrClosed except Completed, Wait and TakeFailures.
func (q *queue) Close() error {
	q.opMu.Lock()
	defer q.opMu.Unlock()
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	err := q.submitLooseLocked()
	q.closed = true
	if q.rec != nil {
		q.discardRecordingLocked()
	}
	issued := q.issued.Load()
	execs := make([]*commandGraph, 0, len(q.execs))
	for x := range q.execs {
		execs = append(execs, x)
	}
	q.mu.Unlock()
	if werr := q.WaitSeq(context.Background(), issued); werr != nil {
		err = errors.Join(err, werr)
		// The device failed: wait for it to be idle before destroying
		// what its work may use.
		_ = q.b.dev.waitIdle()
		issued = ^uint64(0)
	}
	q.mu.Lock()
	q.reclaimLocked(issued)
	for _, x := range execs {
		x.releaseLocked()
	}
	d := q.b.dev
	if len(q.freeCBs) > 0 {
		vk.Call(d.fn.FreeCommandBuffers, d.h, uintptr(q.pool), uintptr(len(q.freeCBs)), uintptr(unsafe.Pointer(&q.freeCBs[0])))
		q.freeCBs = nil
	}
	for _, p := range q.descPool {
		vk.Call(d.fn.DestroyDescriptorPool, d.h, uintptr(p.h), 0)
	}
	q.descPool = nil
	vk.Call(d.fn.DestroyCommandPool, d.h, uintptr(q.pool), 0)
	q.mu.Unlock()
	q.semMu.Lock()
	q.gone = true
	vk.Call(d.fn.DestroySemaphore, d.h, uintptr(q.sem), 0)
	q.semMu.Unlock()
	q.b.forget(q)
	if q.b.Poisoned() != nil {
		return nil
	}
	return err
}

// waitMarks waits for every mark's step.
func waitMarks(ms []queueMark) error {
	var errs []error
	for _, m := range ms {
		errs = append(errs, m.q.WaitSeq(context.Background(), m.seq))
	}
	return errors.Join(errs...)
}

// RefuseCrossStreamWhileRecording refuses a wait on another queue's
// incomplete step while q records, invalidating the recording; nil when q
// does not record (backendkit.ForeignWaiter).
func (q *queue) RefuseCrossStreamWhileRecording(cause string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rec.RefuseCrossStream("vulkan", cause)
}
