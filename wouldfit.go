// WouldFit: whether an allocation would be served now, and how, answered
// without making it (design §9.5).
//
// An autotuner that tries configurations, or a scheduler that sizes a batch
// or a context, otherwise learns what fits by allocating: a failed attempt
// runs the whole make-room path (waits on the streams, cleanups, moves) and
// leaves its marks in the counters and the history, and a runtime whose
// allocator is less forgiving is left broken by it. WouldFit runs the
// allocation's own sequence (Stream.Alloc's steps, the make-room stages,
// the manager's routes, each pool's search and page requests) as a
// dry run: every question the allocation asks is asked of the state the
// allocation would find — the releases its first step makes, the periodic
// cleanup before each reservation, the cleanup of every stream its first
// make-room stage makes — and every storage call is answered by a dry
// storage that counts the device's budget (dryStorage below). Nothing is
// changed, and no storage is called.
//
// What it cannot answer is a moving stage: a relocation or a compaction
// plans its moves as it carves their targets, and only making them shows
// whether they free enough. There the answer says so (Fit.Maybe), naming
// the stage.

package gpumem

import (
	"errors"
	"fmt"
	"math"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// FitHow is how an allocation would be served (Fit.How).
type FitHow uint8

const (
	// FitNone: it would not be served (Fit.Err says why).
	FitNone FitHow = iota
	// FitHeld: from room the stream's pools already hold (free room in its
	// current pages, a free slot of the size, the room a capture's
	// rehearsal holds for its recording): no new storage.
	FitHeld
	// FitNewPage: on a new page of the pool that serves the size, of the
	// pool's page size or of the allocation's own (Fit.PageSize).
	FitNewPage
	// FitGrowth: the arena grows to a larger page size (Fit.PageSize), its
	// first page holding the allocation; the pages before become outdated.
	FitGrowth
	// FitStorage: a storage allocation of the buffer's own size: a
	// dedicated buffer (a Dedicated window, or a size above the largest
	// page), a new persistent slot, or make-room's own-size step when the
	// page the pool needs does not fit the device but the size does.
	FitStorage
	// FitRelocation: only relocating live allocations off outdated pages
	// could make room (Fit.Maybe).
	FitRelocation
	// FitCompaction: only compacting the pages (moving live allocations
	// out of sparse pages, or out of the way of a hole) could make room
	// (Fit.Maybe).
	FitCompaction
)

func (h FitHow) String() string {
	switch h {
	case FitNone:
		return "none"
	case FitHeld:
		return "held room"
	case FitNewPage:
		return "new page"
	case FitGrowth:
		return "growth"
	case FitStorage:
		return "own storage"
	case FitRelocation:
		return "relocation"
	case FitCompaction:
		return "compaction"
	}
	return fmt.Sprintf("FitHow(%d)", uint8(h))
}

// Fit is WouldFit's answer: whether an Alloc of the size on the stream,
// made now with nothing else in between, would succeed, and how.
type Fit struct {
	// OK: the Alloc would succeed, the way How says.
	OK bool
	// How is the way it would be served (OK), the moving stage it hangs on
	// (Maybe), or FitNone.
	How FitHow
	// Maybe: the Alloc would succeed only if moving live allocations (How:
	// FitRelocation or FitCompaction) frees enough room, which only making
	// the moves shows: a relocation or compaction plans its targets as it
	// carves them. OK is false; Err is the failure the moves would try to
	// cure, nil where the Alloc moves allocations before it reserves (the
	// relocation an arena holding every page size wants). The Alloc tries
	// the moves itself, so a caller that can afford a failure may just call
	// it.
	Maybe bool
	// AfterCleanup: it is served only once the Alloc's first make-room
	// stage gave back what every stream's pools cache (empty pages, free
	// granules, freed dedicated buffers); it fits the device, not the pages
	// held now.
	AfterCleanup bool
	// Waits: that cleanup first waits, without the device lock, for the
	// work queued on the streams (held frees and other streams' uses of
	// freed buffers end as it completes). The answer is for the state once
	// that work completed.
	Waits bool
	// Storage is the size of the storage allocation the Alloc would add:
	// the new page (FitNewPage; of the allocation's own size where the
	// pool gives a large allocation a page of its own), the grown arena's
	// first page (FitGrowth), or the buffer's own storage (FitStorage); 0
	// from held room. On granular storage it is address space.
	Storage uint64
	// Bytes is the device memory the Alloc would newly take: the storage
	// allocation's bytes, or on granular storage the granules it would
	// map; 0 when room already mapped serves it.
	Bytes uint64
	// PageSize is the arena's page size after a growth (FitGrowth).
	PageSize uint64
	// Err says why it would not fit (OK false): the error the Alloc would
	// return, for errors.Is — ErrOutOfMemory (with a
	// *storage.OutOfMemoryError: the bytes asked, held and the capacity),
	// ErrPageUpdateForbidden (the stream records a graph, and no room it
	// holds serves the size), ErrCalledFromOp (asked from an op, whose
	// Alloc cannot wait to make room), ErrClosed.
	Err error
}

// String says what the Alloc would do, in words.
func (f Fit) String() string {
	var when string
	if f.AfterCleanup {
		when = " after the streams' cached memory is given back"
		if f.Waits {
			when += " (once their queued work completes)"
		}
	}
	switch {
	case f.OK:
		return "fits" + when + ": " + f.way()
	case f.Maybe:
		what := "relocating live allocations off outdated pages"
		if f.How == FitCompaction {
			what = "compacting pages (moving live allocations)"
		}
		if f.Err == nil {
			return "may fit: the Alloc starts by " + what + ", and only the moves show where it then lands"
		}
		return "may fit" + when + ": only if " + what + " frees enough room, which only the moves show; without them: " + f.Err.Error()
	}
	var oom *storage.OutOfMemoryError
	if errors.As(f.Err, &oom) && oom.Capacity != 0 && oom.Requested > oom.Capacity {
		return fmt.Sprintf("does not fit: %d bytes are more than the device's capacity of %d bytes", oom.Requested, oom.Capacity)
	}
	if f.Err == nil {
		return "does not fit"
	}
	if f.AfterCleanup {
		when = ", even once the streams' cached memory is given back"
	}
	return "does not fit" + when + ": " + f.Err.Error()
}

// way is how an OK Fit is served, in words.
func (f Fit) way() string {
	mapped := ""
	if f.Bytes != f.Storage {
		mapped = fmt.Sprintf(", mapping %d bytes of it", f.Bytes)
	}
	switch f.How {
	case FitHeld:
		if f.Bytes > 0 {
			return fmt.Sprintf("free room the stream's pages hold (mapping %d bytes of granules)", f.Bytes)
		}
		return "free room the stream's pages hold"
	case FitNewPage:
		return fmt.Sprintf("a new page of %d bytes%s", f.Storage, mapped)
	case FitGrowth:
		return fmt.Sprintf("the arena grows to pages of %d bytes, its first page of %d bytes%s", f.PageSize, f.Storage, mapped)
	case FitStorage:
		return fmt.Sprintf("storage of its own, %d bytes", f.Storage)
	}
	return f.How.String()
}

// WouldFit answers, without side effects, whether an Alloc of size bytes
// on the stream, made now with nothing else in between, would succeed, and
// how: from room its pages hold, on a new page, by a growth of the arena,
// with storage of its own, after giving cached memory back, or not at all
// and why (over the capacity, or what is left of it; a recording forbids
// page updates; ...). An autotuner or a scheduler asks it before it
// allocates, instead of learning by a failed allocation.
//
// It answers by running the Alloc's steps as a dry run (the same routes,
// searches and page requests, each storage call answered from the device's
// budget), so the answer is the Alloc's, with three limits. A step that
// would move live allocations (a relocation or a compaction) is not run:
// when only such a step could make room the answer is Maybe, naming it.
// Work that completes or memory that other streams free between the
// question and the Alloc changes the answer, as it would change the
// Alloc's. And a backend whose device may refuse below the capacity figure
// (another process on the same GPU), or a storage wrapper that refuses by
// its own rule, is not foreseen: the dry storage answers from the budget
// the device counts.
//
// It changes nothing (counters, reports, history, pools) and calls no
// storage. It takes the device lock briefly and never waits for the
// device: where the Alloc would first wait for queued work (Fit.Waits), the
// answer is for the state once that work completed. On a closed device
// Err is ErrClosed.
func (s *Stream) WouldFit(size uint64) Fit {
	d := s.d
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	if borrowed {
		// The Alloc refuses from an op that borrows the device (cuda).
		return Fit{Err: errBorrowed("Stream.Alloc")}
	}
	if d.closed {
		return Fit{Err: ErrClosed}
	}
	return s.wouldFitLocked(size)
}

// wouldFitLocked follows Stream.Alloc (alloc.go): the relocation the
// trigger wants before the reservation (a moving step: Maybe), a
// recording's held room, then a dry reservation and, when it fails, the
// make-room stages (makeRoom) with a dry cleanup and a dry own-size stage.
func (s *Stream) wouldFitLocked(size uint64) Fit {
	d := s.d
	u := s.pageUpdateLocked()
	a := &dryRoom{s: s, size: size}
	if u == memory.Allow && s.mem.HasOutdated() {
		// An op's relocation cannot wait, and the Alloc then reserves
		// without it.
		if _, wanted := relocation.Wanted(s.self); wanted && !a.fromOp() {
			return Fit{How: FitRelocation, Maybe: true}
		}
	}
	if u == memory.Forbidden && s.cap != nil && s.cap.room != nil && s.cap.room.WouldTake(size) {
		return Fit{OK: true, How: FitHeld}
	}
	a.dry = d.newDryRunLocked(s, false)
	_, err := a.reserve(u)
	if err != nil {
		_, _, err = makeRoom(a, u, err)
	}
	f := Fit{AfterCleanup: a.cleaned, Waits: a.waits}
	var mv *wouldMove
	switch {
	case err == nil:
		got := a.got
		f.OK, f.How, f.Storage, f.Bytes, f.PageSize = true, fitHow(got, a.exactly), got.Alloc, got.Bytes, got.PageSize
	case errors.As(err, &mv):
		f.Maybe, f.How = true, mv.how
		f.Err = fmt.Errorf("gpumem: %s: allocating %d bytes: %w", s.name, size, mv.before)
	default:
		if u == memory.Forbidden && s.cap != nil && s.cap.rehearsalRefused != nil && errors.Is(err, memory.ErrPageUpdateForbidden) {
			err = fmt.Errorf("%w (the rehearsal before the recording could not reserve its room: %w)", err, s.cap.rehearsalRefused)
		}
		f.Err = fmt.Errorf("gpumem: %s: allocating %d bytes: %w", s.name, size, err)
	}
	return f
}

// dryRoom is a WouldFit's dry run of an allocation of size bytes on s, as
// the make-room stages act on it: reservations asked of the dry run's
// views, a cleanup stage run dry, a moving stage answered as a wouldMove.
type dryRoom struct {
	s    *Stream
	size uint64
	dry  *dryRun
	// last is the latest dry reservation, got the one that succeeded
	// (exactly: the own-size stage's).
	last, got pool.Would
	exactly   bool
	// cleaned: the cleanup stage ran; waits: it would wait for queued work.
	cleaned, waits bool
}

// fromOp reports whether WouldFit is asked from inside an op, whose Alloc
// cannot wait for queued work (its own). Asked only where a wait is:
// finding the goroutine costs a stack read.
func (a *dryRoom) fromOp() bool {
	return len(a.s.d.pendingFencesLocked()) > 0 && a.s.d.calledFromOpLocked()
}

func (a *dryRoom) reserve(u memory.PageUpdate) (*handle.Handle, error) {
	a.last = a.s.mem.WouldReserve(a.size, u, a.dry.view(a.s))
	if !a.last.OK() {
		return nil, a.last.Err
	}
	a.got = a.last
	return nil, nil
}

func (a *dryRoom) room(stage roomStage, err error) (memory.PageUpdate, error) {
	s, d := a.s, a.s.d
	if d.stageIdleLocked(s, a.size, err, stage, a.dry) {
		return 0, errNothingToMove
	}
	switch stage {
	case stageRelocate:
		return 0, &wouldMove{how: FitRelocation, before: err}
	case stageCompact, stageCompactAgain:
		return 0, &wouldMove{how: FitCompaction, before: err}
	case stageKeptRoom:
		if !s.mem.WouldYieldKeptRoomIn(a.dry.view(s), a.size) {
			return 0, errNothingToMove
		}
		return s.pageUpdateLocked(), nil
	}
	// The cleanup of every stream (reclaim.go): it settles the streams
	// first when it would wait for them, which an op cannot; then every
	// stream's queued work has completed, unless it runs without waiting
	// (an op), where its releases stay held.
	pending := len(d.pendingFencesLocked()) > 0
	op := pending && a.fromOp()
	if op && d.cleanupWaitsLocked(d.streams...) {
		return 0, ErrCalledFromOp
	}
	a.dry = d.newDryRunLocked(s, !op)
	a.dry.cleanAll(d, s)
	a.waits = !op && pending && (d.cleanupWaitsLocked(d.streams...) || a.dry.heldBehindWork())
	a.cleaned = true
	a.dry.view(s).Attempts = 1
	return s.pageUpdateLocked(), nil
}

func (a *dryRoom) ownSize() (*handle.Handle, error) {
	if !a.s.exactAllowedLocked() {
		return nil, errExactNotTried
	}
	w := a.s.mem.WouldReserveExact(a.size, a.dry.view(a.s), a.last)
	if !w.OK() {
		return nil, w.Err
	}
	a.got, a.exactly = w, true
	return dryServed, nil
}

func (a *dryRoom) warn(error) {}

// fitHow is how a dry reservation serves (exactly: make-room's own-size
// step).
func fitHow(w pool.Would, exactly bool) FitHow {
	switch {
	case exactly || w.Way == pool.WouldSlot:
		return FitStorage
	case w.Way == pool.WouldHeld:
		return FitHeld
	case w.Way == pool.WouldGrow:
		return FitGrowth
	}
	return FitNewPage
}

// dryServed stands for the handle a dry own-size stage would return:
// makeRoom takes a non-nil handle from it as success. Nothing reads it.
var dryServed = new(handle.Handle)

// wouldMove is a dry make-room's answer to a moving stage with something
// to move: the dry run stops there (Fit.Maybe), with the failure before.
type wouldMove struct {
	how    FitHow
	before error
}

func (e *wouldMove) Error() string {
	return fmt.Sprintf("gpumem: only a %s could make room", e.how)
}

// dryRun is the device as a WouldFit sees it: each stream's memory in a
// view over a dry storage, and one ledger of the device's budget.
type dryRun struct {
	ledger *dryLedger
	views  map[*Stream]*pool.View
	stores map[*Stream]*dryStorage
}

// view is s's view (nil for a nil dry run: the device as it is).
func (x *dryRun) view(s *Stream) *pool.View {
	if x == nil {
		return nil
	}
	return x.views[s]
}

// newDryRunLocked is the device as an Alloc on s would find it before its
// reservation (settled false): the cross-stream uses that passed released
// on every stream Alloc releases them on, s's held storage releases that
// passed forwarded; or, settled, as its make-room cleanup would find it
// once every stream's queued work completed: every stream's cross-stream
// uses released, every held release forwarded that no open HoldReleases
// hold keeps.
func (d *Device) newDryRunLocked(s *Stream, settled bool) *dryRun {
	b := d.storageBudget()
	x := &dryRun{
		ledger: &dryLedger{capacity: b.Capacity(), used: b.Used()},
		views:  make(map[*Stream]*pool.View, len(d.streams)),
		stores: make(map[*Stream]*dryStorage, len(d.streams)),
	}
	var released map[*handle.Descriptor]int // made at the first release
	release := func(u deferredUse) {
		if released == nil {
			released = map[*handle.Descriptor]int{}
		}
		released[u.b.Descriptor()]++
	}
	recording := s.capture.Recording()
	for _, t := range d.streams {
		switch {
		case settled:
			if !t.capture.Recording() { // drainDeferredLocked keeps a recording stream's
				for _, u := range t.deferred {
					release(u)
				}
			}
		case !recording && s.releasesPassedOf(t):
			done := t.q.Completed()
			for _, u := range t.deferred {
				if u.seq > done {
					break
				}
				release(u)
			}
		}
	}
	for _, t := range d.streams {
		ds := &dryStorage{x: x, c: t.st, settled: settled}
		switch {
		case settled:
			ds.forward(math.MaxUint64)
		case t == s && !recording:
			ds.forward(t.q.Completed())
		}
		x.stores[t] = ds
		x.views[t] = pool.NewView(ds, released)
	}
	return x
}

// cleanAll is the make-room cleanup of every stream in the dry run, in
// reclaimOrder (reclaim.go): each memory's explicit cleanup
// (relocation.ReclaimFor without relocating).
func (x *dryRun) cleanAll(d *Device, s *Stream) {
	for _, t := range d.reclaimOrder(s) {
		t.mem.WouldCleanup(x.views[t], pool.Explicit)
	}
}

// heldBehindWork reports whether the dry run gave memory back on a stream
// with work queued: the cleanup would hold that release until the work
// passes, and wait for it.
func (x *dryRun) heldBehindWork() bool {
	for _, ds := range x.stores {
		if ds.gaveBack && ds.c.busyUntil() != 0 {
			return true
		}
	}
	return false
}

// storageBudget is the budget the device's storages draw on: the device's,
// or the host backend's machine budget when the device has no capacity.
func (d *Device) storageBudget() *storage.Budget {
	if h, ok := d.backend.(*hostBackend); ok && !h.sim && d.budget.Capacity() == 0 && h.machine != nil {
		return h.machine
	}
	return d.budget
}

// dryLedger is the device's budget in a dry run: its capacity (0:
// unlimited), the bytes it holds now, and the bytes the dry run's steps
// hand back.
type dryLedger struct {
	capacity, used, back uint64
}

// grant is storage.Budget.Take without taking: nil, or the
// *storage.OutOfMemoryError it would return.
func (l *dryLedger) grant(n uint64) error {
	held := l.used - min(l.used, l.back)
	next := storage.SatAdd(held, n)
	if (l.capacity != 0 && next > l.capacity) || (next == math.MaxUint64 && n != 0) {
		return &storage.OutOfMemoryError{Requested: n, Allocated: held, Capacity: l.capacity}
	}
	return nil
}

// dryStorage is one stream's countedStorage in a dry run (pool.Dry): it
// grants from the ledger, and counts what the dry steps hand back as the
// countedStorage would, holding a release where it would (behind the
// stream's queued work, an open HoldReleases hold, or an earlier held
// release of the same allocation) and forwarding the held releases the
// steps before the reservation forward.
type dryStorage struct {
	x       *dryRun
	c       *countedStorage
	settled bool // the streams' queued work completed (the make-room wait)
	fwd     int  // c.held[:fwd] are forwarded
	back    uint64
	// unmapped counts, per granular allocation, the granules handed back
	// by forwarded or dry unmaps; heldDealloc and heldUnmap are the dry
	// releases held (a mapping of a granule whose unmap is held withdraws
	// it and costs nothing).
	unmapped    map[storage.ID]uint64
	heldDealloc map[storage.ID]bool
	heldUnmap   map[storage.ID]map[uint64]bool
	gaveBack    bool // a dry step released something
}

var _ pool.Dry = (*dryStorage)(nil)

// forward forwards c's held releases as releasePassed does when the
// stream has completed done: the prefix whose work and holds passed.
func (ds *dryStorage) forward(done uint64) {
	c := ds.c
	if c.recording() {
		return // releasePassed waits for the recording's end
	}
	k := 0
	for k < len(c.held) && c.held[k].seq <= done && c.held[k].vseq <= c.vPassed {
		k++
	}
	ds.fwd = k
	g := c.Granule()
	for _, h := range c.held[:k] {
		if h.n != 0 {
			ds.noteUnmapped(h.id, h.n)
			ds.giveBack(h.n * g)
			continue
		}
		ds.giveBack(ds.deviceBytes(h.id))
	}
}

func (ds *dryStorage) noteUnmapped(id storage.ID, n uint64) {
	if ds.unmapped == nil {
		ds.unmapped = map[storage.ID]uint64{}
	}
	ds.unmapped[id] += n
}

// deviceBytes is what handing allocation id back returns to the budget:
// a granular reservation's granules still mapped, any other allocation's
// size.
func (ds *dryStorage) deviceBytes(id storage.ID) uint64 {
	if m, reserved := ds.c.mapped[id]; reserved {
		return (m - min(m, ds.unmapped[id])) * ds.c.Granule()
	}
	return ds.c.sizes[id]
}

func (ds *dryStorage) giveBack(b uint64) {
	ds.back += b
	ds.x.ledger.back += b
}

// holds is countedStorage's rule for holding a release of id: the stream's
// queued work (none once settled), an open HoldReleases hold, or a release
// of id held before it (which it must follow).
func (ds *dryStorage) holds(id storage.ID) bool {
	c := ds.c
	if (!ds.settled && c.busyUntil() != 0) || c.vBusy() || ds.heldDealloc[id] || len(ds.heldUnmap[id]) > 0 {
		return true
	}
	for _, h := range c.held[ds.fwd:] {
		if h.id == id {
			return true
		}
	}
	return false
}

// unmapHeld reports whether granule k of id has a held unmap, real or dry.
func (ds *dryStorage) unmapHeld(id storage.ID, k uint64) bool {
	if ds.heldUnmap[id][k] {
		return true
	}
	for _, h := range ds.c.held[ds.fwd:] {
		if h.id == id && h.n != 0 && h.first <= k && k < h.first+h.n {
			return true
		}
	}
	return false
}

// Granule implements pool.Dry.
func (ds *dryStorage) Granule() uint64 { return ds.c.Granule() }

// Alloc implements pool.Dry.
func (ds *dryStorage) Alloc(size uint64) error { return ds.x.ledger.grant(size) }

// Reserve implements pool.Dry: address space takes nothing from the
// budget.
func (ds *dryStorage) Reserve(size uint64) error {
	if ds.c.Granule() == 0 {
		return fmt.Errorf("%w: reserving %d bytes", storage.ErrNotGranular, size)
	}
	return nil
}

// Map implements pool.Dry: granules whose unmap is held are withdrawn at
// no cost (countedStorage.Map); the others are granted from the ledger.
func (ds *dryStorage) Map(id storage.ID, granules []uint64) (uint64, error) {
	var n uint64
	for _, k := range granules {
		if id == 0 || !ds.unmapHeld(id, k) {
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	b := n * ds.c.Granule()
	if err := ds.x.ledger.grant(b); err != nil {
		return 0, fmt.Errorf("mapping %d granules of reservation %d: %w", n, id, err)
	}
	return b, nil
}

// Dealloc implements pool.Dry.
func (ds *dryStorage) Dealloc(id storage.ID) {
	ds.gaveBack = true
	if ds.holds(id) {
		if ds.heldDealloc == nil {
			ds.heldDealloc = map[storage.ID]bool{}
		}
		ds.heldDealloc[id] = true
		return
	}
	ds.giveBack(ds.deviceBytes(id))
}

// Unmap implements pool.Dry.
func (ds *dryStorage) Unmap(id storage.ID, first, n uint64) {
	if n == 0 || ds.c.Granule() == 0 {
		return
	}
	ds.gaveBack = true
	if ds.holds(id) {
		if ds.heldUnmap == nil {
			ds.heldUnmap = map[storage.ID]map[uint64]bool{}
		}
		set := ds.heldUnmap[id]
		if set == nil {
			set = map[uint64]bool{}
			ds.heldUnmap[id] = set
		}
		for k := first; k < first+n; k++ {
			set[k] = true
		}
		return
	}
	ds.noteUnmapped(id, n)
	ds.giveBack(n * ds.c.Granule())
}

// Allocated implements pool.Dry: what the stream's storage would hold.
func (ds *dryStorage) Allocated() uint64 {
	a := ds.c.Storage.BytesAllocated()
	return a - min(a, ds.back)
}
