package gpumem

import (
	"context"
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// Buffer is an allocation owned by the stream that allocated it: a value,
// copied freely. A Buffer is one owning reference, and so is each copy of
// it: Clone makes another reference, and each reference is freed exactly
// once (a copy of a freed Buffer is freed too). Its location may change
// (relocation, renumbering); the Buffer follows. The zero Buffer is no
// allocation: calls on it return ErrInvalidUse.
//
// A freed Buffer never reaches another allocation's bytes: the device
// reuses a freed allocation's bookkeeping (its descriptor, the handle a
// Buffer holds) for later allocations, so that an Alloc + Free allocates
// nothing on the Go heap, and a Buffer carries the ID of its own
// allocation, which IDs never repeat (H3); a call on a freed Buffer finds
// the handle released or naming another ID, and returns ErrAlreadyFreed.
type Buffer struct {
	s    *Stream
	h    *handle.Handle // released, or naming another ID ⇔ freed (read under the device lock)
	id   handle.ID      // the allocation's: the handle names it while b lives
	size uint64
}

// BufferID identifies an allocation for its whole life: relocation moves its
// bytes, never its identity. IDs start at 1, grow and are never reused in a
// process, so a history entry or a trace names one allocation however often
// its room is reused; clones of a buffer share its ID.
type BufferID uint64

// newBufferHandleLocked returns a fresh handle for a buffer, never placed,
// in a cell of the device's recycler (d.cells): the cell of a buffer that
// nothing refers to or keys on any more (H6), else a new one.
func (d *Device) newBufferHandleLocked() *handle.Handle {
	h := d.cells.New(handle.Uninit, nil)
	if invariantsOn {
		d.assertUnkeyedLocked(h.Descriptor())
	}
	return h
}

// ID returns the allocation's identity, freed or not (0 for the zero
// Buffer).
func (b Buffer) ID() BufferID { return BufferID(b.id) }

// Size returns the requested size in bytes (0 for the zero Buffer).
func (b Buffer) Size() uint64 { return b.size }

// Stream returns the stream whose memory holds the buffer (nil for the zero
// Buffer).
func (b Buffer) Stream() *Stream { return b.s }

// IsZero reports whether b is the zero Buffer, no allocation's.
func (b Buffer) IsZero() bool { return b == Buffer{} }

// CanMut reports whether this is the only user reference, so the bytes may
// be updated in place. A zero or freed Buffer cannot be updated: false.
func (b Buffer) CanMut() bool {
	if b.valid() != nil {
		return false
	}
	borrowed := b.s.d.lockOrBorrow()
	defer b.s.d.unlock(borrowed)
	return b.liveLocked() && b.h.CanMut()
}

// Clone returns another owning reference to the same allocation; free both.
// It returns the zero Buffer when b is already freed.
func (b Buffer) Clone() Buffer {
	if b.valid() != nil {
		return Buffer{}
	}
	d := b.s.d
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	if !b.liveLocked() {
		return Buffer{}
	}
	return Buffer{s: b.s, h: b.h.Clone(), id: b.id, size: b.size}
}

// Free drops this reference. The memory is reused once no reference and no
// pending use remains. A second call (on b or a copy of it) returns
// ErrAlreadyFreed.
func (b Buffer) Free() error {
	if err := b.valid(); err != nil {
		return err
	}
	d := b.s.d
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	if !b.liveLocked() {
		return b.errFreed()
	}
	if b.s.cap != nil {
		b.s.cap.freedLocked(b)
	}
	if h := d.hist; h != nil && b.h.Descriptor().Handles() <= 2 {
		// The last user reference (the slice holds the other handle): the
		// buffer is freed.
		h.freeLocked(b.s, b.id, b.size, b.h.Descriptor())
	}
	b.h.Release()
	if c := b.s.cap; c != nil && len(c.given) > 0 {
		c.giveBackLocked() // the slice is free now: back to the recording's room
	}
	return nil
}

// Write copies data into the buffer from offset 0, in stream order. data is
// copied before Write returns.
func (b Buffer) Write(ctx context.Context, data []byte) error {
	if err := b.valid(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	d := b.s.d
	if len(data) == 0 || uint64(len(data)) > b.size {
		// Nothing to enqueue, or too much: a freed buffer or closed device
		// still says so first, whatever the data's length.
		if err := d.lockUnlessBorrowed("Buffer.Write"); err != nil {
			return err
		}
		err := b.usableLocked()
		d.mu.Unlock()
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return nil
		}
		return fmt.Errorf("%w: writing %d bytes into buffer %d of %d bytes", ErrInvalidUse, len(data), b.id, b.size)
	}
	src := append([]byte(nil), data...)
	if err := d.lockUnlessBorrowed("Buffer.Write"); err != nil {
		return err
	}
	defer b.s.flushHeld() // after the unlock below: held queues run the write now
	defer d.mu.Unlock()
	if b.s.cap != nil {
		b.s.cap.retainLocked(src)
	}
	transfers, _ := d.backend.(HostTransfers)
	q := b.s.q
	return b.s.enqueueLocked("write", []Use{{Buffer: b, Access: Write, Size: uint64(len(src))}}, func(res []storage.Resource) error {
		if res[0].Bytes == nil && res[0].Ptr != 0 && transfers != nil {
			return transfers.CopyToDevice(q, res[0], src)
		}
		copy(res[0].Bytes, src)
		return nil
	})
}

// Read returns a copy of the buffer's bytes once every earlier op on its
// stream has run. Bytes a failed op left unwritten return an error wrapping
// ErrUnwritten and the failure, never stale bytes. On a recording stream it
// returns ErrRecording and dooms the recording.
func (b Buffer) Read(ctx context.Context) ([]byte, error) {
	if err := b.valid(); err != nil {
		return nil, err
	}
	if t, ok := b.s.d.backend.(HostTransfers); ok {
		return b.readThrough(ctx, t)
	}
	res, bind, err := b.hostView(ctx, "Read")
	if err != nil {
		return nil, err
	}
	// Copied while the binding holds the bytes in place.
	out := make([]byte, len(res.Bytes))
	copy(out, res.Bytes)
	d := b.s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	bind.Release()
	d.collectFailuresLocked()
	if err := b.checkUnwrittenLocked(); err != nil {
		return nil, err
	}
	return out, nil
}

// hostView waits until the buffer's pending work (on its stream and every
// stream that used it) has run and returns its resolved bytes with a binding
// that keeps them where they are (no relocation moves a bound page, no
// cleanup releases it). The caller releases the binding under the lock once
// done with the bytes.
func (b Buffer) hostView(ctx context.Context, op string) (storage.Resource, *handle.Binding, error) {
	if err := ctx.Err(); err != nil {
		return storage.Resource{}, nil, err
	}
	s := b.s
	d := s.d
	if err := d.lockUnlessBorrowed("Buffer.Read or Map"); err != nil {
		return storage.Resource{}, nil, err
	}
	fail := func(err error) (storage.Resource, *handle.Binding, error) {
		d.mu.Unlock()
		return storage.Resource{}, nil, err
	}
	if err := b.usableLocked(); err != nil {
		return fail(err)
	}
	if err := s.refuseHostSyncLocked(op); err != nil {
		return fail(err)
	}
	d.collectFailuresLocked()
	if err := b.checkUnwrittenLocked(); err != nil {
		return fail(err)
	}
	res, err := s.mem.Resolve(b.h)
	if err != nil {
		return fail(err)
	}
	if res.Bytes == nil && b.size > 0 && (op != "Map" || d.hostBytes(res) == nil) {
		return fail(fmt.Errorf("%w: %s of buffer %d: the %s backend holds no host bytes", ErrNotSupported, op, b.id, d.backend.Name()))
	}
	var fences []stream.Fence
	if f, err := s.q.Fence(); err == nil {
		fences = append(fences, f)
	}
	// A passed fence needs no wait (and a recording queue would refuse one).
	fences = append(fences, d.foreign.pendingFor(b.h.Descriptor(), nil)...)
	if err := d.refuseWaitFromOpLocked(fences...); err != nil {
		return fail(err)
	}
	bind := b.h.Binding()
	d.mu.Unlock()
	var werr error
	for _, f := range fences {
		if werr = f.Q.Wait(ctx, f); werr != nil {
			break
		}
	}
	if werr != nil {
		d.mu.Lock()
		bind.Release()
		d.mu.Unlock()
		return storage.Resource{}, nil, werr
	}
	return res, bind, nil
}

// valid refuses the zero Buffer, or one not made by Stream.Alloc or Clone.
func (b Buffer) valid() error {
	if b.s == nil || b.h == nil {
		return fmt.Errorf("%w: zero buffer, or one not made by Stream.Alloc", ErrInvalidUse)
	}
	return nil
}

// liveLocked reports whether b is not freed: its handle not released, and
// not reused for a later allocation (whose ID it would name).
func (b Buffer) liveLocked() bool { return !b.h.Released() && b.h.ID() == b.id }

// errFreed is the refusal of a freed b.
func (b Buffer) errFreed() error { return fmt.Errorf("%w: buffer %d", ErrAlreadyFreed, b.id) }

// usableLocked refuses a closed device or a freed buffer.
func (b Buffer) usableLocked() error {
	if b.s.d.closed {
		return ErrClosed
	}
	if !b.liveLocked() {
		return b.errFreed()
	}
	return nil
}

// checkUnwrittenLocked reports the failure marking any byte of the buffer.
func (b Buffer) checkUnwrittenLocked() error {
	f, ok, err := b.s.mem.FindFailure(b.h, 0, b.size)
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	return b.s.d.g.Report(f, b.id)
}

// Mapping is a host view of a buffer's bytes. It holds a binding, so the
// bytes stay where they are (relocation leaves the page in place) until
// Release.
type Mapping struct {
	d     *Device
	b     *handle.Binding
	bytes []byte
	done  bool
	// res is the mapped window when the backend maps device memory
	// (HostMapper): Release flushes the host's writes to it.
	res    storage.Resource
	mapper HostMapper
}

// HostMapper is implemented by a backend whose device memory the host may
// address through a mapping where the driver allows it (Vulkan on
// integrated GPUs and lavapipe, whose device-local memory is
// host-visible): Buffer.Map uses it where the storage resolves no host
// bytes. Writes through the mapping reach the device at Mapping.Release.
type HostMapper interface {
	// HostBytes returns the host view of r, or nil when r's memory is not
	// mapped. The view stays valid while r's allocation lives.
	HostBytes(r storage.Resource) []byte
	// InvalidateHost makes the device's writes to r visible to the host
	// (the work that wrote them completed); FlushHost makes the host's
	// writes visible to the device. Both are no-ops on coherent memory.
	InvalidateHost(r storage.Resource) error
	FlushHost(r storage.Resource) error
}

// hostBytes returns the backend's host view of res (HostMapper), or nil.
func (d *Device) hostBytes(res storage.Resource) []byte {
	if m, ok := d.backend.(HostMapper); ok {
		return m.HostBytes(res)
	}
	return nil
}

// Map waits for the buffer's pending work and returns a view of its bytes:
// the host backend's, or a mapping of device memory where the backend
// allows one (HostMapper), else ErrNotSupported. Release it when done;
// on a mapping of device memory, writes reach the device at Release.
func (b Buffer) Map(ctx context.Context) (*Mapping, error) {
	if err := b.valid(); err != nil {
		return nil, err
	}
	res, bind, err := b.hostView(ctx, "Map")
	if err != nil {
		return nil, err
	}
	d := b.s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	bind.Release()
	d.collectFailuresLocked()
	if err := b.usableLocked(); err != nil {
		return nil, err
	}
	if err := b.checkUnwrittenLocked(); err != nil {
		return nil, err
	}
	// Re-resolve under the lock: the bytes may have moved during the wait.
	res, err = b.s.mem.Resolve(b.h)
	if err != nil {
		return nil, err
	}
	m := &Mapping{d: d, bytes: res.Bytes}
	if res.Bytes == nil && b.size > 0 {
		hm, _ := d.backend.(HostMapper)
		if hm != nil {
			m.bytes = hm.HostBytes(res)
		}
		if m.bytes == nil {
			return nil, fmt.Errorf("%w: Map of buffer %d: the %s backend holds no host bytes", ErrNotSupported, b.id, d.backend.Name())
		}
		if err := hm.InvalidateHost(res); err != nil {
			return nil, fmt.Errorf("gpumem: mapping buffer %d: %w", b.id, err)
		}
		m.res, m.mapper = res, hm
	}
	m.b = b.h.Binding()
	return m, nil
}

// Bytes returns the mapped bytes; valid until Release (nil for a nil
// Mapping).
func (m *Mapping) Bytes() []byte {
	if m == nil {
		return nil
	}
	return m.bytes
}

// Release drops the mapping's binding; later calls, and calls on a nil or
// zero Mapping, do nothing.
func (m *Mapping) Release() {
	if m == nil || m.d == nil {
		return
	}
	borrowed := m.d.lockOrBorrow()
	defer m.d.unlock(borrowed)
	if m.done {
		return
	}
	m.done = true
	m.bytes = nil
	if m.mapper != nil {
		// A failure here is the device's (it was lost): nothing reads the
		// bytes any more, and the device reports it on its next call.
		_ = m.mapper.FlushHost(m.res)
	}
	m.b.Release()
}

// HostTransfers is implemented by backends whose memory the host cannot
// address (a GPU driver): Write and Read copy through them, inside an op on
// the buffer's stream, so they stay in stream order.
type HostTransfers interface {
	// CopyToDevice copies src into dst; it runs inside an op on q.
	CopyToDevice(q stream.Queue, dst storage.Resource, src []byte) error
	// CopyToHost copies src into dst; it runs inside an op on q.
	CopyToHost(q stream.Queue, dst []byte, src storage.Resource) error
}

// readThrough reads the buffer with a device-to-host copy enqueued on its
// stream, then waits for it.
func (b Buffer) readThrough(ctx context.Context, t HostTransfers) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := b.s
	d := s.d
	out := make([]byte, b.size)
	if err := d.lockUnlessBorrowed("Buffer.Read"); err != nil {
		return nil, err
	}
	d.admitWorkLocked() // before the checks: it may release the lock (settle.go)
	if err := b.usableLocked(); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	if err := s.refuseHostSyncLocked("Read"); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	var fences []stream.Fence
	// readErr is written by the op and read after its fence passed (the
	// queue's completion orders the two).
	var readErr error
	if b.size > 0 {
		err := s.enqueueLocked("read", []Use{{Buffer: b, Access: Read}}, func(res []storage.Resource) error {
			readErr = t.CopyToHost(s.q, out, res[0])
			return readErr
		})
		if err != nil {
			d.mu.Unlock()
			return nil, err
		}
	}
	if f, err := s.q.Fence(); err == nil {
		fences = append(fences, f)
	}
	if err := d.refuseWaitFromOpLocked(fences...); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.mu.Unlock()
	s.flushHeld()
	for _, f := range fences {
		if err := f.Q.Wait(ctx, f); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.collectFailuresLocked()
	if readErr != nil {
		return nil, fmt.Errorf("gpumem: reading buffer %d: %w", b.id, readErr)
	}
	if err := b.checkUnwrittenLocked(); err != nil {
		return nil, err
	}
	return out, nil
}
