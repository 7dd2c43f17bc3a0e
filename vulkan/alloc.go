// Device allocations: one VkDeviceMemory with one VkBuffer bound over all
// of it, so every op sees (buffer, offset, size). Pages and staging
// buffers both come from here, and both count against the allocation
// limit.

package vulkan

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// allocation is one VkDeviceMemory and its VkBuffer.
type allocation struct {
	id       storage.ID
	size     uint64 // what was asked for
	reserved uint64 // what the heap budget holds for it (the driver's size)
	mem      uint64 // VkDeviceMemory
	buf      uint64 // VkBuffer
	addr     uint64 // the buffer's device address
	typ      int    // memory type index
	mapped   unsafe.Pointer
	coherent bool
	pooled   bool // a staging buffer of a pool class (staging.go)

	// What device work uses the allocation (K1): a free waits for exactly
	// that, not for every queue. Guarded by useMu.
	useMu sync.Mutex
	// pending counts batches that recorded a command on the allocation and
	// are not yet submitted, or are sealed into a commandGraph that may be
	// launched again: while it is above 0 the allocation may not be freed.
	pending int
	// used is, per queue, the number of the last submitted step that used
	// the allocation.
	used []queueMark
	// freed: deallocated and queued in its deviceStorage.
	freed bool
}

// recorded notes a command on a recorded into a batch not yet submitted.
func (a *allocation) recorded() {
	a.useMu.Lock()
	a.pending++
	a.useMu.Unlock()
}

// submitted notes a submission of a batch that used a as step seq of q;
// done says the batch is over (it will not be submitted again). It
// reports whether a is freed and no batch holds it any more, so its
// storage's releaser has a step to watch.
func (a *allocation) submitted(q *queue, seq uint64, done bool) (watch bool) {
	a.useMu.Lock()
	defer a.useMu.Unlock()
	if done {
		a.pending--
	}
	found := false
	for i := range a.used {
		if a.used[i].q == q {
			a.used[i].seq = max(a.used[i].seq, seq)
			found = true
			break
		}
	}
	if !found {
		a.used = append(a.used, queueMark{q: q, seq: seq})
	}
	return done && a.freed && a.pending == 0
}

// dropped notes that a batch that used a will not be submitted (again);
// it reports what submitted does.
func (a *allocation) dropped() (watch bool) {
	a.useMu.Lock()
	defer a.useMu.Unlock()
	a.pending--
	return a.freed && a.pending == 0
}

// use reads a's state once, under useMu: idle when no device work can use
// a any more (nothing records or holds it, and every step that used it
// completed, or its queue failed: nothing runs there); otherwise waiting,
// with the first use that has not completed, when nothing records or holds
// a (so a wait for it is a wait on a semaphore). A caller that needs both
// answers reads them here in one go: asked apart, a step that completes in
// between makes a neither waitable (asked second) nor idle (asked first),
// and a free the releaser should watch for is lost.
func (a *allocation) use() (m queueMark, waiting, idle bool) {
	a.useMu.Lock()
	defer a.useMu.Unlock()
	if a.pending > 0 {
		return queueMark{}, false, false
	}
	for _, m := range a.used {
		if !m.q.passed(m.seq) {
			return m, true, false
		}
	}
	return queueMark{}, false, true
}

// idle reports whether no device work can use a any more (see use).
func (a *allocation) idle() bool {
	_, _, idle := a.use()
	return idle
}

// bytes returns the mapping as a slice (nil when not mapped).
func (a *allocation) bytes() []byte {
	if a.mapped == nil {
		return nil
	}
	return unsafe.Slice((*byte)(a.mapped), a.size)
}

const allBufferUsage = vk.BufferUsageTransferSrc | vk.BufferUsageTransferDst | vk.BufferUsageStorage | vk.BufferUsageDeviceAddress

// allocate makes an allocation of size bytes (> 0) of a memory type w
// picks, mapped when host-visible. A refusal wraps storage.ErrOutOfMemory:
// the heap budget's (*storage.OutOfMemoryError), the allocation limit's
// (ErrAllocationLimit) or the driver's (*Error). Nothing is left behind.
func (b *Backend) allocate(size uint64, w memoryWants) (*allocation, error) {
	if err := b.takeAllocationSlot(); err != nil {
		return nil, err
	}
	a, err := b.allocateSlotted(size, w)
	if err != nil {
		b.allocCount.Add(-1)
		return nil, err
	}
	return a, nil
}

// takeAllocationSlot counts one more VkDeviceMemory, refusing past the
// limit.
func (b *Backend) takeAllocationSlot() error {
	if n := b.allocCount.Add(1); uint64(n) > uint64(b.maxAllocs) {
		b.allocCount.Add(-1)
		return fmt.Errorf("vulkan: %d device allocations held, the limit is %d (maxMemoryAllocationCount, or Options.MaxAllocations): %w: %w",
			n-1, b.maxAllocs, ErrAllocationLimit, storage.ErrOutOfMemory)
	}
	return nil
}

func (b *Backend) allocateSlotted(size uint64, w memoryWants) (*allocation, error) {
	d := b.dev
	a := &allocation{id: storage.NewID(), size: size}
	bci := &vk.BufferCreateInfo{SType: vk.StBufferCreateInfo, Size: size, Usage: allBufferUsage}
	if err := check("vkCreateBuffer", vk.Call(d.fn.CreateBuffer, d.h, uintptr(unsafe.Pointer(bci)), 0, uintptr(unsafe.Pointer(&a.buf)))); err != nil {
		b.notePoison(err)
		return nil, fmt.Errorf("vulkan: buffer of %d bytes: %w", size, err)
	}
	var req vk.MemoryRequirements
	vk.Call(d.fn.GetBufferMemoryRequirements, d.h, uintptr(a.buf), uintptr(unsafe.Pointer(&req)))
	types := w.candidates(d.info.MemoryTypes, req.MemoryTypeBits)
	if len(types) == 0 {
		vk.Call(d.fn.DestroyBuffer, d.h, uintptr(a.buf), 0)
		return nil, fmt.Errorf("%w: no memory type of device %q has the flags %s for a buffer (memoryTypeBits %#x)",
			ErrUnsupported, d.info.Name, MemoryType{Flags: w.required}, req.MemoryTypeBits)
	}
	var errs []error
	for _, t := range types {
		heap := b.heaps[d.info.MemoryTypes[t].Heap]
		if err := heap.Take(req.Size); err != nil {
			errs = append(errs, fmt.Errorf("vulkan: memory type %d: heap %d budget: %w", t, d.info.MemoryTypes[t].Heap, err))
			continue
		}
		flags := &vk.MemoryAllocateFlagsInfo{SType: vk.StMemoryAllocateFlagsInfo, Flags: vk.MemoryAllocateDeviceAddress}
		mai := &vk.MemoryAllocateInfo{SType: vk.StMemoryAllocateInfo, PNext: unsafe.Pointer(flags), AllocationSize: req.Size, MemoryTypeIndex: uint32(t)}
		err := check("vkAllocateMemory", vk.Call(d.fn.AllocateMemory, d.h, uintptr(unsafe.Pointer(mai)), 0, uintptr(unsafe.Pointer(&a.mem))))
		if err != nil {
			heap.Give(req.Size)
			b.notePoison(err)
			errs = append(errs, fmt.Errorf("vulkan: %d bytes of memory type %d: %w", req.Size, t, err))
			if storage.IsDevicePoisoned(err) || !errors.Is(err, storage.ErrOutOfMemory) {
				break
			}
			continue
		}
		a.typ, a.reserved = t, req.Size
		break
	}
	if a.mem == 0 {
		vk.Call(d.fn.DestroyBuffer, d.h, uintptr(a.buf), 0)
		return nil, errors.Join(errs...)
	}
	fail := func(err error) (*allocation, error) {
		b.release(a)
		b.notePoison(err)
		return nil, err
	}
	if err := check("vkBindBufferMemory", vk.Call(d.fn.BindBufferMemory, d.h, uintptr(a.buf), uintptr(a.mem), 0)); err != nil {
		return fail(err)
	}
	bai := &vk.BufferDeviceAddressInfo{SType: vk.StBufferDeviceAddressInfo, Buffer: a.buf}
	a.addr = vk.Call64(d.fn.GetBufferDeviceAddress, d.h, uintptr(unsafe.Pointer(bai)))
	flagsOf := d.info.MemoryTypes[a.typ].Flags
	if flagsOf&vk.MemoryPropertyHostVisible != 0 && !(b.unmappedPages && w == pageMemory) {
		var p unsafe.Pointer
		if err := check("vkMapMemory", vk.Call(d.fn.MapMemory, d.h, uintptr(a.mem), 0, uintptr(vk.WholeSize), 0, uintptr(unsafe.Pointer(&p)))); err != nil {
			return fail(err)
		}
		a.mapped = p
		a.coherent = flagsOf&vk.MemoryPropertyHostCoherent != 0 && !b.nonCoherent
	}
	return a, nil
}

// free releases a and gives back its allocation slot.
func (b *Backend) free(a *allocation) {
	b.release(a)
	b.allocCount.Add(-1)
	b.frees.Add(1)
}

// release destroys a's buffer and memory (the device no longer uses them)
// and gives back its heap budget; the slot stays taken.
func (b *Backend) release(a *allocation) {
	d := b.dev
	if a.buf != 0 {
		vk.Call(d.fn.DestroyBuffer, d.h, uintptr(a.buf), 0)
	}
	if a.mem != 0 {
		// vkFreeMemory unmaps implicitly.
		vk.Call(d.fn.FreeMemory, d.h, uintptr(a.mem), 0)
		b.heaps[d.info.MemoryTypes[a.typ].Heap].Give(a.reserved)
	}
	a.buf, a.mem, a.mapped = 0, 0, nil
}

// atomRange rounds [off, off+n) of an allocation out to nonCoherentAtomSize,
// clamped to the allocation, as vkFlush/InvalidateMappedMemoryRanges want.
func (b *Backend) atomRange(a *allocation, off, n uint64) (uint64, uint64) {
	atom := max(1, b.dev.info.Limits.NonCoherentAtomSize)
	start := off / atom * atom
	end := min(storage.SatAdd(off, n), a.reserved)
	end = min(storage.SatAdd(end, atom-1)/atom*atom, a.reserved)
	return start, end - start
}

// flushHost makes host writes to a's mapping visible to the device (a no-op
// on coherent memory).
func (b *Backend) flushHost(a *allocation, off, n uint64) error {
	if a.coherent || n == 0 {
		return nil
	}
	o, s := b.atomRange(a, off, n)
	r := &vk.MappedMemoryRange{SType: vk.StMappedMemoryRange, Memory: a.mem, Offset: o, Size: s}
	err := check("vkFlushMappedMemoryRanges", vk.Call(b.dev.fn.FlushMappedMemoryRanges, b.dev.h, 1, uintptr(unsafe.Pointer(r))))
	b.notePoison(err)
	return err
}

// invalidateHost makes device writes to a's mapping visible to the host.
func (b *Backend) invalidateHost(a *allocation, off, n uint64) error {
	if a.coherent || n == 0 {
		return nil
	}
	o, s := b.atomRange(a, off, n)
	r := &vk.MappedMemoryRange{SType: vk.StMappedMemoryRange, Memory: a.mem, Offset: o, Size: s}
	err := check("vkInvalidateMappedMemoryRanges", vk.Call(b.dev.fn.InvalidateMappedMemoryRanges, b.dev.h, 1, uintptr(unsafe.Pointer(r))))
	b.notePoison(err)
	return err
}
