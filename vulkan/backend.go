// The gpumem.Backend adapter: a Device on Vulkan device memory.
//
// Structure. A Backend holds the instance, the logical device and its
// VkQueues, the Storages it made (one per stream memory), the Queues it
// made (one per stream, sharing the VkQueues round robin) and the Kernels
// loaded on it. Every allocation of every storage is registered by ID, so
// relocation copies and ops find the VkBuffer behind a Resource.
//
// Invariants:
//   - (B1) The first VK_ERROR_DEVICE_LOST any component sees is kept
//     (Poisoned); every later allocation and submission fails with it.
//   - (B2) Close destroys in dependency order: queues (after their work
//     completed), storages' allocations, kernels, the device, the
//     instance; every object the backend made is destroyed by then, which
//     the validation layer checks in the tests.

package vulkan

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/backendkit"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// baseAlignment is the least alignment of every page (as cuda's);
// minStorageBufferOffsetAlignment, nonCoherentAtomSize and the buffers'
// own alignment raise it where larger.
const baseAlignment = 256

// Backend runs a gpumem.Device on one Vulkan device: storage on
// vkAllocateMemory (one VkBuffer per allocation), queues on VkQueues with
// timeline semaphores as fences, relocation copies with vkCmdCopyBuffer,
// Write and Read through mapped memory or staging buffers. It implements
// gpumem.Backend, gpumem.HostTransfers, gpumem.HostMapper (where pages are
// host-visible) and gpumem.Releaser. Open one with NewBackend (or a whole
// Device with OpenDevice); the Device closes it.
type Backend struct {
	opts  Options
	lib   *library
	inst  *instance
	dev   *device
	props memory.Properties

	heaps []*storage.Budget // per heap: its budget or size, or Options.Capacity
	reap  *reaper
	stage *stagingPool
	// life is held for reading by a Release in progress (it runs without
	// the device lock), and for writing by Close before it frees what the
	// storages hold.
	life sync.RWMutex

	// nonCoherent treats every mapping as not coherent, so the flush and
	// invalidate paths run (and are validated) on drivers whose host-visible
	// memory is all coherent, as lavapipe's is. Set by tests only.
	nonCoherent bool
	// unmappedPages leaves pages unmapped where their memory is
	// host-visible, as a discrete GPU's device-local memory is not:
	// PagesHostVisible is false, Write and Read go through staging buffers
	// and Map is not supported (staging buffers are still mapped). Set by
	// tests only, before the first page (lavapipe, whose one memory type
	// serves both, then takes the paths an NVIDIA GPU takes).
	unmappedPages bool
	pagesMapped   bool // pages are mapped: their memory type is host-visible (and not unmappedPages)
	maxAllocs     uint32
	allocCount    atomic.Int64
	// frees counts the allocations freed (free: slot and heap bytes back),
	// so that an allocation refused while the releaser was freeing knows a
	// retry may succeed even once the releaser is idle (deviceStorage.Alloc).
	frees atomic.Uint64

	amu    sync.RWMutex
	allocs map[storage.ID]*allocation

	mu        sync.Mutex // guards the fields below
	queues    map[*queue]struct{}
	storages  map[*deviceStorage]struct{}
	kernels   map[*Kernel]struct{}
	nextHW    int
	poison    backendkit.Poison // B1; its own lock
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

var (
	_ gpumem.Backend       = (*Backend)(nil)
	_ gpumem.HostTransfers = (*Backend)(nil)
	_ gpumem.Releaser      = (*Backend)(nil)
	_ gpumem.HostMapper    = (*Backend)(nil)
)

// NewBackend opens the device opts picks. When the backend cannot run here
// (no loader, no device, a device without what it needs) the error wraps
// gpumem.ErrNotSupported and ErrNoLoader or ErrNoDevice, and says why:
// fall back to gpumem.Open.
func NewBackend(opts Options) (*Backend, error) {
	if opts.Granular {
		return nil, fmt.Errorf("vulkan backend: Options.Granular: granular pages need sparse binding, which this backend does not implement (pages are whole): %w", ErrUnsupported)
	}
	lib, err := openLibrary(opts.Library)
	if err != nil {
		return nil, fmt.Errorf("%w: vulkan backend: %w", gpumem.ErrNotSupported, err)
	}
	inst, err := newInstance(lib, opts.Validation)
	if err != nil {
		return nil, fmt.Errorf("%w: vulkan backend: %w", gpumem.ErrNotSupported, err)
	}
	dev, err := newDevice(inst, opts)
	if err != nil {
		inst.destroy()
		return nil, fmt.Errorf("%w: vulkan backend: %w", gpumem.ErrNotSupported, err)
	}
	b := &Backend{opts: opts, lib: lib, inst: inst, dev: dev,
		allocs:   make(map[storage.ID]*allocation),
		queues:   make(map[*queue]struct{}),
		storages: make(map[*deviceStorage]struct{}),
		kernels:  make(map[*Kernel]struct{}),
	}
	b.reap = newReaper(b)
	info := dev.info
	b.maxAllocs = info.Limits.MaxMemoryAllocationCount
	if opts.MaxAllocations > 0 && opts.MaxAllocations < b.maxAllocs {
		b.maxAllocs = opts.MaxAllocations
	}
	for _, h := range info.Heaps {
		c := h.Size
		if info.MemoryBudget && h.Budget > 0 {
			c = min(c, h.Budget)
		}
		if opts.Capacity > 0 {
			c = min(c, opts.Capacity)
		}
		b.heaps = append(b.heaps, storage.NewBudget(c))
	}
	align := uint64(baseAlignment)
	align = max(align, info.Limits.MinStorageBufferOffsetAlignment, info.Limits.NonCoherentAtomSize)
	probe, err := b.allocate(align, pageMemory)
	if err != nil {
		b.reap.close()
		b.destroyDevice()
		return nil, fmt.Errorf("%w: vulkan backend: device %q: a first allocation of %d bytes: %w", gpumem.ErrNotSupported, info.Name, align, err)
	}
	heap := info.MemoryTypes[probe.typ].Heap
	b.pagesMapped = probe.mapped != nil
	b.free(probe)
	capacity := b.heaps[heap].Capacity()
	maxPage := max(align, capacity/4/align*align)
	if m := info.Limits.MaxMemoryAllocationSize; m > 0 {
		maxPage = min(maxPage, max(align, m/align*align))
	}
	b.props = memory.Properties{MaxPageSize: maxPage, Alignment: align, MaxMemory: capacity}
	stagingHeap := capacity
	if ts := stagingMemory.candidates(info.MemoryTypes, ^uint32(0)); len(ts) > 0 {
		stagingHeap = b.heaps[info.MemoryTypes[ts[0]].Heap].Capacity()
	}
	b.stage = newStagingPool(stagingHeap)
	return b, nil
}

// OpenDevice opens a gpumem.Device on the vulkan backend: NewBackend, then
// gpumem.OpenBackend with more. Without a usable loader or device the
// error wraps gpumem.ErrNotSupported.
func OpenDevice(opts Options, more ...gpumem.Option) (*gpumem.Device, error) {
	b, err := NewBackend(opts)
	return backendkit.OpenDevice(b, err, more)
}

// Info describes the device the backend runs on.
func (b *Backend) Info() DeviceInfo { return b.dev.info }

// Name implements gpumem.Backend: "vulkan".
func (b *Backend) Name() string { return "vulkan" }

// Properties implements gpumem.Backend: the alignment is the largest of
// 256, minStorageBufferOffsetAlignment and nonCoherentAtomSize; MaxMemory
// the page heap's budget (VK_EXT_memory_budget, else its size, or
// Options.Capacity); MaxPageSize a quarter of that, at most
// maxMemoryAllocationSize.
func (b *Backend) Properties() gpumem.Properties { return gpumem.Properties(b.props) }

// ValidationMessages returns what the validation layer reported so far
// (Options.Validation; nil without it).
func (b *Backend) ValidationMessages() []string { return b.inst.log.messages() }

// allocations returns how many VkDeviceMemory objects the backend holds
// (pages, queued frees and staging buffers).
func (b *Backend) allocations() int { return int(b.allocCount.Load()) }

// usable refuses a call on a closed or poisoned backend.
func (b *Backend) usable(call string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("vulkan: %s: %w", call, ErrClosed)
	}
	if err := b.poison.Err(); err != nil {
		return fmt.Errorf("vulkan: %s on a poisoned device: %w", call, err)
	}
	return nil
}

// NewStorage implements gpumem.Backend: a *deviceStorage drawing on budget (and
// on the heap's own budget).
func (b *Backend) NewStorage(budget *storage.Budget) (storage.Storage, error) {
	if err := b.usable("new storage"); err != nil {
		return nil, err
	}
	s := &deviceStorage{b: b, budget: budget, live: make(map[storage.ID]*allocation)}
	b.mu.Lock()
	b.storages[s] = struct{}{}
	b.mu.Unlock()
	return s, nil
}

// NewQueue implements gpumem.Backend: a queue on the next VkQueue, round
// robin.
func (b *Backend) NewQueue(index int) (stream.Queue, error) {
	if err := b.usable("new queue"); err != nil {
		return nil, err
	}
	b.mu.Lock()
	hw := b.dev.queues[b.nextHW%len(b.dev.queues)]
	b.nextHW++
	b.mu.Unlock()
	q, err := newQueue(b, index, hw)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.queues[q] = struct{}{}
	}
	b.mu.Unlock()
	if closed {
		return nil, errors.Join(fmt.Errorf("vulkan: new queue: %w", ErrClosed), q.Close())
	}
	return q, nil
}

// queueOf returns q as a queue of this backend.
func (b *Backend) queueOf(q stream.Queue, call string) (*queue, error) {
	return backendkit.QueueOf("vulkan", q, call, func(vq *queue) bool { return vq.b == b })
}

// register and unregister keep the ID -> allocation index.
func (b *Backend) register(a *allocation) {
	b.amu.Lock()
	b.allocs[a.id] = a
	b.amu.Unlock()
}

func (b *Backend) unregister(id storage.ID) {
	b.amu.Lock()
	delete(b.allocs, id)
	b.amu.Unlock()
}

// lookup returns the allocation behind a resource, checking the window.
func (b *Backend) lookup(r storage.Resource, call string) (*allocation, error) {
	b.amu.RLock()
	a, ok := b.allocs[r.ID]
	b.amu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("vulkan: %s: allocation %d is not live on this backend: %w", call, r.ID, storage.ErrUnknownRegion)
	}
	if r.Offset > a.size || r.Size > a.size-r.Offset {
		return nil, fmt.Errorf("vulkan: %s: window [%d, %d) lies outside allocation %d of %d bytes: %w",
			call, r.Offset, storage.SatAdd(r.Offset, r.Size), r.ID, a.size, storage.ErrUnknownRegion)
	}
	return a, nil
}

// marks returns every queue's issued number (WaitOutsideStreams).
func (b *Backend) marks() []queueMark {
	b.mu.Lock()
	defer b.mu.Unlock()
	ms := make([]queueMark, 0, len(b.queues))
	for q := range b.queues {
		ms = append(ms, queueMark{q: q, seq: q.issued.Load()})
	}
	return ms
}

// storageList returns the storages the backend made.
func (b *Backend) storageList() []*deviceStorage {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := make([]*deviceStorage, 0, len(b.storages))
	for s := range b.storages {
		ss = append(ss, s)
	}
	return ss
}

// drainFrees frees the pooled staging buffers whose freeing may make room
// for a page refused with err (stagingToTrim), waits for the releaser, and
// for the work of every queued free that waits only for submitted steps,
// and frees those; it reports whether any allocation was freed. A page
// refused for want of memory calls it before its one retry.
func (b *Backend) drainFrees(err error) bool {
	freed := b.trimStagingFor(err, pageMemory)
	return b.drainQueued() || freed
}

// drainQueued waits for the releaser, and for the work of every queued
// free that waits only for submitted steps, and frees those; it reports
// whether any allocation was freed. An allocation the device's budget
// refused calls it before its one retry: staging buffers do not take that
// budget, so the pool stays.
func (b *Backend) drainQueued() bool {
	freed := false
	if b.reap.pending() {
		freed = true
	}
	b.reap.wait()
	for _, s := range b.storageList() {
		if s.waitQueued() {
			freed = true
		}
	}
	return freed
}

// watchFrees is the releaser's watch (reaper.go): it hands every storage's
// idle queued allocations to the releaser, then waits a little for a step
// a queued allocation waits for. It reports whether some allocation still
// waits for submitted steps (look again); one that a recording or a
// commandGraph holds is looked at again when that lets it go.
func (b *Backend) watchFrees() bool {
	var m queueMark
	found := false
	for _, s := range b.storageList() {
		if _, sm, waiting := s.handOff(); waiting && !found {
			m, found = sm, true
		}
	}
	if found {
		m.q.waitBrief(m.seq)
	}
	return found
}

// Releasing implements gpumem.Releaser: some freed allocation is idle and
// not yet given back, the releaser is freeing one now, or the staging pool
// holds idle buffers or has some out with steps.
func (b *Backend) Releasing() bool {
	if b.reap.pending() || b.stage.held() {
		return true
	}
	for _, s := range b.storageList() {
		if s.hasIdle() {
			return true
		}
	}
	return false
}

// Release implements gpumem.Releaser: every allocation freed so far that no
// device work uses any more goes back to the driver before it returns (the
// idle queued ones freed on the caller's goroutine, the ones the releaser
// was handed waited for), its bytes returned to the budgets and no longer
// in BytesAllocated; so do the staging buffers no device work uses
// (staging.go: a cache of memory nothing uses, which an explicit cleanup
// gives back like any other): each queue is polled, so the steps that
// completed hand theirs back, then the pool is emptied. The others go back
// once their work completes. It takes no lock of the device, and a queue's
// only to poll it (never held while an op runs, V3), and does nothing once
// the backend is closed (Close frees everything).
func (b *Backend) Release() {
	b.life.RLock()
	defer b.life.RUnlock()
	if b.isClosed() {
		return
	}
	for _, s := range b.storageList() {
		s.releaseIdle()
	}
	for _, m := range b.marks() {
		m.q.poll()
	}
	b.trimStaging()
	b.reap.wait()
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// CopyOnDevice implements gpumem.Backend: vkCmdCopyBuffer of src into dst
// (equal sizes) in q's order, submitted by q's next Fence. Consecutive
// copies that do not depend on each other (none reads or writes what an
// earlier one writes, or writes what it reads) share one barrier, up to
// maxBarrierFreeCopies of them.
func (b *Backend) CopyOnDevice(q stream.Queue, src, dst storage.Resource) error {
	vq, err := b.queueOf(q, "copy on device")
	if err != nil {
		return err
	}
	if src.Size != dst.Size {
		return fmt.Errorf("vulkan: copy on device: source of %d bytes, target of %d: %w", src.Size, dst.Size, stream.ErrInvalid)
	}
	if src.Size == 0 {
		return nil
	}
	sa, err := b.lookup(src, "copy on device")
	if err != nil {
		return err
	}
	da, err := b.lookup(dst, "copy on device")
	if err != nil {
		return err
	}
	vq.mu.Lock()
	defer vq.mu.Unlock()
	if vq.closed {
		return vq.closedErr("copy on device")
	}
	if vq.rec != nil {
		return backendkit.CopyWhileRecording("vulkan", vq.index)
	}
	if vq.loose == nil {
		vq.loose = &batch{}
	}
	bt := vq.loose
	// Only copies go into the loose batch: one that depends on none of
	// the copies before it since the last barrier follows them without a
	// barrier (a relocation's copies are distinct slices of distinct
	// pages), so the driver may run them together.
	sr := copyRange{buf: sa.buf, off: src.Offset, size: src.Size}
	dr := copyRange{buf: da.buf, off: dst.Offset, size: dst.Size, write: true}
	cb := bt.cb
	if bt.copyNeedsBarrier(sr, dr) {
		if cb, err = vq.commandsLocked(bt); err != nil {
			return err
		}
	}
	bt.copies = append(bt.copies, sr, dr)
	bt.use(sa)
	bt.use(da)
	region := &vk.BufferCopy{SrcOffset: src.Offset, DstOffset: dst.Offset, Size: src.Size}
	vk.Call(b.dev.fn.CmdCopyBuffer, cb, uintptr(sa.buf), uintptr(da.buf), 1, uintptr(unsafe.Pointer(region)))
	return nil
}

// WaitOutsideStreams implements gpumem.Backend. Every submission this
// backend makes is a step of one of its queues (relocation copies and
// transfers included), so there is no work outside streams: it waits for
// what each queue has issued, on its semaphore (cheaper than
// vkDeviceWaitIdle, which also takes every VkQueue's lock).
func (b *Backend) WaitOutsideStreams() error {
	err := waitMarks(b.marks())
	b.notePoison(err)
	return err
}

// Poisoned returns the first VK_ERROR_DEVICE_LOST the backend saw (it
// matches gpumem.ErrDevicePoisoned), or nil. Once poisoned, close it.
func (b *Backend) Poisoned() error { return b.poison.Err() }

// notePoison keeps err when it is the first device loss (B1, backendkit DK1).
func (b *Backend) notePoison(err error) { b.poison.Note(err) }

// forget drops a closed queue.
func (b *Backend) forget(q *queue) {
	b.mu.Lock()
	delete(b.queues, q)
	b.mu.Unlock()
}

// Close implements gpumem.Backend: closes every queue (its work completes
// first, its graphs are released), stops the releaser, frees every
// allocation, destroys every kernel, then the device and the instance
// (B2). Idempotent.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() { b.closeErr = b.close() })
	return b.closeErr
}

func (b *Backend) close() error {
	b.mu.Lock()
	b.closed = true
	queues := make([]*queue, 0, len(b.queues))
	for q := range b.queues {
		queues = append(queues, q)
	}
	storages := make([]*deviceStorage, 0, len(b.storages))
	for s := range b.storages {
		storages = append(storages, s)
	}
	kernels := make([]*Kernel, 0, len(b.kernels))
	for k := range b.kernels {
		kernels = append(kernels, k)
	}
	b.mu.Unlock()
	var errs []error
	for _, q := range queues {
		errs = append(errs, q.Close())
	}
	errs = append(errs, b.dev.waitIdle())
	b.closeStaging()
	b.reap.close() // frees what it was handed; nothing runs any more
	b.life.Lock()  // no Release in progress
	for _, s := range storages {
		s.release()
	}
	b.life.Unlock()
	for _, k := range kernels {
		k.destroy()
	}
	b.destroyDevice()
	if b.Poisoned() != nil {
		return nil
	}
	return errors.Join(errs...)
}

func (b *Backend) destroyDevice() {
	b.dev.destroy()
	b.inst.destroy()
}
