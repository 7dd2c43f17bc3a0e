package gpumem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// Device is one accelerator, or the host standing in for one: its streams,
// their memories and one lock. Open it with Open or OpenBackend; Close it.
type Device struct {
	backend Backend
	budget  *storage.Budget
	props   memory.Properties
	cfg     memory.Config
	log     *slog.Logger
	wrap    func(storage.Storage) storage.Storage
	// noRelocate: WithoutRelocation; the device reports nothing movable.
	noRelocate bool
	// noCompact: WithoutCompaction; the device never compacts current
	// pages (relocation off outdated pages still runs).
	noCompact bool

	// mu guards every field below, every manager, pool, location write, the
	// error graph, capture records and deferred-release lists (D3).
	mu      sync.Mutex
	g       *handle.ErrorGraph
	streams []*Stream
	closed  bool
	// foreign holds, per allocation, the fences of uses by streams other than
	// its owner: the owner's next use waits on them (X2).
	foreign crossStreamNotes
	// writers indexes, per allocation and in enqueue order, the records of
	// ops that write it and are not yet known complete; epoch numbers them
	// (writes.go).
	writers      map[*handle.Descriptor][]*writeRecord
	placeholders []*writeRecord // marks placed without a running op (writes.go)
	epoch        uint64
	counters     counters
	// cells recycles buffers' descriptors (buffer.go): the steady
	// Alloc + Free pair allocates nothing.
	cells handle.Recycler

	// gated counts settles holding new work back; admit (on mu) wakes the
	// held callers when one ends (settle.go).
	gated int
	admit sync.Cond

	// lentTo is the stream whose executor runs an op while the lock's
	// holder waits in its Enqueue (settle.go), nil otherwise.
	lentTo  atomic.Pointer[Stream]
	nextTok stream.Owner

	// hist is the running recording, nil when none (every hook checks it:
	// recording off costs that nil check); stopped is the last recording
	// StopHistory ended, kept for the writers (history.go). Under mu.
	hist, stopped *history
}

// counters are the device's own statistics (under mu).
type counters struct {
	reserveRetries     uint64
	dedicatedFallbacks uint64
	explicitCleanups   uint64
	failedReserves     map[string]uint64
	captures           CaptureStats
}

// Open opens a device on the host backend: real host bytes and one worker
// goroutine per stream (WithSim: accounting only, inline queues).
func Open(opts ...Option) (*Device, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	b := &hostBackend{sim: o.sim, props: hostProperties(o.capacity)}
	return openWith(b, o)
}

// OpenBackend opens a device on b.
func OpenBackend(b Backend, opts ...Option) (*Device, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrNotSupported)
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	return openWith(b, o)
}

func openWith(b Backend, o options) (*Device, error) {
	props := b.Properties().internal()
	if o.capacity != 0 && (props.MaxMemory == 0 || o.capacity < props.MaxMemory) {
		props.MaxMemory = o.capacity
	}
	if o.props != nil {
		props = *o.props
	}
	cfg := o.cfg.internal()
	if err := cfg.Validate(props); err != nil {
		return nil, err
	}
	log := o.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Device{
		backend:    b,
		budget:     storage.NewBudget(o.capacity),
		props:      props,
		cfg:        cfg,
		log:        log,
		wrap:       o.wrapStorage,
		noRelocate: o.noRelocate,
		noCompact:  o.noCompact,
		g:          handle.NewErrorGraph(),
		foreign:    make(crossStreamNotes),
		writers:    make(map[*handle.Descriptor][]*writeRecord),
	}
	d.counters.failedReserves = make(map[string]uint64)
	d.admit.L = &d.mu
	if o.history != nil {
		ho, err := o.history.validate()
		if err != nil {
			return nil, fmt.Errorf("%w (WithHistory)", err)
		}
		d.hist = newHistory(ho, d.histSince)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.newStreamLocked(); err != nil {
		return nil, err
	}
	return d, nil
}

// Backend returns the device's backend.
func (d *Device) Backend() Backend { return d.backend }

// Properties returns the memory properties every stream uses.
func (d *Device) Properties() Properties { return Properties(d.props) }

// NewStream adds a stream with its own queue and memory.
func (d *Device) NewStream() (*Stream, error) {
	if err := d.lockUnlessBorrowed("Device.NewStream"); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	return d.newStreamLocked()
}

func (d *Device) newStreamLocked() (*Stream, error) {
	index := len(d.streams)
	st, err := d.backend.NewStorage(d.budget)
	if err != nil {
		return nil, err
	}
	if d.wrap != nil {
		if st = d.wrap(st); st == nil {
			return nil, fmt.Errorf("%w: the WithStorageWrapper function returned a nil storage.Storage", ErrInvalidUse)
		}
	}
	counted := &countedStorage{Storage: st, d: d, stream: index, sizes: make(map[storage.ID]uint64), mapped: make(map[storage.ID]uint64)}
	name := fmt.Sprintf("stream-%d", index)
	mem, err := memory.New(counted, d.props, d.cfg, d.log, name, d.g)
	if err != nil {
		return nil, err
	}
	q, err := d.backend.NewQueue(index)
	if err != nil {
		return nil, err
	}
	counted.q = q
	rec, _ := q.(stream.Recorder) // nil: the backend's queues cannot record graphs
	counted.rec = rec
	counted.issuer, _ = q.(stream.Issuer)
	s := &Stream{d: d, index: index, name: name, q: q, rec: rec, mem: mem, st: counted}
	s.self = streamsOf{d: d, s: s}
	if w, ok := q.(hostqueue.StorageWatcher); ok {
		if o, ok := st.(hoststorage.Observable); ok {
			o.SetObserver(w.ObserveStorage)
		}
	}
	d.streams = append(d.streams, s)
	if h := d.hist; h != nil {
		h.streamAddedLocked(s)
	}
	return s, nil
}

// DefaultStream returns the stream Open created.
func (d *Device) DefaultStream() *Stream {
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	return d.streams[0]
}

// Streams returns the device's streams in creation order.
func (d *Device) Streams() []*Stream {
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	return append([]*Stream(nil), d.streams...)
}

// Cleanup gives memory back now, on every stream: refused while a stream
// records (ErrRecording, before any wait); otherwise deferred cross-stream
// frees are drained, what outdated pages hold is relocated, and every empty
// page goes back. When that needs streams' work done it waits without
// holding the device lock; when ctx ends first it returns ctx's error with
// nothing done. On a backend that frees off the caller's path (Releaser)
// the pages it gave back are freed before it returns, with the lock
// released, so BytesAllocated no longer counts them.
func (d *Device) Cleanup(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.lockUnlessBorrowed("Device.Cleanup"); err != nil {
		return err
	}
	if d.closed {
		d.mu.Unlock()
		return ErrClosed
	}
	err := d.cleanupLocked(ctx, d.streams)
	d.releaseAndUnlock(err == nil)
	return err
}

// releaseAndUnlock ends an explicit cleanup: it releases the device lock
// and, when the cleanup did its work (release) on a backend that gives
// freed memory back off the caller's path (Releaser), has the backend give
// back what no queued work uses, with the lock released (design §9.7: the
// frees take time, and nothing here needs the lock).
func (d *Device) releaseAndUnlock(release bool) {
	if invariantsOn {
		d.assertLocked("releaseAndUnlock")
	}
	r, ok := d.backend.(Releaser)
	if !release || !ok || !r.Releasing() {
		d.mu.Unlock()
		return
	}
	d.mu.Unlock()
	r.Release()
}

// cleanupLocked is an explicit cleanup of the given streams (Device.Cleanup,
// Stream.Cleanup): refused while a stream records, then the reclaim.
func (d *Device) cleanupLocked(ctx context.Context, of []*Stream) error {
	if invariantsOn {
		d.assertLocked("cleanupLocked")
	}
	if err := d.refuseWhileRecordingLocked(of[0]); err != nil {
		return err
	}
	if err := d.reclaimLocked(ctx, of, reclaimHow{relocate: true, reason: relocation.Explicit}); err != nil {
		return err
	}
	d.counters.explicitCleanups++
	if h := d.hist; h != nil {
		for _, s := range of {
			h.cleanupLocked(s, true)
		}
	}
	return nil
}

// cleanupWaitsLocked reports whether an explicit cleanup of the given
// streams would wait for streams' work: deferred cross-stream uses, held
// releases, or outdated pages to relocate. A cleanup with nothing of the
// kind returns at once, even while streams are busy.
func (d *Device) cleanupWaitsLocked(of ...*Stream) bool {
	for _, s := range d.streams {
		if len(s.deferred) > 0 {
			return true
		}
	}
	for _, s := range of {
		if len(s.st.held) > 0 || (!d.noRelocate && s.mem.HasOutdated()) {
			return true
		}
	}
	return false
}

// refuseWhileRecordingLocked returns ErrRecording naming the recording
// stream.
func (d *Device) refuseWhileRecordingLocked(s *Stream) error {
	if err := relocation.RefuseWhileRecording(s.self); err != nil {
		if r := d.recordingLocked(); r != nil {
			return fmt.Errorf("%w (%s records a graph)", err, r.name)
		}
		return err
	}
	return nil
}

// recordingLocked returns the stream that records, or nil.
func (d *Device) recordingLocked() *Stream {
	if invariantsOn {
		d.assertLocked("recordingLocked")
	}
	for _, s := range d.streams {
		if s.capture.Recording() {
			return s
		}
	}
	return nil
}

// Close closes the device: every queue runs what it holds and stops. It is
// idempotent; every later call on the device returns ErrClosed. Refused with
// ErrRecording while a stream records, and with ErrCalledFromOp from inside
// an op (the queues would wait for it). The queues drain without the device
// lock held, so an op still running may call the device (which refuses work
// with ErrClosed).
func (d *Device) Close() error {
	if err := d.lockUnlessBorrowed("Device.Close"); err != nil {
		return err
	}
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	if r := d.recordingLocked(); r != nil {
		d.mu.Unlock()
		return fmt.Errorf("%w: %s records a graph; end or abort its capture before closing", ErrRecording, r.name)
	}
	if d.calledFromOpLocked() {
		d.mu.Unlock()
		return fmt.Errorf("gpumem: closing the device: %w", ErrCalledFromOp)
	}
	d.closed = true
	streams := append([]*Stream(nil), d.streams...)
	d.mu.Unlock()
	var errs []error
	for _, s := range streams {
		errs = append(errs, s.q.Close())
	}
	d.mu.Lock()
	for _, s := range streams {
		s.st.forgetHeld() // every queue ran what it held
	}
	d.mu.Unlock()
	errs = append(errs, d.backend.Close())
	return errors.Join(errs...)
}

// countedStorage counts storage calls for Stats, and forwards fault
// injection to a wrapped Faulty storage.
//
// It also holds back deallocations and granule unmaps while the stream
// still has work queued: a freed slice is reused in stream order, but a page
// handed back to the storage, or a granule unmapped (an unmapped host granule
// reads as zero; a driver's faults), follows no order, and an op queued
// before the free may still read it. A held release goes through once the
// stream's fence at the time of the free has passed (Flush, the next
// reservation, Synchronize), or at once on an explicit cleanup, which waits.
// A granule mapped again while its unmap is held simply stays mapped: the
// unmap is withdrawn. Its methods run under the device lock.
type countedStorage struct {
	storage.Storage
	d                *Device // its history records storage calls (history.go)
	stream           int     // the owning stream's index
	allocs, deallocs atomic.Uint64
	// sizes holds the size of every storage allocation not yet handed back
	// (held ones included): a snapshot draws held pages, and the history
	// numbers addresses by them.
	sizes map[storage.ID]uint64
	// mapped counts, per granular reservation not yet handed back, the
	// granules the storage maps for it (held unmaps included).
	mapped map[storage.ID]uint64
	q      stream.Queue    // the owning stream's queue, set once it exists
	rec    stream.Recorder // q, when it can record graphs
	issuer stream.Issuer   // q, when it reports its last step without locking
	// held is in seq order; an unmap precedes the dealloc of its allocation.
	held []heldRelease
	// The holds Stream.HoldReleases opened (holds.go): opened counts them,
	// passed is how many of the first ones passed, every one up to it;
	// passedLater marks later ones passed out of order.
	vOpened, vPassed uint64
	vPassedLater     map[uint64]bool
	// released tallies what the pools handed back through this storage,
	// held or not, so a call that gives memory back can report it
	// (Defragment's result, read as differences under the device lock).
	released releaseTally
}

// releaseTally counts what pools handed back to the device: storage
// allocations (pages, dedicated buffers, persistent slots) and the device
// bytes they held — an allocation's size, a granular reservation's mapped
// granules — plus granules unmapped from pages that stay.
type releaseTally struct{ pages, bytes uint64 }

func (t releaseTally) less(u releaseTally) releaseTally {
	return releaseTally{pages: t.pages - u.pages, bytes: t.bytes - u.bytes}
}

// deviceBytes is the device memory allocation id holds: a granular
// reservation's mapped granules less those whose unmap is held (counted as
// released when the unmap was asked for), any other allocation's size.
func (c *countedStorage) deviceBytes(id storage.ID) uint64 {
	m, reserved := c.mapped[id]
	if !reserved {
		return c.sizes[id]
	}
	var held uint64
	for _, h := range c.held {
		if h.id == id && h.n != 0 {
			held += h.n
		}
	}
	return storage.SatSub(m, held) * c.Granule()
}

// heldRelease is a deallocation (n == 0) or an unmap of granules
// [first, first+n) of allocation id, waiting for seq on the stream and for
// the HoldReleases hold vseq (0: none) to pass.
type heldRelease struct {
	seq, vseq uint64
	id        storage.ID
	first, n  uint64
}

// recording reports whether the stream's queue records a graph.
func (c *countedStorage) recording() bool { return c.rec != nil && c.rec.Recording() }

// busyUntil returns the sequence number the stream's queued work ends at,
// or 0 when nothing is pending.
func (c *countedStorage) busyUntil() uint64 {
	if c.q == nil {
		return 0
	}
	if c.issuer != nil { // every Alloc asks: no fence lock
		if seq := c.issuer.Issued(); seq > c.q.Completed() {
			return seq
		}
		return 0
	}
	f, err := c.q.Fence()
	if err != nil || f.Seq <= c.q.Completed() {
		return 0
	}
	return f.Seq
}

// releasePassed forwards the held releases whose work has completed. Not
// while the stream records: a storage call inside a recording invalidates
// it (the driver cannot capture one), so they wait for the recording's end.
func (c *countedStorage) releasePassed() {
	if len(c.held) == 0 || c.recording() {
		return
	}
	done := c.q.Completed()
	k := 0
	for k < len(c.held) && c.held[k].seq <= done && c.held[k].vseq <= c.vPassed {
		c.forward(c.held[k])
		k++
	}
	if k > 0 {
		clear(c.held[:k])
		c.held = c.held[k:]
		c.notePassed()
		c.Storage.Flush() // a storage that queues releases (cuda) carries them out now
	}
}

// notePassed records, after held releases went, what the oldest one still
// held waits for.
func (c *countedStorage) notePassed() {
	if h := c.d.hist; h != nil {
		if len(c.held) == 0 {
			h.passedLocked(c.stream, false, 0, 0)
		} else {
			h.passedLocked(c.stream, true, c.held[0].seq, c.held[0].vseq)
		}
	}
}

// holdsUnpassed reports whether a held release waits for work not yet
// completed.
func (c *countedStorage) holdsUnpassed() bool {
	return len(c.held) > 0 && c.held[len(c.held)-1].seq > c.q.Completed()
}

// forgetHeld forwards every held release without waiting: for a closed
// device, whose queues ran everything they held.
func (c *countedStorage) forgetHeld() {
	if len(c.held) == 0 {
		return
	}
	for _, h := range c.held {
		c.forward(h)
	}
	c.held = nil
	c.notePassed()
	c.Storage.Flush() // a storage that queues releases (cuda) carries them out now
}

func (c *countedStorage) forward(h heldRelease) {
	if h.n == 0 {
		c.dealloc(h.id, true)
		return
	}
	if g, ok := c.Storage.(storage.Granular); ok {
		c.unmap(g, h.id, h.first, h.n, true)
	}
}

// dealloc hands allocation id back to the storage now, and records it
// (forwarded: a release that had been held).
func (c *countedStorage) dealloc(id storage.ID, forwarded bool) {
	c.Storage.Dealloc(id)
	if h := c.d.hist; h != nil {
		_, reserved := c.mapped[id]
		h.pageFreeLocked(c.stream, id, c.sizes[id], c.Granule(), reserved, forwarded)
	}
	delete(c.sizes, id)
	delete(c.mapped, id)
}

// unmap unmaps granules [first, first+n) of id now, and records it
// (forwarded: an unmap that had been held).
func (c *countedStorage) unmap(g storage.Granular, id storage.ID, first, n uint64, forwarded bool) {
	g.Unmap(id, first, n)
	if _, ok := c.mapped[id]; ok {
		c.mapped[id] -= min(n, c.mapped[id])
	}
	if h := c.d.hist; h != nil {
		h.mapLocked(HistoryUnmap, c.stream, id, c.sizes[id], first, n, c.Granule(), forwarded)
	}
}

// Flush forwards the held releases whose work completed, then flushes.
func (c *countedStorage) Flush() {
	c.releasePassed()
	c.Storage.Flush()
}

func (c *countedStorage) Alloc(size uint64) (storage.Region, error) {
	r, err := c.Storage.Alloc(size)
	if err == nil {
		c.allocs.Add(1)
		c.sizes[r.ID] = r.Size
		if h := c.d.hist; h != nil {
			h.pageAllocLocked(c.stream, r, c.Granule(), false)
		}
	}
	return r, err
}

func (c *countedStorage) Dealloc(id storage.ID) {
	c.deallocs.Add(1)
	c.released.pages++
	c.released.bytes += c.deviceBytes(id)
	if seq := c.busyUntil(); seq != 0 || c.holdsFor(id) || c.vBusy() {
		c.hold(seq, id, 0, 0)
		return
	}
	c.dealloc(id, false)
}

// hold holds a release (n == 0: the dealloc of id; else an unmap) behind
// seq, the stream's open HoldReleases hold and every release held before
// it, which keeps the list in order.
func (c *countedStorage) hold(seq uint64, id storage.ID, first, n uint64) {
	h := heldRelease{seq: seq, id: id, first: first, n: n}
	if c.vBusy() {
		h.vseq = c.vOpened
	}
	if k := len(c.held); k > 0 {
		h.seq, h.vseq = max(h.seq, c.held[k-1].seq), max(h.vseq, c.held[k-1].vseq)
	}
	c.held = append(c.held, h)
	if hist := c.d.hist; hist != nil {
		held := c.sizes[id]
		if m, reserved := c.mapped[id]; reserved && n == 0 {
			held = m * c.Granule() // a reservation's dealloc holds its mapped granules
		}
		hist.heldLocked(c.stream, h, c.sizes[id], held, c.Granule())
	}
}

// holdsFor reports whether a release of allocation id is held: its dealloc
// must then follow it.
func (c *countedStorage) holdsFor(id storage.ID) bool {
	for _, h := range c.held {
		if h.id == id {
			return true
		}
	}
	return false
}

// CheckCopy forwards to the wrapped storage's fault injection, if any.
func (c *countedStorage) CheckCopy() error {
	if f, ok := c.Storage.(hoststorage.FaultInjector); ok {
		return f.CheckCopy()
	}
	return nil
}

// CheckWait forwards to the wrapped storage's fault injection, if any.
func (c *countedStorage) CheckWait() error {
	if f, ok := c.Storage.(hoststorage.FaultInjector); ok {
		return f.CheckWait()
	}
	return nil
}
