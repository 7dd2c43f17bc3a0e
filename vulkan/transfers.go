// Host transfers (gpumem.HostTransfers): Write and Read inside ops.
//
// Where a page's memory is host-visible (integrated GPUs, lavapipe) and
// Options.Staging is off, the host copies through the mapping: the op
// first submits what it recorded and waits for the stream's earlier work
// (a host synchronisation inside the op, which takes a sequence number),
// then copies, flushing or invalidating by nonCoherentAtomSize where the
// memory is not coherent. Otherwise a host-visible staging buffer carries
// the bytes: a write fills it and records vkCmdCopyBuffer into the page
// (asynchronous; the staging buffer goes back to the pool, staging.go,
// when the step completes, or, in a capture, which writes through staging
// always, when its commandGraph is released: every launch copies the same
// bytes again); a read records the copy out of the page, waits for it, and
// copies out of the staging buffer.

package vulkan

import (
	"fmt"
	"unsafe"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// opQueue returns q as this backend's queue with an op running, locked.
func (b *Backend) opQueue(q stream.Queue, call string) (*queue, error) {
	vq, err := b.queueOf(q, call)
	if err != nil {
		return nil, err
	}
	vq.mu.Lock()
	if vq.op == nil {
		vq.mu.Unlock()
		return nil, fmt.Errorf("vulkan: %s outside an op of stream %d (call it from the op's run function): %w", call, vq.index, stream.ErrInvalid)
	}
	return vq, nil
}

// CopyToDevice implements gpumem.HostTransfers: src into dst, inside an op
// on q. src may be reused when it returns.
func (b *Backend) CopyToDevice(q stream.Queue, dst storage.Resource, src []byte) error {
	if uint64(len(src)) > dst.Size {
		return fmt.Errorf("vulkan: copy to device: %d bytes into a window of %d: %w", len(src), dst.Size, stream.ErrInvalid)
	}
	if len(src) == 0 {
		return nil
	}
	a, err := b.lookup(dst, "copy to device")
	if err != nil {
		return err
	}
	vq, err := b.opQueue(q, "copy to device")
	if err != nil {
		return err
	}
	defer vq.mu.Unlock()
	n := uint64(len(src))
	if a.mapped != nil && !b.opts.Staging && vq.rec == nil {
		if err := vq.hostSyncLocked("write"); err != nil {
			return err
		}
		copy(a.bytes()[dst.Offset:dst.Offset+n], src)
		return b.flushHost(a, dst.Offset, n)
	}
	st, err := b.staging(n)
	if err != nil {
		return err
	}
	vq.op.staging = append(vq.op.staging, st)
	copy(st.bytes(), src)
	if err := b.flushHost(st, 0, n); err != nil {
		return err
	}
	cb, err := vq.commandsLocked(vq.op)
	if err != nil {
		return err
	}
	vq.op.use(a)
	region := &vk.BufferCopy{SrcOffset: 0, DstOffset: dst.Offset, Size: n}
	vk.Call(b.dev.fn.CmdCopyBuffer, cb, uintptr(st.buf), uintptr(a.buf), 1, uintptr(unsafe.Pointer(region)))
	return nil
}

// CopyToHost implements gpumem.HostTransfers: src into dst, inside an op
// on q; the bytes are in dst when it returns.
func (b *Backend) CopyToHost(q stream.Queue, dst []byte, src storage.Resource) error {
	if uint64(len(dst)) > src.Size {
		return fmt.Errorf("vulkan: copy to host: %d bytes from a window of %d: %w", len(dst), src.Size, stream.ErrInvalid)
	}
	if len(dst) == 0 {
		return nil
	}
	a, err := b.lookup(src, "copy to host")
	if err != nil {
		return err
	}
	vq, err := b.opQueue(q, "copy to host")
	if err != nil {
		return err
	}
	defer vq.mu.Unlock()
	n := uint64(len(dst))
	if a.mapped != nil && !b.opts.Staging {
		if err := vq.hostSyncLocked("read"); err != nil {
			return err
		}
		if err := b.invalidateHost(a, src.Offset, n); err != nil {
			return err
		}
		copy(dst, a.bytes()[src.Offset:src.Offset+n])
		return nil
	}
	st, err := b.staging(n)
	if err != nil {
		return err
	}
	cb, err := vq.commandsLocked(vq.op)
	if err != nil {
		b.putStaging(st)
		return err
	}
	vq.op.use(a)
	region := &vk.BufferCopy{SrcOffset: src.Offset, DstOffset: 0, Size: n}
	vk.Call(b.dev.fn.CmdCopyBuffer, cb, uintptr(a.buf), uintptr(st.buf), 1, uintptr(unsafe.Pointer(region)))
	err = vq.hostSyncLocked("read")
	// Held by the batch after the synchronisation, so it lives until the
	// op's step completes, past the copy out below.
	vq.op.staging = append(vq.op.staging, st)
	if err != nil {
		return err
	}
	if err := b.invalidateHost(st, 0, n); err != nil {
		return err
	}
	copy(dst, st.bytes())
	return nil
}

// HostBytes implements gpumem.HostMapper: the window of r in its
// allocation's mapping, or nil where the memory is not host-visible (or r
// is not live).
func (b *Backend) HostBytes(r storage.Resource) []byte {
	a, err := b.lookup(r, "map")
	if err != nil || a.mapped == nil {
		return nil
	}
	return a.bytes()[r.Offset : r.Offset+r.Size : r.Offset+r.Size]
}

// InvalidateHost implements gpumem.HostMapper: vkInvalidateMappedMemoryRanges
// over r, rounded out to nonCoherentAtomSize, where the memory is not
// coherent.
func (b *Backend) InvalidateHost(r storage.Resource) error {
	a, err := b.lookup(r, "map")
	if err != nil || a.mapped == nil {
		return err
	}
	return b.invalidateHost(a, r.Offset, r.Size)
}

// FlushHost implements gpumem.HostMapper: vkFlushMappedMemoryRanges over
// r where the memory is not coherent. An allocation no longer live (the
// device closed) has nothing to flush.
func (b *Backend) FlushHost(r storage.Resource) error {
	a, err := b.lookup(r, "unmap")
	if err != nil || a.mapped == nil {
		return nil
	}
	return b.flushHost(a, r.Offset, r.Size)
}

// PagesHostVisible reports whether the memory type pages get is
// host-visible (lavapipe's, integrated GPUs'): then Buffer.Map maps device
// memory (gpumem.HostMapper), and Write and Read go through the mapping
// unless Options.Staging.
func (b *Backend) PagesHostVisible() bool { return b.pagesMapped }
