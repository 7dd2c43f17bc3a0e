// Package relocation owns the relocation protocol as values and rules: how
// live allocations leave outdated pages for current ones, when that is worth
// doing, and in which order a runtime's streams are asked to make it safe.
//
// This comment is the one relocation overview; the other files of this package,
// and the pool package's Plan and Commit, point here.
//
// # The protocol: plan → copy → land → commit
//
// A relocation moves the live allocations of outdated pages (pages of pools a
// growth left behind) into current pages and re-points every owner, so the
// outdated pages go back to the device now rather than when their
// longest-lived allocation ends.
//
//  1. Plan (pool.Arena.Plan, design §7.2). The arena picks whole pages, cheapest
//     first, and for each live allocation on them reserves a target slice on
//     the current pool. Each pairing is a [Move]: a clone of the allocation's
//     handle (sharing the owners' descriptor), the reserved target handle, and
//     the [StorageCopy] of the allocation's requested bytes. The plan is a
//     [Relocation]; a [TargetRoom] says whether targets may take new pages.
//  2. Copy ([Relocation.Copy], design §7.3). Through a [CopyQueue]: wait until
//     every stream's work is done, enqueue each copy in plan order, and always
//     wait for what was enqueued to land. Only a successful Copy returns a
//     [Landed].
//  3. Land. A [Landed] is the proof that every byte is where it moves to; no
//     exported constructor exists, so an allocation cannot be re-pointed at
//     bytes that never arrived.
//  4. Commit (pool.Arena.Commit, design §7.4). From the Landed value the arena
//     rewrites each allocation's location to its target, frees each source
//     slice and drains the emptied pages.
//
// A relocation that fails before landing is abandoned ([Relocation.Abandon]:
// targets free again, allocations untouched) or, when a wait failed and the
// device may still be writing, leaked: its clones are dropped unreleased so
// neither source nor target is ever reused ([Relocation.Leaked]).
//
// When to relocate is decided from plain data: a [Reason] says what asked and
// which [TargetRoom] it allows; a [Trigger] turns an [ArenaState] into a
// [Need], and [Need.Reason] names the relocation it asks for. Memory
// pressure is never anticipated: a relocation changes where later
// allocations land, so it runs only once a reservation has failed and a
// cleanup alone did not cure it (trigger.go). The [Streams] interface is the
// runtime's side (ten required steps), and the nine provided functions
// ([RefuseWhileRecording], [Reclaim], [ReclaimFor], [Wanted],
// [RelocateWhenWanted], [Relocate], [RelocateDevice], [CompactPages],
// [ReclaimCompacting]) hold the one order in which those steps run.
//
// # Compaction
//
// The same protocol also defragments current pages (Reason [Compact]): the
// pool plans moves of the live allocations of its sparsest current pages
// into free room of its other current pages (pool.Sliced.PlanCompact), or,
// under pressure on pages backed whole, onto one new page of their packed
// size, smaller than theirs; only for a page whose every allocation finds
// room, so the page really empties;
// the copy and the commit are the ones above, and the emptied pages go back
// in the cleanup that follows. Compaction is the make-room path's last
// moving stage, after a cleanup and a relocation off outdated pages both failed,
// so up to that moment a compacting device does exactly what one without
// compaction does.
//
// # Owns
//
// [Relocation], [Move], [Landed] (constructible only here), [StorageCopy],
// [TargetRoom], [CopyQueue] and its host implementation [HostCopies],
// [Reason], [Need], [Trigger], [ArenaState], [ArenaShape], [Outcome],
// [Stats], [ErrRecording], [ErrSizeMismatch], the [Streams] interface and the
// nine provided steps.
//
// # Invariants
//
//   - (R1) No byte moves until every stream's work is done: the copy queue
//     waits on every stream and on driver work outside streams before the
//     first copy, and work a queue batches is submitted in Streams.Finish
//     first.
//   - (R2) Nothing moves while any stream of the device records; relocation
//     never runs inside a reservation whose PageUpdate is not Allow.
//   - (R3) A guarded page never moves, is never carved again, is never
//     released. A page holding a bound allocation is not planned.
//   - (R4) An allocation moves only once its bytes have landed (only Copy
//     makes a Landed). A plan empties a page entirely or leaves it alone.
//   - (R5) Targets are carved only on the current pool, never on outdated
//     pools or guarded pages; source and target are distinct live slices of
//     equal size on distinct pages (NewMove panics otherwise).
//   - (R6) After commit every owner resolves to the target; IDs, handle
//     objects and counter values are what they were. Failure marks move with
//     the bytes; a freed source carries none.
//   - (R7) After a failed non-poison wait, neither source nor target is ever
//     reused.
//
// This package enforces R1 and R2 through the order of the provided functions
// and of [Relocation.Copy], R4 through [Landed], R5's shape through [NewMove]
// and R7 through the leak path of Copy; the pool package enforces R3, R5's
// placement and R6.
//
// # Does not know
//
// How pools place slices, which pages are outdated or guarded, what a stream
// or a fence is: the pool package plans and commits, the root package
// implements [Streams] and the device's [CopyQueue], and logs what a failed
// relocation left behind (this package returns errors and never logs).
//
// # Concurrency
//
// Nothing here is safe for concurrent use, and nothing needs to be: relocation
// is stop-the-world for the device, and every call is made under the device
// lock. A CopyQueue may hand copies to stream workers; WaitCopies is the
// happens-before edge after which the relocation's handles may be touched.
package relocation
