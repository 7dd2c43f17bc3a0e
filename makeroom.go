// Making room for a failed reservation (design §8.1): step 3 of the
// allocation path (alloc.go).
//
// A reservation that failed under Allow with an error a reclaim may cure
// (memory.MaySucceedAfterReclaim) walks roomStages, in order, retrying
// after each stage that made room. Each stage runs only when every one
// before it failed, so up to a stage a device does exactly what a device
// without that stage does: relocation and compaction, which change where
// later allocations land, can only let a trace run on less memory, never
// on more. The walk (makeRoom) is written once for the allocation and for
// its dry run (WouldFit), which differ only in what a stage does
// (roomAttempt).

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

// roomStage is one stage of the make-room path.
type roomStage uint8

const (
	// stageCleanup gives back what every stream's memory caches and
	// nothing needs, moving nothing; then the reservation is retried.
	stageCleanup roomStage = iota
	// stageOwnSize serves the buffer from storage of its own size, when
	// the stage before made room: the page the memory needs may not fit
	// where the size does (as PyTorch serves a large allocation from a
	// segment of its own size). It moves nothing, so it comes before each
	// moving stage.
	stageOwnSize
	// stageRelocate relocates off outdated pages (ArenaFull or
	// MemoryPressure), then cleans up; then the reservation is retried.
	stageRelocate
	// stageCompact empties the sparsest current pages into the others'
	// room (relocation.ReclaimCompacting), then cleans up; then the
	// reservation is retried.
	stageCompact
	// stageCompactAgain is stageCompact once more, for a reservation its
	// passes before left failing; then the reservation is retried. It runs
	// only when the compaction before it gave pages back (else it answers
	// errNothingToMove, and the walk skips the rounds left). Why it exists: on whole pages a repack (pool:
	// repack) needs its tight page free beside the page it empties, so
	// each pass packs what the device's free bytes allow, and the room a
	// round gives back lets the next pack a larger page. A round runs only
	// where the device without it runs out of memory, so it can only let a
	// trace run on less memory (docs/decisions/2026-12-04-compact-until-it-fits.md).
	stageCompactAgain
	// stageKeptRoom lets the reservation take room the arena keeps for a
	// staple size (pool PL37: a page tiled by one size keeps its open room
	// from sizes that would break the tiling), when every stage before
	// left it failing; then the reservation is retried. Kept room is a
	// preference of placement, never a reason to run out of memory: without
	// it an allocation could fail beside a free run that holds it. It moves
	// nothing and runs only where the device would otherwise fail
	// (docs/decisions/2026-12-05-staple-sizes.md).
	stageKeptRoom
)

// maxCompactRounds bounds the compactions one failed reservation runs,
// each of up to maxCompactPasses passes and followed by a retry: the
// compact stage and up to maxCompactRounds-1 rounds of stageCompactAgain.
// Each round waits for every stream and copies, and one runs only while
// the round before gave pages back and the reservation still fails.
const maxCompactRounds = 8

// roomStages is the make-room path, in the order its stages run: the
// compact stage's rounds after it, each followed by the own-size step,
// and the kept room last.
var roomStages = func() []roomStage {
	stages := []roomStage{stageCleanup, stageOwnSize, stageRelocate, stageOwnSize, stageCompact, stageOwnSize}
	for range maxCompactRounds - 1 {
		stages = append(stages, stageCompactAgain, stageOwnSize)
	}
	return append(stages, stageKeptRoom)
}()

func (s roomStage) String() string {
	switch s {
	case stageCleanup:
		return "cleanup"
	case stageOwnSize:
		return "own size"
	case stageRelocate:
		return "relocate"
	case stageCompact:
		return "compact"
	case stageCompactAgain:
		return "compact again"
	case stageKeptRoom:
		return "kept room"
	}
	return fmt.Sprintf("roomStage(%d)", uint8(s))
}

// roomAttempt is a reservation as the make-room stages act on it: an
// allocation's (allocRoom), or a WouldFit's dry run of one.
type roomAttempt interface {
	// reserve tries the reservation again under u.
	reserve(u memory.PageUpdate) (*handle.Handle, error)
	// room runs stage (cleanup, relocate, compact or kept room) for the failure err
	// and returns the page update a retry may make now (the stage may have
	// waited with the lock released); errNothingToMove when the stage has
	// nothing to do.
	room(stage roomStage, err error) (memory.PageUpdate, error)
	// ownSize tries storage of the buffer's own size (errExactNotTried
	// when it may not run).
	ownSize() (*handle.Handle, error)
	// warn says, once, that the reservation failed with err and room is
	// being made.
	warn(err error)
}

// makeRoom walks roomStages for a reservation that failed with err under
// u. A cleanup, relocate, compact or kept-room stage runs only while the
// latest failure is one a reclaim may cure and u is Allow; it answers
// errNothingToMove when it has nothing to move (or no kept room to yield), and the failure before it
// then stands for the next stage. The own-size stage runs only when room
// was made since it last ran. When a stage cannot make room (the caller's
// context ended, or it is an op, which cannot wait), its error is returned
// with nothing retried, wrapping the first failure unless it is the
// context's. Otherwise the last failure is returned. retried: a stage made
// room and the reservation was tried again.
func makeRoom(a roomAttempt, u memory.PageUpdate, err error) (h *handle.Handle, retried bool, _ error) {
	first := err
	warned := false
	changed := false  // room was made since the own size was last tried
	compacted := true // no round of stageCompactAgain has answered errNothingToMove yet
	for _, stage := range roomStages {
		if stage == stageCompactAgain && !compacted {
			continue
		}
		if stage == stageOwnSize {
			if !changed || u != memory.Allow || !memory.MaySucceedAfterReclaim(err) {
				continue
			}
			changed = false
			if h, xerr := a.ownSize(); xerr == nil && h != nil {
				return h, true, nil
			}
			continue
		}
		if u != memory.Allow || !memory.MaySucceedAfterReclaim(err) {
			return nil, retried, err
		}
		if !warned {
			a.warn(err)
			warned = true
		}
		next, roomErr := a.room(stage, err)
		if roomErr != nil {
			if errors.Is(roomErr, errNothingToMove) {
				compacted = compacted && stage != stageCompactAgain
				continue
			}
			if errors.Is(roomErr, context.Canceled) || errors.Is(roomErr, context.DeadlineExceeded) {
				return nil, retried, roomErr
			}
			return nil, retried, fmt.Errorf("%w (no reclaim: %w)", first, roomErr)
		}
		u, retried, changed = next, true, true
		if h, err = a.reserve(u); err == nil {
			return h, true, nil
		}
	}
	return nil, retried, err
}

// errExactNotTried is the own-size stage's answer when it may not run (the
// device closed, the page update no longer Allow, a capture window open):
// the reservation's own error stands.
var errExactNotTried = errors.New("gpumem: own-size storage not tried")

// errNothingToMove is a relocating, compacting or kept-room stage's answer
// when it has nothing it would move or yield (nothing outdated, no current
// page a compaction could empty, the device never moves, no kept room holds
// the buffer): a retry would repeat the one before.
var errNothingToMove = errors.New("gpumem: nothing to relocate or compact")

// allocRoom is Stream.Alloc's reservation as the make-room stages act on
// it: size bytes on s for the buffer of h, for a caller whose context is
// ctx.
type allocRoom struct {
	s    *Stream
	ctx  context.Context
	size uint64
	h    *handle.Handle
	// freed is the bytes the latest stage's compaction gave back: a round
	// after one that freed nothing would plan on the same pages, and the
	// room a round frees is what lets the next repack a larger page.
	freed uint64
}

func (a *allocRoom) reserve(u memory.PageUpdate) (*handle.Handle, error) {
	return a.s.mem.Reserve(a.size, u, pool.Bind{To: a.h, Cursor: a.s.st.busyUntil()})
}

func (a *allocRoom) room(stage roomStage, err error) (memory.PageUpdate, error) {
	if stage == stageCompactAgain && (a.freed == 0 || a.ctx != nil && a.ctx.Err() != nil) {
		return 0, errNothingToMove // nothing more to pack, or the caller is gone
	}
	u, freed, rerr := a.s.d.roomStageLocked(a.ctx, a.s, a.size, err, stage)
	a.freed = freed
	return u, rerr
}

func (a *allocRoom) ownSize() (*handle.Handle, error) {
	if !a.s.exactAllowedLocked() {
		return nil, errExactNotTried
	}
	h, err := a.s.mem.ReserveExact(a.size)
	if err == nil {
		a.s.d.counters.dedicatedFallbacks++
	}
	return h, err
}

func (a *allocRoom) warn(err error) {
	a.s.d.log.Warn(fmt.Sprintf("gpumem: allocation of %d bytes failed, retrying after reclaim: %v", a.size, err), "stream", a.s.name)
}

// exactAllowedLocked reports whether a failed reservation of s may be
// served from storage of its own size now (the own-size stage): the device
// open, the page update Allow, and no capture window open (the rehearsal
// and the recording reserve from the pools what the warmup reserved, and a
// warmup buffer served from storage of its own would find no such room
// there: its storage goes back when freed).
func (s *Stream) exactAllowedLocked() bool {
	return !s.d.closed && s.pageUpdateLocked() == memory.Allow && !s.d.captureWindowOpenLocked()
}

// roomStageLocked runs a cleanup, relocate, compact or kept-room stage for a
// reservation of size bytes on s that failed with err. stageCleanup: the
// reclaim of every stream (reclaimOrder: s first, since cached pages of
// other streams count against the same device), moving nothing.
// stageRelocate: page sizes exhausted → a relocation of s that may
// allocate (ArenaFull); otherwise the same reclaim relocating every stream
// for MemoryPressure. stageCompact: the same reclaim compacting: first a
// hole for size in s's pages (the room is there but no single slice holds
// it), else every stream's sparsest current pages emptied, s first, until
// the room err says was missing is freed (compactGoal); never for
// exhausted page sizes, which a denser current pool does not cure;
// stageCompactAgain the same. freed is the bytes its compaction gave back
// (pages emptied, net of the tight pages repacks took). A moving stage answers errNothingToMove when it has nothing to
// move. It waits for the streams with the lock released first
// (settle.go) and returns the page update the retry may make, as the state
// is after that wait. stageKeptRoom moves nothing and waits for nothing:
// the arena's kept room that holds size yields to it
// (memory.Manager.YieldKeptRoom), or it answers errNothingToMove.
func (d *Device) roomStageLocked(ctx context.Context, s *Stream, size uint64, err error, stage roomStage) (_ memory.PageUpdate, freed uint64, _ error) {
	if invariantsOn {
		d.assertLocked("roomStageLocked")
	}
	if d.stageIdleLocked(s, size, err, stage, nil) {
		return 0, 0, errNothingToMove
	}
	if stage == stageKeptRoom {
		if !s.mem.YieldKeptRoom(size) {
			return 0, 0, errNothingToMove
		}
		u, uerr := d.retryUpdateLocked(s)
		return u, 0, uerr
	}
	exhausted := errors.Is(err, pool.ErrPageSizesExhausted)
	if stage == stageRelocate && exhausted {
		if rerr := relocation.Relocate(streamsOf{d: d, s: s, ctx: ctx}, relocation.ArenaFull); rerr != nil {
			return 0, 0, rerr
		}
		u, uerr := d.retryUpdateLocked(s)
		return u, 0, uerr
	}
	if u, uerr := d.retryUpdateLocked(s); uerr != nil || u != memory.Allow {
		return u, 0, uerr // a capture records: no reclaim under it
	}
	order := d.reclaimOrder(s)
	how := reclaimHow{relocate: stage == stageRelocate, reason: relocation.MemoryPressure}
	goal := packGoal(s, compactGoal(err))
	if stage == stageCompact || stage == stageCompactAgain {
		how = reclaimHow{compact: &compactPass{lim: pool.CompactLimits{Goal: goal}, hole: size, holeFor: s}}
	}
	for pass := 1; ; pass++ {
		rerr := d.reclaimLocked(ctx, order, how)
		if c := how.compact; c != nil {
			freed += c.res.BytesFreed // a pass that ended on an error counts what it freed
		}
		if rerr != nil {
			if pass > 1 {
				break // the passes before moved and freed: retry on that
			}
			if !errors.Is(rerr, relocation.ErrRecording) {
				return 0, freed, rerr // the context ended, or an op cannot wait
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
	u, uerr := d.retryUpdateLocked(s)
	return u, freed, uerr
}

// stageIdleLocked reports that a make-room stage would move nothing for a
// reservation of size on s that failed with err (roomStageLocked answers
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
	case stageCompact, stageCompactAgain:
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
// (roomStageLocked): each waits for every stream and copies, and a pass
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
