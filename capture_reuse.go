// Stream-ordered reuse inside a recording (design §10.3).
//
// A graph runs its ops in recorded order on one queue (a cross-stream wait
// dooms the recording), so a buffer the recording allocated and freed again
// is done with before anything recorded after its free begins: its slice can
// serve the recording's later allocations, as PyTorch's private pool serves
// a capture's later blocks. The recording then needs its transient peak, not
// its whole working set. Three things keep that safe.
//
//   - Only a buffer allocated while recording, on the recording stream,
//     bound by nothing but the window's own bindings (no mapping, hold,
//     graph or other stream's pending use), on a pool whose guard holds
//     whole pages, gives its room back; anything else stays bound until the
//     seal, as every touched buffer did before.
//   - The seal holds such room: its free parts become bound slices of their
//     own and every taken slice on it is bound too (pool.Sliced.HoldFree:
//     its owner may let go while the graph still writes there), so nothing
//     new is placed where a launch writes while the graph lives, while the rest of the page serves as
//     usual (a granule the storage will not map falls back to guarding the
//     page). Graph.Close lets go.
//   - A buffer still live at the seal whose bytes overlap returned room is
//     overwritten there at each launch by the earlier buffer's ops, wherever
//     no recorded op of its own writes them first. A recorded op that reads
//     such bytes would read the earlier buffer's, so the seal refuses the
//     recording (ErrCaptureInvalidated, naming the buffer); bytes no recorded
//     op reads or writes are marked at each launch with ErrGraphScratch, so
//     a later read fails instead of returning another buffer's bytes, and the
//     graph orders after the buffer's other uses as after any it touched.

package gpumem

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// ErrGraphScratch is the failure behind a read of bytes a graph launch
// overwrote with another buffer's: the buffer was allocated while the
// graph recorded, on room an earlier buffer of the recording had used and
// freed, and no recorded op writes those bytes. Allocate a buffer whose
// contents must survive launches (a graph input) before the capture.
var ErrGraphScratch = errors.New("gpumem: a graph launch overwrote these bytes with an earlier buffer's: the recording reused their room and no recorded op writes them (allocate graph inputs before the capture)")

// recordedBuffer is a buffer allocated while recording: its requested
// size and the window's bindings of it, released when its room goes back
// (freedLocked). The Buffer itself is not kept: a Clone may outlive the
// reference that allocated it.
type recordedBuffer struct {
	size uint64
	bs   []*handle.Binding
}

// returnedRoom is the slice a recorded buffer gave back: its page in the
// recording stream's memory (for the seal's guard) and its bytes there.
type returnedRoom struct {
	pool   uint8
	page   uint32
	region storage.Region
}

// scratchRange is a range of a live buffer that each launch overwrites
// with an earlier buffer's bytes (ErrGraphScratch marks it).
type scratchRange struct {
	d        *handle.Descriptor
	off, len uint64
}

// returnRoomLocked gives the slice of recorded buffer b back to the
// recording, when nothing but the window binds it (refs: the slice's
// handle, b's, and the window's bindings) and its pool guards whole pages.
// It reports whether it did.
func (c *captureState) returnRoomLocked(b Buffer, r *recordedBuffer) bool {
	desc := b.h.Descriptor()
	loc := desc.Location()
	if desc.Refs() != 2+len(r.bs) || !c.s.mem.GuardsWholePage(loc) {
		return false
	}
	sl, err := c.s.mem.Find(b.h)
	if err != nil {
		return false
	}
	region := sl.Region
	region.Size = sl.EffectiveSize()
	for _, x := range r.bs {
		x.Release()
	}
	c.returned = append(c.returned, returnedRoom{pool: loc.Pool(), page: loc.Page(), region: region})
	c.s.d.counters.captures.Reused++
	c.s.d.counters.captures.ReusedBytes += b.size
	return true
}

// liveOverlapsLocked examines, at the seal, every buffer the recording
// allocated that is still live: where its bytes overlap returned room, it
// returns the ranges each launch overwrites (no recorded op of the buffer
// writes them before) and a binding of the buffer for the graph's uses, or
// the error of a recorded op reading such bytes (with no binding taken).
func (c *captureState) liveOverlapsLocked() (scratch []scratchRange, uses []touch, err error) {
	if len(c.returned) == 0 {
		return nil, nil, nil
	}
	live := slices.SortedFunc(maps.Keys(c.recorded), func(a, b *handle.Descriptor) int { return cmp.Compare(a.ID(), b.ID()) })
	// A refusal found after some bindings were taken releases them.
	defer func() {
		if err != nil {
			for _, u := range uses {
				u.b.Release()
			}
			uses, scratch = nil, nil
		}
	}()
	for _, desc := range live {
		r := c.recorded[desc]
		sl, ferr := c.s.mem.Find(descRef{desc})
		if ferr != nil {
			continue
		}
		var overlap []span
		for _, ret := range c.returned {
			if ret.region.ID != sl.Region.ID {
				continue
			}
			lo, hi := max(ret.region.Offset, sl.Region.Offset), min(ret.region.End(), sl.Region.Offset+r.size)
			if lo < hi {
				overlap = append(overlap, span{lo - sl.Region.Offset, hi - sl.Region.Offset})
			}
		}
		if len(overlap) == 0 {
			continue
		}
		// In recorded order: a read of overlapping bytes that no earlier
		// op of the recording wrote would read the earlier buffer's.
		var written []span
		for i := range c.opReads {
			for _, rd := range c.opReads[i] {
				if rd.d != desc {
					continue
				}
				for _, o := range overlap {
					read := span{max(o.off, rd.off), min(o.end, rd.off+rd.len)}
					if read.off < read.end && len(read.subtract(written)) > 0 {
						return scratch, uses, fmt.Errorf("%w: recorded op %d reads bytes [%d, %d) of buffer %d, which was allocated while recording on room an earlier buffer of the recording used: each launch overwrites them before that op runs (allocate the buffer before the capture, or write it in the recording first)",
							ErrCaptureInvalidated, i, read.off, read.end, desc.ID())
					}
				}
			}
			for _, w := range c.written[c.opWritten[i][0]:c.opWritten[i][1]] {
				if w.b.Descriptor() == desc {
					written = append(written, span{w.off, w.off + w.len})
				}
			}
		}
		for _, o := range overlap {
			for _, p := range o.subtract(written) {
				scratch = append(scratch, scratchRange{d: desc, off: p.off, len: p.end - p.off})
			}
		}
		// The slice's own handle names the allocation whichever of its
		// references is still live.
		uses = append(uses, touch{b: sl.Handle().Binding(), owner: c.s, writes: true})
	}
	return scratch, uses, nil
}

// markScratchLocked marks, at a launch, the bytes of live buffers the
// launch overwrites with an earlier buffer's (ErrGraphScratch).
func (g *Graph) markScratchLocked() {
	if len(g.scratch) == 0 {
		return
	}
	s := g.s
	d := s.d
	f := d.g.Fail(fmt.Errorf("gpumem: graph launch on %s: %w", s.name, ErrGraphScratch), "launch")
	outs := make([]output, 0, len(g.scratch))
	for _, r := range g.scratch {
		if s.mem.MarkFailure(descRef{r.d}, f, r.off, r.len) == nil {
			outs = append(outs, output{d: r.d, owner: s, off: r.off, len: r.len})
		}
	}
	d.markedLocked(s, "launch", outs, f)
	d.g.Prune()
}
