// The device's history: a bounded ring of what its memory did, recorded
// under the device lock when asked (WithHistory, Device.StartHistory), as
// PyTorch's _record_memory_history keeps max_entries of its allocator's
// actions.
//
// What is recorded, one entry each (HistoryKind): every Alloc that
// succeeded (buffer ID, requested size, stream, where it landed and, with
// HistoryOptions.Stacks, the caller's stack) and every one that failed
// (with the device's bytes at that moment); the Free that drops a
// buffer's last reference, marked held when something still binds the
// buffer's memory (another stream's queued use, a mapping, a capture, a
// graph), and the release of that memory when the last binding goes;
// windows opening and closing; capture phases;
// cleanups (explicit ones, and the reclaims a failed reservation runs);
// arena growths; relocations (reason, outcome, moves, bytes) and each
// move's old and new address; storage allocations and deallocations
// (pages, slots, granular reservations) and granule maps and unmaps; the
// storage releases held back for a stream's queued work (design §9.9) when
// they are held, and when held ones go back (or are withdrawn); and each
// Defragment call, with its bounds, when it returns.
//
// Held releases. A held free's release is recorded when it happens: the
// free watches the buffer's descriptor (handle.Descriptor.WatchRelease),
// and the release that leaves its slice free — a stream's queued use
// passing, a mapping released, a Hold's release — records the entry then,
// under the device lock, before anything can carve the slice again. So a
// relocation's move onto that memory, or an allocation there, always
// comes after its release in the history. (Noticed later, the slice's
// descriptor may already serve a reservation or a move's target, and the
// release would be recorded after what reused its memory.)
//
// Costs. Recording off is one nil check per hook (d.hist). On, an entry is
// a 64-byte value written into a ring that grows to MaxEntries and is then
// overwritten in place; the clock is read every eighth alloc or free entry
// (timePeriod) and on every other entry. The Alloc+Free pair pays two
// entries, one slice lookup (where the buffer landed) and one growth
// counter read. Stacks add a runtime.Callers
// walk per Alloc (docs/results/benchmarks.md gives the ratios). No entry allocates but a held
// free's, whose watch of the descriptor is a signal and a closure (see
// Held releases); only the rare paths (a failed Alloc reads the device's
// usage, a growth its page size) do extra work.
//
// Addresses. gpumem has no device addresses on the host or Sim backends,
// and PyTorch's viewer draws by address, so the history numbers memory
// itself: each storage allocation gets a base in one address space, bases
// never reused while recording (bump order, a 2 MiB gap between
// allocations), and a slice's address is its page's base plus its offset.
// An entry records the storage ID and offset; the base is looked up when
// the history is written (a page freed since has its base in its PageFree
// entry). Pages that existed before the recording began get bases when
// first seen.
//
// Lifecycle. StartHistory starts a fresh recording (discarding the last
// one); StopHistory stops it and keeps its entries, which WriteTrace,
// WriteSnapshot and History read until the next StartHistory. Readers copy
// the ring under the lock and format outside it, so a slow writer never
// holds the lock (Stats and the other calls go on meanwhile).

package gpumem

import (
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// defaultHistoryEntries is the ring's size when HistoryOptions.MaxEntries
// is 0: 2^16 entries of 64 bytes (4 MiB), about a training step of a large
// model's allocations and frees.
const defaultHistoryEntries = 1 << 16

// historyStackDepth is the most frames recorded per stack.
const historyStackDepth = 16

// HistoryOptions configures a recording.
type HistoryOptions struct {
	// MaxEntries bounds the ring: the oldest entries are dropped once it
	// holds that many (History.Dropped counts them). 0 means 65536
	// entries of 64 bytes (4 MiB), about a training step of a large
	// model's allocations and frees; negative is refused.
	MaxEntries int
	// Stacks records the allocating caller's stack (up to 16 frames,
	// from the caller of Stream.Alloc outwards)
	// with every Alloc. Off by default: it costs a stack walk per Alloc.
	Stacks bool
}

// validate refuses options that cannot be honoured.
func (o HistoryOptions) validate() (HistoryOptions, error) {
	if o.MaxEntries < 0 {
		return o, fmt.Errorf("%w: HistoryOptions.MaxEntries is %d; use 0 for the default (%d) or a positive bound", ErrInvalidUse, o.MaxEntries, defaultHistoryEntries)
	}
	if o.MaxEntries == 0 {
		o.MaxEntries = defaultHistoryEntries
	}
	return o, nil
}

// WithHistory records the device's history from Open on (see
// Device.StartHistory). Default: no recording. A later WithHistory
// replaces an earlier one.
func WithHistory(o HistoryOptions) Option {
	return optionFunc(func(opts *options) { opts.history = &o })
}

// StartHistory starts a fresh recording of the device's history, bounded
// by o.MaxEntries, discarding the previous one (running or stopped). A
// recording started after allocations were made, or one that dropped
// entries, writes those allocations as a prelude (WriteTrace). It returns
// ErrClosed on a closed device and ErrInvalidUse for bad options; on error
// the previous recording is unchanged.
func (d *Device) StartHistory(o HistoryOptions) error {
	o, err := o.validate()
	if err != nil {
		return err
	}
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	if d.closed {
		return ErrClosed
	}
	h := newHistory(o, d.histSince)
	// Every storage allocation held now gets its address up front, in ID
	// (allocation) order, so entries on pages older than the recording
	// resolve like the others.
	var ids []storage.ID
	sizes := map[storage.ID]uint64{}
	granule := map[storage.ID]uint64{}
	for _, s := range d.streams {
		for id, size := range s.st.sizes {
			ids = append(ids, id)
			sizes[id], granule[id] = size, s.st.Granule()
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		h.base(id, sizes[id], granule[id])
	}
	for _, s := range d.streams {
		h.growths = append(h.growths, s.mem.Growths())
	}
	d.hist, d.stopped = h, nil
	return nil
}

// StopHistory stops the recording and keeps its entries for WriteTrace,
// WriteSnapshot and History. Without a recording it does nothing.
func (d *Device) StopHistory() {
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	if d.hist != nil {
		d.stopped, d.hist = d.hist, nil
	}
}

// HistoryKind is what a history entry records.
type HistoryKind uint8

// The kinds of history entries. HistoryEntry says which fields each sets.
const (
	HistoryAlloc       HistoryKind = iota + 1 // a buffer allocated
	HistoryAllocFailed                        // an Alloc that returned an error
	HistoryFree                               // a buffer's last reference dropped
	HistoryWindow                             // a window opened (Mode) or closed (Auto)
	HistoryCapture                            // a capture phase
	HistoryCleanup                            // a cleanup of a stream's memory
	HistoryGrowth                             // the arena grew
	HistoryRelocation                         // a relocation ended
	HistoryMove                               // one allocation's bytes copied by a relocation
	HistoryPageAlloc                          // a storage allocation (a page, a slot or a granular reservation)
	HistoryPageFree                           // a storage deallocation
	HistoryMap                                // granules mapped
	HistoryUnmap                              // granules unmapped
	HistoryRelease                            // a held free's memory released: no binding left
	HistoryHeld                               // a storage release held back for the stream's queued work
	HistoryPassed                             // held storage releases went back (or were withdrawn)
	HistoryDefragment                         // a Device.Defragment returned (after its moves)
)

var historyKindNames = [...]string{
	HistoryAlloc: "alloc", HistoryAllocFailed: "alloc_failed", HistoryFree: "free", HistoryWindow: "window",
	HistoryCapture: "capture", HistoryCleanup: "cleanup", HistoryGrowth: "growth", HistoryRelocation: "relocation",
	HistoryMove: "move", HistoryPageAlloc: "page_alloc", HistoryPageFree: "page_free", HistoryMap: "map", HistoryUnmap: "unmap",
	HistoryRelease: "release", HistoryHeld: "held", HistoryPassed: "passed", HistoryDefragment: "defragment",
}

func (k HistoryKind) String() string {
	if k >= HistoryAlloc && int(k) < len(historyKindNames) {
		return historyKindNames[k]
	}
	return fmt.Sprintf("HistoryKind(%d)", uint8(k))
}

// histEntry is one recorded entry, compact (64 bytes) so the ring stays
// small and a write is a few stores. Which fields mean what depends on kind
// (see the record methods and HistoryEntry).
type histEntry struct {
	kind   HistoryKind
	aux    uint8 // window mode, capture phase, relocation reason, cleanup explicit, page granular, free held, held unmap, passed some left
	aux2   uint8 // relocation outcome; alloc-failed: out of memory; page free, unmap: forwarded after being held
	npc    uint8 // recorded stack frames (Stacks)
	stream int32
	t      int64  // nanoseconds since the recording started
	id     uint64 // buffer ID, graph, storage ID (pages, maps)
	size   uint64
	a, b   uint64
	c      uint64
}

// history is one recording. Under the device lock.
type history struct {
	opts    HistoryOptions
	start   time.Time
	ring    []histEntry // len MaxEntries once full; grows by append until then
	next    uint64      // entries recorded so far
	pos     int         // once the ring is full: the oldest entry's slot, the next written
	now     int64       // the latest clock reading (add)
	pcs     []uintptr   // historyStackDepth per ring slot, with Stacks
	pcsTmp  [historyStackDepth]uintptr
	bases   map[storage.ID]uint64 // live storage allocations' addresses
	growths []uint64              // per stream, its arena's growth counter when last read
	nextAdr uint64
}

// firstAddress is where the history's address space begins: a plausible
// device address, far from 0 so that no address reads as a null pointer.
const firstAddress = 1 << 32

// addressGap separates consecutive storage allocations' address ranges.
const addressGap = 2 << 20

func newHistory(o HistoryOptions, since func() time.Time) *history {
	h := &history{opts: o, start: since(), bases: make(map[storage.ID]uint64), nextAdr: firstAddress}
	h.ring = make([]histEntry, 0, min(o.MaxEntries, 1<<12))
	if o.Stacks {
		h.pcs = make([]uintptr, 0, cap(h.ring)*historyStackDepth)
	}
	return h
}

// histSince is when a recording starts: now (a method so tests could pin
// it; nothing does yet).
func (d *Device) histSince() time.Time { return time.Now() }

// add appends e (stamped with the clock, see timePeriod) to the ring,
// overwriting the oldest entry once the ring holds MaxEntries, and returns
// its slot.
func (h *history) add(e histEntry) int {
	if h.next%timePeriod == 0 || e.kind > HistoryFree {
		h.now = int64(time.Since(h.start))
	}
	e.t = h.now
	h.next++
	if len(h.ring) < h.opts.MaxEntries {
		h.ring = append(h.ring, e)
		if h.opts.Stacks {
			h.pcs = append(h.pcs, make([]uintptr, historyStackDepth)...)
		}
		return len(h.ring) - 1
	}
	i := h.pos
	h.ring[i] = e
	if h.pos++; h.pos == len(h.ring) {
		h.pos = 0
	}
	return i
}

// timePeriod is how often the steady entries (allocs, failed allocs and
// frees) read the clock: every timePeriod-th entry, and every entry of
// another kind, reads it; the others carry the latest reading. A
// monotonic clock read costs about 30 ns, a quarter of a whole Alloc+Free
// pair, and two per pair alone would take most of the 1.5× budget
// (docs/decisions/2026-12-01-history-recording-cost.md); PyTorch's recorder uses an approximate clock for the same
// reason. So an alloc's or free's time is exact to within the span of
// timePeriod−1 entries before it, never later than the truth, and times
// never decrease.
const timePeriod = 8

// dropped is the number of entries the ring no longer holds.
func (h *history) dropped() uint64 { return h.next - uint64(len(h.ring)) }

// entries returns a copy of the ring, oldest first, with each entry's stack.
func (h *history) entries() ([]histEntry, [][]uintptr) {
	out := make([]histEntry, 0, len(h.ring))
	var stacks [][]uintptr
	start := h.pos // 0 until the ring is full
	for k := range h.ring {
		i := (start + k) % len(h.ring)
		e := h.ring[i]
		out = append(out, e)
		if h.opts.Stacks {
			if stacks == nil {
				stacks = make([][]uintptr, 0, len(h.ring))
			}
			stacks = append(stacks, append([]uintptr(nil), h.pcs[i*historyStackDepth:i*historyStackDepth+int(e.npc)]...))
		}
	}
	return out, stacks
}

// base returns the address of storage allocation id, giving it one when
// first seen (an allocation made before the recording began).
func (h *history) base(id storage.ID, size, granule uint64) uint64 {
	if a, ok := h.bases[id]; ok {
		return a
	}
	a := h.nextAdr
	h.bases[id] = a
	h.nextAdr += storage.RoundUp(size, max(granule, addressGap)) + addressGap
	return a
}

// The record methods below run under the device lock, on a non-nil
// history (the hooks check d.hist first).

// allocLocked records a buffer placed at offset off of storage allocation
// page, with the caller's stack when asked (skip: frames between
// runtime.Callers and the user's call).
func (h *history) allocLocked(s *Stream, id handle.ID, size uint64, page storage.ID, off uint64, skip int) {
	i := h.add(histEntry{kind: HistoryAlloc, stream: int32(s.index), id: uint64(id), size: size, a: uint64(page), b: off})
	if h.opts.Stacks {
		n := runtime.Callers(skip, h.pcsTmp[:])
		copy(h.pcs[i*historyStackDepth:], h.pcsTmp[:n])
		h.ring[i].npc = uint8(n)
	}
}

// allocFailedLocked records a failed Alloc with the device's bytes then:
// a = bytes held from storage, b = bytes in use, c = capacity (0: none).
func (h *history) allocFailedLocked(d *Device, s *Stream, id handle.ID, size uint64, oom bool) {
	var held, inUse uint64
	for _, t := range d.streams {
		held = storage.SatAdd(held, t.mem.BytesAllocated())
		inUse += t.mem.Report().Usage().BytesInUse
	}
	e := histEntry{kind: HistoryAllocFailed, stream: int32(s.index), id: uint64(id), size: size, a: held, b: inUse, c: d.budget.Capacity()}
	if oom {
		e.aux2 = 1
	}
	h.add(e)
}

// freeLocked records the free of buffer id, whose last user handle is
// about to go: held when something else (a binding) still holds its
// memory, whose release is then recorded the moment the last binding goes
// (WatchRelease), if this recording is still the device's running one.
func (h *history) freeLocked(s *Stream, id handle.ID, size uint64, desc *handle.Descriptor) {
	e := histEntry{kind: HistoryFree, stream: int32(s.index), id: uint64(id), size: size}
	held := desc.IsBound()
	if held {
		e.aux = 1
	}
	h.add(e)
	if held {
		d, st := s.d, int32(s.index)
		desc.WatchRelease(func() {
			if d.hist == h {
				h.add(histEntry{kind: HistoryRelease, stream: st, id: uint64(id), size: size})
			}
		})
	}
}

func (h *history) windowLocked(s *Stream, m memory.Mode) {
	h.add(histEntry{kind: HistoryWindow, stream: int32(s.index), aux: uint8(m)})
}

// capturePhase numbers the capture phases in entries (aux).
type capturePhase uint8

const (
	phasePrepare capturePhase = iota
	phaseBegin
	phaseEnd
	phaseLaunch
	phaseClose
	phaseAbort
)

var capturePhaseNames = [...]string{"prepare", "begin", "end", "launch", "close", "abort"}

func (p capturePhase) String() string {
	if int(p) < len(capturePhaseNames) {
		return capturePhaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

func (h *history) captureLocked(s *Stream, p capturePhase, graph uint64) {
	h.add(histEntry{kind: HistoryCapture, stream: int32(s.index), aux: uint8(p), id: graph})
}

func (h *history) cleanupLocked(s *Stream, explicit bool) {
	e := histEntry{kind: HistoryCleanup, stream: int32(s.index)}
	if explicit {
		e.aux = 1
	}
	h.add(e)
}

// growthLocked records a growth to pageSize for an allocation of size.
func (h *history) growthLocked(s *Stream, pageSize, size uint64) {
	h.add(histEntry{kind: HistoryGrowth, stream: int32(s.index), size: pageSize, a: size})
}

func (h *history) relocationLocked(s *Stream, r relocation.Reason, o relocation.Outcome) {
	h.add(histEntry{kind: HistoryRelocation, stream: int32(s.index), aux: uint8(r), aux2: uint8(o.Kind), size: o.Bytes, a: uint64(o.Moves)})
}

// moveLocked records one relocation copy: size bytes from (a, b) to
// (c, id) as (storage ID, offset) pairs.
func (h *history) moveLocked(s *Stream, sc relocation.StorageCopy) {
	h.add(histEntry{kind: HistoryMove, stream: int32(s.index), size: sc.Source.Size,
		a: uint64(sc.Source.ID), b: sc.Source.Offset, c: uint64(sc.Target.ID), id: sc.Target.Offset})
}

// pageAllocLocked records a storage allocation and gives it its address
// (a); granular: a reservation whose granules map later.
func (h *history) pageAllocLocked(stream int, r storage.Region, granule uint64, granular bool) {
	e := histEntry{kind: HistoryPageAlloc, stream: int32(stream), id: uint64(r.ID), size: r.Size, a: h.base(r.ID, r.Size, granule)}
	if granular {
		e.aux = 1
		e.b = granule
	}
	h.add(e)
}

// pageFreeLocked records a storage deallocation (its address in a;
// reserved: a granular reservation, aux 1; forwarded: one that had been
// held, aux2 1) and forgets the allocation's base.
func (h *history) pageFreeLocked(stream int, id storage.ID, size, granule uint64, reserved, forwarded bool) {
	e := histEntry{kind: HistoryPageFree, stream: int32(stream), id: uint64(id), size: size, a: h.base(id, size, granule), b: granule}
	if reserved {
		e.aux = 1
	}
	if forwarded {
		e.aux2 = 1
	}
	h.add(e)
	delete(h.bases, id)
}

// mapLocked records granules [first, first+n) of id (of size bytes)
// mapped or unmapped: a = the allocation's address, b = first, c = n, size
// = their bytes; forwarded: an unmap that had been held (aux2 1).
func (h *history) mapLocked(kind HistoryKind, stream int, id storage.ID, size, first, n, granule uint64, forwarded bool) {
	e := histEntry{kind: kind, stream: int32(stream), id: uint64(id), a: h.base(id, size, granule), b: first, c: n, size: n * granule}
	if forwarded {
		e.aux2 = 1
	}
	h.add(e)
}

// heldLocked records a storage release held back: the dealloc of r.id (an
// allocation of size bytes, holding held of them), or an unmap of its
// granules [first, first+n): a = the address of what is held, size = its
// bytes, b and c = the seq and vseq it waits for (aux 1: an unmap).
func (h *history) heldLocked(stream int, r heldRelease, size, held, granule uint64) {
	e := histEntry{kind: HistoryHeld, stream: int32(stream), id: uint64(r.id), size: held, a: h.base(r.id, size, granule), b: r.seq, c: r.vseq}
	if r.n != 0 {
		e.aux = 1
		e.a += r.first * granule
		e.size = r.n * granule
	}
	h.add(e)
}

// defragmentLocked records a Defragment call within opts as it returns:
// a replay performs one where the device did.
func (h *history) defragmentLocked(opts DefragOptions) {
	h.add(histEntry{kind: HistoryDefragment, size: opts.MaxBytes, a: uint64(opts.MaxMoves)})
}

// passedLocked records that held releases of the stream went back or were
// withdrawn: with left, the oldest still held waits for (seq, vseq) (aux
// 1, b, c); without, none is held.
func (h *history) passedLocked(stream int, left bool, seq, vseq uint64) {
	e := histEntry{kind: HistoryPassed, stream: int32(stream)}
	if left {
		e.aux, e.b, e.c = 1, seq, vseq
	}
	h.add(e)
}

// recordAllocLocked records b's allocation: where it landed and, when the
// reservation recorded entries (mark: the count before it) and the arena's
// growth counter moved, the growth first. A growth always allocates a page,
// so an allocation served from held room skips the check. Its frames skip
// runtime.Callers, allocLocked, this, allocation.notifyLocked and
// Stream.Alloc.
func (d *Device) recordAllocLocked(h *history, s *Stream, b *handle.Handle, size, mark uint64) {
	if h.next != mark {
		h.noteGrowthLocked(s, size)
	}
	var page storage.ID
	var off uint64
	if sl, err := s.mem.Find(b); err == nil {
		page, off = sl.Region.ID, sl.Region.Offset
	}
	h.allocLocked(s, b.ID(), size, page, off, 5)
}

// noteGrowthLocked records a growth when s's arena grew since the history
// last looked (size: the allocation that made it grow).
func (h *history) noteGrowthLocked(s *Stream, size uint64) {
	for len(h.growths) <= s.index {
		h.growths = append(h.growths, noGrowthsSeen)
	}
	g := s.mem.Growths()
	if seen := h.growths[s.index]; seen != noGrowthsSeen && g != seen {
		h.growthLocked(s, currentPageSize(s.mem), size)
	}
	h.growths[s.index] = g
}

// streamAddedLocked starts s's growth count at its fresh memory's.
func (h *history) streamAddedLocked(s *Stream) {
	for len(h.growths) <= s.index {
		h.growths = append(h.growths, noGrowthsSeen)
	}
	h.growths[s.index] = s.mem.Growths()
}

// noGrowthsSeen marks a stream whose growth counter the history has not
// read yet.
const noGrowthsSeen = ^uint64(0)

// currentPageSize is the current arena page size of m (0 without an arena):
// read after a growth, from the report (a rare path).
func currentPageSize(m *memory.Manager) uint64 {
	for _, p := range m.Report().Dynamic {
		if k, ok := p.Kind.(pool.AdaptiveKind); ok {
			return k.PageSize
		}
	}
	return 0
}
