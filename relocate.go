package gpumem

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// streamsOf is the device as relocation.Streams, on behalf of one stream
// (the relocating stream), for a caller whose context is ctx (nil: no
// limit). Every method runs under the device lock (Finish releases it while
// it waits); the order the steps run in lives in package relocation.
type streamsOf struct {
	d   *Device
	s   *Stream
	ctx context.Context
	// cleanOnly makes the streams report nothing outdated, so a Reclaim
	// through them cleans up without relocating: the make-room path's
	// first stage.
	cleanOnly bool
	// compact, when set, bounds what CompactMemory may move and gathers
	// what it moved and freed (a Defragment pass, or the make-room path's
	// compacting stage); nil compacts without limits.
	compact *compactPass
	// gave, when set, tallies what the steps that give memory back
	// (cleanup, relocation, compaction) handed to the device's storages: a
	// Defragment reports it. Each step runs under the lock, so the
	// difference it measures is its own, whatever other goroutines did while
	// a wait before it let the lock go.
	gave *releaseTally
	// dry, when set, is a WouldFit's dry run (wouldfit.go): the questions
	// that decide whether a step has anything to do (HasOutdated,
	// DeviceHasOutdated, CanCompact) read each stream's memory in its view,
	// as it would be once the dry run's steps ran.
	dry *dryRun
}

var _ relocation.Streams = streamsOf{}

// tallied runs step, which may give memory back, adding what the device's
// storages were handed meanwhile to x.gave (nothing without one).
func (x streamsOf) tallied(step func()) {
	if x.gave == nil {
		step()
		return
	}
	before := x.d.releasedLocked()
	step()
	d := x.d.releasedLocked().less(before)
	x.gave.pages += d.pages
	x.gave.bytes += d.bytes
}

// releasedLocked sums what every stream's pools handed back so far.
func (d *Device) releasedLocked() releaseTally {
	var t releaseTally
	for _, s := range d.streams {
		t.pages += s.st.released.pages
		t.bytes += s.st.released.bytes
	}
	return t
}

// Recording: any stream's capture is in phase Recording.
func (x streamsOf) Recording() bool { return x.d.recordingLocked() != nil }

// HasOutdated: the relocating stream's memory has outdated pages.
func (x streamsOf) HasOutdated() bool {
	return !x.d.noRelocate && !x.cleanOnly && x.s.mem.HasOutdatedIn(x.dry.view(x.s))
}

// RelocationNeed: the relocating stream's memory's need.
func (x streamsOf) RelocationNeed() relocation.Need {
	if x.d.noRelocate {
		return relocation.Need{}
	}
	return x.s.mem.RelocationNeed()
}

// Finish waits, with the device lock released, until every stream's work
// is done (settle.go), then submits what any queue batches; the copy
// queue's WaitDevice then passes at once.
func (x streamsOf) Finish() error {
	if err := x.d.settleLocked(x.ctx); err != nil {
		return err
	}
	for _, s := range x.d.streams {
		if err := s.q.Flush(); err != nil {
			x.d.log.Warn("gpumem: flushing a queue before relocation failed", "stream", s.name, "err", err)
		}
	}
	return nil
}

// RelocateMemory moves what the relocating stream's memory holds on
// outdated pages, copying on that stream.
func (x streamsOf) RelocateMemory(r relocation.Reason) {
	var o relocation.Outcome
	x.tallied(func() { o = x.s.mem.Relocate(&deviceCopies{d: x.d, s: x.s}, r) })
	if h := x.d.hist; h != nil {
		h.relocationLocked(x.s, r, o)
	}
}

// DeviceHasOutdated: any stream's memory has outdated pages.
func (x streamsOf) DeviceHasOutdated() bool {
	if x.d.noRelocate || x.cleanOnly {
		return false
	}
	for _, s := range x.d.streams {
		if s.mem.HasOutdatedIn(x.dry.view(s)) {
			return true
		}
	}
	return false
}

// RelocateDeviceMemory relocates, in creation order, every stream whose
// memory has outdated pages, copying on that stream.
func (x streamsOf) RelocateDeviceMemory(r relocation.Reason) {
	for _, s := range x.d.streams {
		if s.mem.HasOutdated() {
			var o relocation.Outcome
			x.tallied(func() { o = s.mem.Relocate(&deviceCopies{d: x.d, s: s}, r) })
			if h := x.d.hist; h != nil {
				h.relocationLocked(s, r, o)
			}
		}
	}
}

// CleanupMemory gives back every page the relocating stream's memory holds
// and nothing needs.
func (x streamsOf) CleanupMemory() { x.tallied(func() { x.s.mem.Cleanup(pool.Explicit) }) }

// deviceCopies is the device's relocation copy queue: before the first copy
// it waits for every stream's work (a relocation moves memory any stream
// may still use), copies on the relocating stream, and waits for that
// stream after the last copy.
type deviceCopies struct {
	d *Device
	s *Stream
}

// WaitDevice mints a fence on every stream in creation order and waits on
// each, then on driver work outside streams.
func (c *deviceCopies) WaitDevice() error {
	if err := c.s.st.CheckWait(); err != nil {
		return err
	}
	for _, s := range c.d.streams {
		if err := s.waitAllLocked(); err != nil {
			return fmt.Errorf("gpumem: waiting on %s before relocation: %w", s.name, err)
		}
	}
	return c.d.backend.WaitOutsideStreams()
}

// Copy resolves both regions and copies on the relocating stream: safe,
// since they are distinct live slices of one size on distinct pages that
// nothing touches until WaitCopies.
func (c *deviceCopies) Copy(st storage.Storage, sc relocation.StorageCopy) error {
	if err := c.s.st.CheckCopy(); err != nil {
		return err
	}
	src, err := st.Resolve(sc.Source)
	if err != nil {
		return err
	}
	dst, err := st.Resolve(sc.Target)
	if err != nil {
		return err
	}
	if err := c.d.backend.CopyOnDevice(c.s.q, src, dst); err != nil {
		return err
	}
	if h := c.d.hist; h != nil {
		h.moveLocked(c.s, sc)
	}
	return nil
}

// WaitCopies fences the relocating stream and waits.
func (c *deviceCopies) WaitCopies() error {
	if err := c.s.st.CheckWait(); err != nil {
		return err
	}
	return c.s.waitAllLocked()
}

// roomStage is one stage of the make-room path (design §8.1): each runs
// only after the retry the one before it allowed failed reclaimably, so up
// to a stage a device does exactly what a device without that stage does.
type roomStage uint8

const (
	// stageCleanup gives back what every stream's memory caches and
	// nothing needs, moving nothing.
	stageCleanup roomStage = iota
	// stageRelocate relocates off outdated pages (ArenaFull or
	// MemoryPressure), then cleans up.
	stageRelocate
	// stageCompact empties the sparsest current pages into the others'
	// room (relocation.ReclaimCompacting), then cleans up.
	stageCompact
	numRoomStages
)

func (s roomStage) String() string {
	switch s {
	case stageCleanup:
		return "cleanup"
	case stageRelocate:
		return "relocate"
	case stageCompact:
		return "compact"
	}
	return fmt.Sprintf("roomStage(%d)", uint8(s))
}

// reserveWithRetry runs one reservation of size bytes under u (reserve);
// a failure a reclaim may cure (and only under Allow) makes room in up to
// three stages, retrying after each with the page update makeRoom returns:
// a cleanup without relocation; if the reservation still fails, a reclaim
// that relocates off outdated pages; if it fails again, a compaction of
// current pages (design §8.1). Before each moving stage, and after the
// last, storage of the buffer's own size is tried (exact): the page the
// memory needs may not fit where the size does. Up to a step a device does
// exactly what one without that step does, so relocation and compaction
// can only let a trace run on less memory, never on more: each changes
// where later allocations land, and each runs only where the reservation,
// and its own size, would have failed without it. Only the last failure is
// reported. A stage with nothing to move (errNothingToMove) is skipped,
// and the failure before it stands for the next stage, or is returned
// after the last. When makeRoom cannot (the caller's context ended, or it
// is an op, which cannot wait), its error is returned with nothing
// retried, wrapping the first failure unless it is the context's. reserve
// is a function, not an interface, so that a caller's closure over its
// locals stays on its stack; the retry logic is tested against a scripted
// one.
func reserveWithRetry(reserve func(memory.PageUpdate) (*handle.Handle, error), size uint64, u memory.PageUpdate, makeRoom func(err error, stage roomStage) (memory.PageUpdate, error), exact func() (*handle.Handle, error), warn func(string)) (h *handle.Handle, retried bool, err error) {
	h, err = reserve(u)
	if err == nil {
		return h, false, nil
	}
	first := err
	warned := false
	// changed: room was made since exact was last tried (so it may now
	// succeed where it failed).
	changed := false
	tryExact := func() *handle.Handle {
		if !changed || u != memory.Allow || !memory.MaySucceedAfterReclaim(err) {
			return nil
		}
		changed = false
		h, xerr := exact()
		if xerr != nil {
			return nil
		}
		return h
	}
	for stage := stageCleanup; stage < numRoomStages; stage++ {
		if h := tryExact(); h != nil {
			return h, true, nil
		}
		if u != memory.Allow || !memory.MaySucceedAfterReclaim(err) {
			return nil, retried, err
		}
		if !warned {
			warn(fmt.Sprintf("gpumem: allocation of %d bytes failed, retrying after reclaim: %v", size, err))
			warned = true
		}
		next, roomErr := makeRoom(err, stage)
		if roomErr != nil {
			if errors.Is(roomErr, errNothingToMove) {
				continue
			}
			if errors.Is(roomErr, context.Canceled) || errors.Is(roomErr, context.DeadlineExceeded) {
				return nil, retried, roomErr
			}
			return nil, retried, fmt.Errorf("%w (no reclaim: %w)", first, roomErr)
		}
		u = next
		retried = true
		changed = true
		if h, err = reserve(u); err == nil {
			return h, true, nil
		}
	}
	if h := tryExact(); h != nil {
		return h, true, nil
	}
	return nil, retried, err
}

// errExactNotTried is the own-size step's answer when it may not run (the
// device closed, the page update no longer Allow, a capture window open):
// the reservation's own error stands.
var errExactNotTried = errors.New("gpumem: own-size storage not tried")

// errNothingToMove is makeRoomLocked's answer to a relocating or
// compacting stage with nothing it would move (nothing outdated, no
// current page a compaction could empty, or the device never moves): a
// cleanup and retry would repeat the one before.
var errNothingToMove = errors.New("gpumem: nothing to relocate or compact")

// makeRoomLocked frees what a failed reservation of s may need, in the
// stage reserveWithRetry asks for, for a reservation of size bytes on s.
// stageCleanup: the cleanup of every
// stream, s first (cached pages of other streams count against the same
// device), moving nothing. stageRelocate: page sizes exhausted → a
// relocation of s that may allocate (ArenaFull); otherwise the same
// cleanup relocating every stream for MemoryPressure. stageCompact: the
// same cleanup compacting: first a hole for size in s's pages (the room is
// there but no single slice holds it), else every stream's sparsest
// current pages emptied, s first, until the room err says was missing is
// freed (compactGoal); never for
// exhausted page sizes, which a denser current pool does not cure. Either
// moving stage answers errNothingToMove when it has nothing to move. It
// waits for the streams with the lock released first (settle.go) and
// returns the page update the retry may make, as the state is after that
// wait.
func (d *Device) makeRoomLocked(ctx context.Context, s *Stream, size uint64, err error, stage roomStage) (memory.PageUpdate, error) {
	if invariantsOn {
		d.assertLocked("makeRoomLocked")
	}
	if d.stageIdleLocked(s, size, err, stage, nil) {
		return 0, errNothingToMove
	}
	exhausted := errors.Is(err, pool.ErrPageSizesExhausted)
	if stage == stageRelocate && exhausted {
		if rerr := relocation.Relocate(streamsOf{d: d, s: s, ctx: ctx}, relocation.ArenaFull); rerr != nil {
			return 0, rerr
		}
		return d.retryUpdateLocked(s)
	}
	if u, uerr := d.retryUpdateLocked(s); uerr != nil || u != memory.Allow {
		return u, uerr // a capture records: no reclaim under it
	}
	order := []*Stream{s}
	for _, t := range d.streams {
		if t != s {
			order = append(order, t)
		}
	}
	how := reclaimHow{relocate: stage == stageRelocate, reason: relocation.MemoryPressure}
	goal := packGoal(s, compactGoal(err))
	if stage == stageCompact {
		how = reclaimHow{compact: &compactPass{lim: pool.CompactLimits{Goal: goal}, hole: size, holeFor: s}}
	}
	for pass := 1; ; pass++ {
		if rerr := d.reclaimLocked(ctx, order, how); rerr != nil {
			if pass > 1 {
				break // the passes before moved and freed: retry on that
			}
			if !errors.Is(rerr, relocation.ErrRecording) {
				return 0, rerr // the context ended, or an op cannot wait
			}
			// A capture began while the reclaim waited: retry under what it allows.
			break
		}
		if h := d.hist; h != nil {
			for _, t := range order {
				h.cleanupLocked(t, false)
			}
		}
		// A compaction that freed part of its goal goes again for the rest:
		// a page repacked onto a tight new one (pool: repack) can take only
		// what the device has free before the emptied page goes back, so the
		// room one pass gives back lets the next repack a larger page.
		// Bounded, and only while each pass frees something.
		c := how.compact
		if c == nil || goal == 0 || c.res.BytesFreed == 0 || c.res.BytesFreed >= goal || pass >= maxCompactPasses || d.closed {
			break
		}
		if !d.deviceCanCompactLocked(s, size, goal-c.res.BytesFreed, nil) {
			break
		}
		goal -= c.res.BytesFreed
		how = reclaimHow{compact: &compactPass{lim: pool.CompactLimits{Goal: goal}}}
	}
	return d.retryUpdateLocked(s)
}

// stageIdleLocked reports that a make-room stage would move nothing for a
// reservation of size on s that failed with err (makeRoomLocked answers
// errNothingToMove then): relocating with nothing outdated (on s for
// exhausted page sizes, where only a relocation of s that may allocate
// helps; on any stream otherwise), compacting for exhausted page sizes
// (which a denser pool does not cure) or with no stream that could
// compact. The cleanup stage always runs. dry: a WouldFit's dry run, whose
// views the questions read (nil: the device as it is).
func (d *Device) stageIdleLocked(s *Stream, size uint64, err error, stage roomStage, dry *dryRun) bool {
	exhausted := errors.Is(err, pool.ErrPageSizesExhausted)
	switch stage {
	case stageRelocate:
		x := streamsOf{d: d, s: s, dry: dry}
		return (exhausted && !x.HasOutdated()) || (!exhausted && !x.DeviceHasOutdated())
	case stageCompact:
		return exhausted || !d.deviceCanCompactLocked(s, size, packGoal(s, compactGoal(err)), dry)
	}
	return false
}

// packGoal is the goal a make-room compaction pass plans toward, for a
// reservation of s that lacks need bytes (0: not known, no goal). On
// granular storage that is need: a move there maps granules on its target,
// so moving more than the retry needs costs mapped bytes. On whole pages
// it is every page the pass can pack (packAll): the device is at its
// capacity, a sparse page's every byte is one a later reservation will
// lack, and nothing short of emptying or repacking the page gives it back,
// while a move costs only its bytes at the copy bandwidth; the make-room
// loop then runs its passes (maxCompactPasses) while each frees something.
// The figures that decided it: docs/decisions/2026-12-02-pack-ahead.md.
func packGoal(s *Stream, need uint64) uint64 {
	if need == 0 || s.mem.Granule() > 0 {
		return need
	}
	return packAll
}

// packAll is a goal no compaction meets: pack every page the limits allow.
const packAll = math.MaxUint64

// maxCompactPasses bounds the compactions one failed reservation runs
// (makeRoomLocked): each waits for every stream and copies, and a pass
// after the first runs only when the one before freed part of the goal.
const maxCompactPasses = 4

// compactGoal is the room a failed reservation lacked, as its
// storage.OutOfMemoryError says: the bytes it requested less what the
// budget had left. A compaction under pressure stops planning once its
// pages free that much (pool.CompactLimits.Goal), so it copies no more
// than the retry needs; 0 (no goal) when the error carries no figures.
func compactGoal(err error) uint64 {
	var oom *storage.OutOfMemoryError
	if !errors.As(err, &oom) || oom.Capacity == 0 {
		return 0
	}
	left := oom.Capacity - min(oom.Capacity, oom.Allocated)
	if oom.Requested <= left {
		return 0 // refused for another reason (a host limit): no goal known
	}
	return oom.Requested - left
}

// deviceCanCompactLocked reports whether a compaction might make room for
// a reservation of size on s: a hole in s's pages, or a current page of
// any stream given back by a compaction toward goal, the pass's own (a
// repack or small pages into the arena only with one; false under
// WithoutRelocation or WithoutCompaction). dry: a WouldFit's dry run, in
// whose views the streams' memories are read (nil: as they are).
func (d *Device) deviceCanCompactLocked(s *Stream, size, goal uint64, dry *dryRun) bool {
	pass := &compactPass{lim: pool.CompactLimits{Goal: goal}, hole: size, holeFor: s}
	for _, t := range d.streams {
		if (streamsOf{d: d, s: t, compact: pass, dry: dry}).CanCompact() {
			return true
		}
	}
	return false
}

// retryUpdateLocked is the page update a retried reservation of s may make
// now; ErrClosed once the device closed (a wait let Close in).
func (d *Device) retryUpdateLocked(s *Stream) (memory.PageUpdate, error) {
	if d.closed {
		return 0, ErrClosed
	}
	return s.pageUpdateLocked(), nil
}

// CanCompact: the relocating stream's memory might give a current page back
// by compaction (false under WithoutRelocation and WithoutCompaction, and
// once the pass's limits are spent).
func (x streamsOf) CanCompact() bool {
	if x.d.noRelocate || x.d.noCompact || x.cleanOnly || (x.compact != nil && x.compact.spent()) {
		return false
	}
	v := x.dry.view(x.s)
	if x.compact.wantsHole(x.s) && x.s.mem.CanMakeHoleIn(v, x.compact.hole) {
		return true
	}
	return x.s.mem.CanCompactIn(v, x.compact.underPressure())
}

// CompactMemory compacts the relocating stream's current pages, copying on
// that stream, within what the pass's limits leave (none without a pass),
// and charges what it moved and freed to the pass.
func (x streamsOf) CompactMemory() { x.tallied(x.compactMemory) }

func (x streamsOf) compactMemory() {
	var lim pool.CompactLimits
	if x.compact != nil {
		lim = x.compact.lim
	}
	before := x.s.mem.Stats().Relocation
	if x.compact.wantsHole(x.s) && x.s.mem.CanMakeHole(x.compact.hole) {
		o := x.s.mem.MakeHole(&deviceCopies{d: x.d, s: x.s}, x.compact.hole, lim)
		if h := x.d.hist; h != nil {
			h.relocationLocked(x.s, relocation.Compact, o)
		}
		if o.Kind == relocation.Moved {
			x.compact.charge(x.s.mem.Stats().Relocation, before)
			x.compact.holeMade()
			return
		}
	}
	o := x.s.mem.Compact(&deviceCopies{d: x.d, s: x.s}, lim)
	if x.compact != nil {
		x.compact.charge(x.s.mem.Stats().Relocation, before)
	}
	if h := x.d.hist; h != nil {
		h.relocationLocked(x.s, relocation.Compact, o)
	}
}
