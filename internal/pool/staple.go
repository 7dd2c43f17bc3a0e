package pool

// Staple sizes: pages tiled for the sizes a workload keeps making, and
// their room kept for them (PL36, PL37; design §5.3).
//
// A pool's page is sized for the arena's largest allocations (a growth's
// tiled size, tiling.go), so it tiles those and not the others. On a
// transformer's forward pass at long contexts the page is the vocabulary
// projection's or a multiple of the MLP weight (860 MiB: five 172 MiB
// weights), while the 64 MiB attention weights and activations leave 28 MiB
// of every page they fill, and, worse, take the open room between the
// 172 MiB weights: a page ends `[172 172 172 172 64 64 | 44]`, and a
// 256 MiB buffer in a 64 MiB page's room leaves `[64×5 256 256 | 28]`.
// PyTorch gives each of those a segment of its exact size. Summed over a
// pass the tails were 1–2 GiB that nothing could use or compact (every live
// slice larger than every hole), and whole pages needed up to 1.6 % more
// than the torch model on eight of 120 generated forward passes.
//
// A staple size is one the arena has served at least stapleServedPages
// pool pages' worth of: the weights and activations a model makes layer
// after layer, not the random sizes of a churning workload or the KV
// blocks of a server, which recur too rarely at any one size. Two rules
// read it, and nothing else changes:
//
//   - PL36: a staple size that a pool page holds at least twice but leaves
//     a tail of at least a 1/stapleTailDiv of the page in, in whole 2 MiB
//     tiles (so that the smaller page tiles it exactly), opens a page of
//     ⌊P/need⌋·need bytes instead of the pool's P: 832 MiB for the 64 MiB
//     buffers on 860 MiB pages. A size PL32 gives a page of its own size
//     is not asked.
//   - PL37: a page opened by a staple size that tiles it (the page a whole
//     number of them, at least two) keeps its open room (the free run
//     from the last live slice to the end of the page), while that room is
//     a whole number of the size and less than the page, from a
//     reservation of another size that does not tile the room: one above
//     an eighth of the page takes other room, or a page (PL32's own size,
//     for most); one of at least a sixteenth takes it only when no other
//     run of the pool holds it, before a new page. Smaller ones share it as
//     any room. A pool of one page carves by first fit (PL33), and a
//     compaction's moves by best fit (compact_fit.go): neither keeps room.
//     And a reservation that the device could place nowhere else, after
//     every way to make room failed, takes it (YieldKeptRoom): kept room
//     decides where a buffer goes, never whether it fits.
//
// Like every placement rule they read only sizes, the page and the served
// history, never the device's free memory, so every capacity places alike
// until the first refusal. Together they bring whole pages to or below the
// torch model on every forward pass measured and leave the workloads without
// staples as they were; some forward passes need a little more than before.
// The figures, trace by trace, and the variants rejected are in
// docs/decisions/2026-12-05-staple-sizes.md.

import "github.com/gpumem/gpumem/internal/handle"

const (
	// stapleServedPages is how many pool pages' worth of one size the arena
	// must have served before the size counts as a staple. Two let a
	// server's recurring KV-block sizes in (three llm-server figures rose,
	// and a forward pass stayed above the torch model); four keep them out;
	// at eight two forward passes stayed above.
	stapleServedPages = 4
	// stapleTailDiv bounds PL36 from below: a size whose tail on the pool's
	// page is under 1/stapleTailDiv of it keeps the pool's page. At 1/32
	// three forward passes stayed above the torch model.
	stapleTailDiv = 64
	// keptRoomShareDiv and keptRoomSoftDiv are PL37's bounds: a
	// reservation needing more than 1/keptRoomShareDiv of the page (PL32's
	// range, where a size that does not tile gets a page of its own) never
	// takes kept room; one needing at least 1/keptRoomSoftDiv takes it only
	// when no other room holds it, before a new page; smaller ones share it
	// as any room. Without the soft step (sizes up to an eighth sharing
	// kept room as any room) two forward passes stayed above the torch
	// model.
	keptRoomShareDiv = ownPageShareDiv
	keptRoomSoftDiv  = 2 * ownPageShareDiv
)

// staple reports that the arena has served at least stapleServedPages
// pages of pageSize worth of need (effective bytes): ⌊pageSize/need⌋·need
// bytes a page.
func (s *servedSizes) staple(need, pageSize uint64) bool {
	if need == 0 || need > pageSize {
		return false
	}
	return s.bytesOf(need) >= stapleServedPages*(pageSize/need*need)
}

// stapleTiledPage is PL36: on storage that backs pages whole, the page a
// reservation of size gets instead of one of p's size, and whether it gets
// one. Called only for a reservation PL32 did not give its own page.
func (a *Arena) stapleTiledPage(granule uint64, p *Sliced, size uint64) (uint64, bool) {
	if granule > 0 {
		return 0, false // a page is address space: its tail maps nothing
	}
	_, need := padded(size, a.sizing.Align)
	if need == 0 || need%TileStep != 0 {
		return 0, false
	}
	k := p.pageSize / need
	if k < 2 || p.pageSize-k*need < p.pageSize/stapleTailDiv || !a.served.staple(need, p.pageSize) {
		return 0, false
	}
	page := a.sizing.clamp(k * need)
	return page, page < p.pageSize
}

// markKept records on pg, a page p just added for a reservation of need
// effective bytes (a relocation target's included), the staple size PL37
// keeps its open room for: need, when it is a staple of p's arena that
// tiles the page, at least two to it, on storage that backs pages whole.
func (p *Sliced) markKept(pg *page, need uint64) {
	if p.arenaServed == nil || pg.granule > 0 || need == 0 || pg.size()%need != 0 || pg.size()/need < 2 || !p.arenaServed.staple(need, p.pageSize) {
		return
	}
	pg.keptFor = need
}

// keptLevel is how firmly PL37 keeps a run from a reservation.
type keptLevel uint8

const (
	notKept  keptLevel = iota // the run serves the reservation as any other
	keptSoft                  // it serves only when no other run holds the reservation
	keptHard                  // it does not serve the reservation
)

// roomKept is PL37 for a free run of run bytes on pg (the page's open room
// when open) and a reservation of need effective bytes: kept, while the run
// is a whole number of the page's kept size and less than the page, from
// another size that does not tile it: softly from one of at least
// 1/keptRoomSoftDiv of the page, firmly from one above 1/keptRoomShareDiv.
func (pg *page) roomKept(run, need uint64, open bool) keptLevel {
	o := pg.keptFor
	if !open || o == 0 || need == o || need < pg.size()/keptRoomSoftDiv || run >= pg.size() || run%o != 0 || run%need == 0 {
		return notKept
	}
	if need > pg.size()/keptRoomShareDiv {
		return keptHard
	}
	return keptSoft
}

// openRoom reports that a listed run of run bytes counts as pg's open room:
// the page's last slice is free and its last listed run has that size. A
// hole of exactly that size counts too (the run index lists sizes, not
// places); both are then whole numbers of the kept size, and keeping either
// keeps the page tiled. The dry run counts alike (View.fitOn).
func (pg *page) openRoom(run uint64) bool {
	n, m := len(pg.slices), len(pg.listedRuns)
	return n > 0 && m > 0 && pg.slices[n-1].h.IsFree() && pg.listedRuns[m-1] == run
}

// YieldKeptRoom is PL37's last step, for a reservation of size that the
// storage refused room for after every other way to make room (gpumem's
// make-room stages: cleanup, relocation, compaction): the page of the
// current pool whose open room PL37 keeps firmly from size and holds it
// (the smallest such room, the run the tightest page would be) stops
// keeping its room, and a retried reservation takes it. Kept room is a
// preference of placement, never a reason to run out of memory: without
// this an allocation could fail beside a free run that holds it. Only
// where the device would otherwise fail, so, as a make-room stage, it can
// only let a trace run on less memory. It reports whether a page yielded;
// g coalesces the pages whose signal rose first, as a reservation does.
func (a *Arena) YieldKeptRoom(size uint64, g *handle.ErrorGraph) bool {
	p, need, ok := a.keptRoomPool(size)
	if !ok || len(p.pages) < 2 {
		return false
	}
	ix := p.runIndex()
	ix.refresh(g)
	pg := ix.firmlyKept(need)
	if pg == nil {
		return false
	}
	pg.keptFor = 0
	return true
}

// WouldYieldKeptRoom is YieldKeptRoom in a dry run's view: whether a page
// of the current pool would yield its kept room to size (the view records
// it, so the dry reservation retried takes that room). A page holding such
// room serves the retry whichever it is, so the dry run takes the first.
func (a *Arena) WouldYieldKeptRoom(v *View, size uint64) bool {
	p, need, ok := a.keptRoomPool(size)
	if !ok || v.pageCount(p) < 2 {
		return false
	}
	for _, pg := range p.pages {
		if pg.guarded() || !v.present(pg) {
			continue
		}
		open := v.keptOpenRoom(pg)
		if open < need || pg.roomKept(open, need, true) != keptHard {
			continue
		}
		if v.unkept == nil {
			v.unkept = map[*page]bool{}
		}
		v.unkept[pg] = true
		return true
	}
	return false
}

// keptRoomPool is the pool a reservation of size is carved from, where
// PL37 may keep room from it, and size's effective bytes: the current pool,
// when size fits it without a growth.
func (a *Arena) keptRoomPool(size uint64) (*Sliced, uint64, bool) {
	if kind, _ := a.sizing.Fit(size, a.PageSize()); kind != Fits {
		return nil, 0, false
	}
	p := a.Current()
	_, need := padded(size, p.align)
	return p, need, true
}
