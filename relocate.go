package gpumem

import (
	"context"
	"fmt"

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
