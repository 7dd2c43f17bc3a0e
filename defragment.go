// Compaction at a moment the runtime chooses (design §7.7): Defragment, its
// options and result, and the pass that bounds and counts one compaction.
//
// The make-room path compacts on its own, as its last moving stages, only when a
// reservation would fail otherwise. A runtime that knows a quiet moment
// (between training steps, after loading weights) can compact then instead,
// in bounded passes as the Vulkan Memory Allocator's defragmentation does,
// and keep a later allocation off the slow path. Unlike VMA, nothing is left
// to the caller: the device copies, re-points every Buffer and gives the
// emptied pages back.

package gpumem

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/internal/pool"
	"github.com/gpumem/gpumem/internal/relocation"
)

// ErrInvalidLimits is returned by Defragment for a negative
// DefragOptions.MaxMoves.
var ErrInvalidLimits = errors.New("gpumem: invalid defragmentation limits")

// DefragOptions bounds one Defragment pass. A pass empties whole pages only:
// a page whose moves would pass a bound is left for a later pass.
type DefragOptions struct {
	// MaxBytes bounds the requested bytes the pass copies (0: no bound).
	MaxBytes uint64
	// MaxMoves bounds the allocations the pass moves (0: no bound; a
	// negative value is refused with ErrInvalidLimits).
	MaxMoves int
}

// DefragResult is what one Defragment call did, summed over the streams.
// Moves, BytesMoved, PagesFreed and BytesFreed are its compaction's alone;
// PagesReleased and BytesReleased are everything the call gave back to the
// device, compaction included. The cleanup Defragment runs first often
// gives back more than its compaction (every empty page, the outdated
// pages its relocation emptied, free granules on granular storage), and a
// caller judging whether the call was worth it reads the latter two.
type DefragResult struct {
	Moves      uint64 // allocations compaction moved
	BytesMoved uint64 // requested bytes those moves copied
	PagesFreed uint64 // current pages compaction emptied and gave back
	BytesFreed uint64 // bytes of those pages (mapped bytes on granular storage)
	// PagesReleased counts the storage allocations the call handed back to
	// the device: pages, dedicated buffers and persistent slots its cleanup
	// let go, the outdated pages its relocation emptied, and PagesFreed.
	PagesReleased uint64
	// BytesReleased is the device memory those held (an allocation's size;
	// a granular page's mapped granules) plus the granules unmapped from
	// pages that stay, BytesFreed included. On a device nothing else uses
	// meanwhile, Stats.BytesAllocated falls by that much, less the
	// granules moves mapped on their targets (granular storage). A release
	// that waits for work queued before it counts too: Defragment waits for
	// that work before it returns.
	BytesReleased uint64
}

// compactPass bounds what one compaction may still move (lim) and gathers
// what it moved and freed (res), across the streams it runs on. For the
// make-room path, hole is the failed reservation's size on holeFor: a hole
// for it there is tried before any page is emptied.
type compactPass struct {
	lim     pool.CompactLimits
	res     DefragResult
	hole    uint64
	holeFor *Stream
}

// underPressure reports whether the pass compacts toward a goal (p may be
// nil): a failed reservation's, where a page may be repacked (pool: repack)
// and small pages emptied into the arena, as the memory's Compact does
// with the same limits; Defragment's never is.
func (p *compactPass) underPressure() bool {
	return p != nil && p.lim.Goal > 0
}

// spent reports whether the pass may move nothing more.
func (p *compactPass) spent() bool { return p.lim.Spent() }

// wantsHole reports whether the pass makes a hole on s (p may be nil).
func (p *compactPass) wantsHole(s *Stream) bool {
	return p != nil && p.hole > 0 && p.holeFor == s
}

// holeMade ends the pass: the retry has the room it lacked.
func (p *compactPass) holeMade() { p.lim = pool.CompactLimits{MaxMoves: -1} }

// charge adds what one stream's compaction did (its relocation counters
// after less before) to the result and takes it off the limits.
func (p *compactPass) charge(after, before relocation.Stats) {
	moves := after.CompactMoves - before.CompactMoves
	bytes := after.CompactBytesMoved - before.CompactBytesMoved
	freed := after.CompactBytesFreed - before.CompactBytesFreed
	p.res.Moves += moves
	p.res.BytesMoved += bytes
	p.res.PagesFreed += after.CompactPagesFreed - before.CompactPagesFreed
	p.res.BytesFreed += freed
	p.lim = p.lim.Less(bytes, int(moves), freed)
}

// Defragment compacts every stream's current pages now, in creation order,
// within opts: the sparsest pages' allocations move into free room of the
// stream's other pages (never onto a new page), every Buffer is re-pointed,
// and the emptied pages go back. Outdated pages are relocated first, as a
// Cleanup would. Pages a graph guards, and pages with an allocation a
// mapping or queued cross-stream work binds, stay put.
//
// When it helps: to give memory back at a moment the runtime chooses, when
// live allocations lie scattered over pages whose free room the workload
// will not use again soon — after a phase that freed most of what it
// allocated, or before the memory is wanted elsewhere (another process,
// another device user). Compacting at such a moment also keeps a later
// reservation off the slow path, which would otherwise compact under it.
//
// When it does not: a plain Cleanup already gives back every empty page,
// relocates what outdated pages hold (a growth leaves them behind) and, on
// granular storage, unmaps free granules; where the freed buffers emptied
// whole pages, Defragment gives back what Cleanup would, moving nothing
// (PagesReleased with Moves 0). It is not needed to keep allocations from
// failing either: a reservation that would fail for want of memory
// compacts on its own, as the last stages of making room, and relocation
// off outdated pages runs on its own when the arena has used its page
// sizes and when a capture is prepared (design §7.7, §8.1). It cannot
// touch pages a graph guards or allocations a mapping or queued
// cross-stream work binds, and on granular storage, where a sparse page
// costs only its mapped granules once they are unmapped, its compaction
// has little to give back beyond the cleanup's unmapping. Memory given
// back is memory the next growth asks the device for again: between the
// steps of a loop that will allocate the same again, it costs more than
// it saves.
//
// Like Cleanup it waits, without the device lock, until every stream's
// work is done (a move may touch memory any stream uses), so it is for a
// quiet moment: ctx bounds that wait (its error is returned with nothing
// moved). It is refused while a stream records a graph (ErrRecording),
// from inside an op (ErrCalledFromOp), on a closed device (ErrClosed), and
// for a negative MaxMoves (ErrInvalidLimits). A device opened
// WithoutCompaction or WithoutRelocation moves nothing: its result counts
// what the cleanup gave back. What a call moved and gave back before a
// failure is kept and returned with the error.
func (d *Device) Defragment(ctx context.Context, opts DefragOptions) (DefragResult, error) {
	if opts.MaxMoves < 0 {
		return DefragResult{}, fmt.Errorf("%w: MaxMoves is %d (0 means no bound)", ErrInvalidLimits, opts.MaxMoves)
	}
	if err := ctx.Err(); err != nil {
		return DefragResult{}, err
	}
	if err := d.lockUnlessBorrowed("Device.Defragment"); err != nil {
		return DefragResult{}, err
	}
	res, err := d.defragmentLocked(ctx, opts)
	// As after Cleanup: on a backend that frees off the caller's path
	// (Releaser), the pages given back are freed before Defragment returns.
	d.releaseAndUnlock(err == nil)
	return res, err
}

// defragmentLocked is Defragment under the device lock.
func (d *Device) defragmentLocked(ctx context.Context, opts DefragOptions) (DefragResult, error) {
	if d.closed {
		return DefragResult{}, ErrClosed
	}
	if err := d.refuseWhileRecordingLocked(d.streams[0]); err != nil {
		return DefragResult{}, err
	}
	// The history records the call when it returns, after what its drain
	// of cross-stream uses released and what it moved (a failed one too:
	// what it moved is kept). A replay performs it there, after those
	// releases, so its Defragment finds free what the device's found.
	defer func() {
		if h := d.hist; h != nil {
			h.defragmentLocked(opts)
		}
	}()
	pass := &compactPass{lim: pool.CompactLimits{MaxBytes: opts.MaxBytes, MaxMoves: opts.MaxMoves}}
	var gave releaseTally
	result := func() DefragResult {
		res := pass.res
		res.PagesReleased, res.BytesReleased = gave.pages, gave.bytes
		return res
	}
	// Relocation off outdated pages first: their live allocations belong
	// on current pages, and compaction then keeps those dense.
	if err := d.reclaimLocked(ctx, d.streams, reclaimHow{relocate: true, reason: relocation.Explicit, gave: &gave}); err != nil {
		return result(), err
	}
	if d.noRelocate || d.noCompact {
		return result(), nil
	}
	err := d.reclaimLocked(ctx, d.streams, reclaimHow{compact: pass, gave: &gave})
	return result(), err
}
