// Package pool places allocations on storage: it carves storage allocations
// into slices, keeps them in pools of different placement policies, and
// grows the adaptive memory's arena of page sizes, planning and committing
// the moves that empty the pages the arena outgrew.
//
// # Pages, slices and locations
//
// A page is one storage allocation (a [storage.Region]) carved into slices.
// A [Slice] is a window of its page (offset and requested size) followed by
// alignment padding; the two together are its effective size. A slice holds
// the handle of the allocation on it, whose descriptor carries the slice's
// location (pool, page, slice). Every owner of an allocation shares that
// descriptor, so when a pool renumbers pages or slices, or [Arena.Commit]
// moves an allocation, it rewrites the one descriptor and every owner
// follows. A pool has no free call: a slice is free when only the pool
// refers to it ([handle.Handle.IsFree]), and pools find free slices by
// looking.
//
// Every pool implements [Pool]: Accept says whether it serves a size,
// TryReserve serves from room it already holds, Alloc adds storage and
// reserves on it, Cleanup gives back what its policy lets go, Guard freezes
// a page or an allocation ([PageGuard]), Slice and Report look. A
// reservation hands the slice it finds to its [Bind]: to a buffer known in
// advance, bound in the same step with no clone (the steady allocation), or
// as a clone of the slice's handle, which the caller binds to its buffer
// later ([Slice.Rebind]) and releases. Alloc's new pages always return the
// clone.
//
// # The pools
//
//   - [Sliced]: pages of one size carved into slices, first fit on effective
//     size. A page keeps hints (a free signal raised by every release that
//     leaves a slice free, an upper bound on its largest free slice, the
//     first index that may be free) so that reservations and cleanups skip
//     pages on which nothing was freed without touching their slices.
//   - [Exclusive]: one allocation per page, pages sized by a decaying average
//     of the sizes asked and aged out when unused.
//   - [Direct]: one storage allocation of exactly the effective size asked
//     per buffer, in a list whose indices never change ([DedicatedIndex]).
//   - [Persistent]: exact fit for data that is likely never freed, indexed by
//     effective size, given back only by an Explicit cleanup
//     ([PersistentIndex]).
//
// Exclusive, Direct and Persistent share the slot: a "page" that is one
// storage allocation holding exactly one slice, at location (pool, i, 0).
//
// # The arena
//
// [Arena] holds up to [ArenaSlots] sliced pools, one per page size
// ([PageSizing] bounds them, [PageSizing.Fit] decides). One is current and
// serves every reservation. A size that does not fit the current page size
// grows the arena: a pool of bigger pages takes the lowest empty slot and
// becomes current, and the previous one becomes outdated. The bigger page
// size tiles what the arena served (tiling.go): among the sizes that hold
// the growth's allocation, up to twice it, the one whose tails and
// half-empty last page would cost the fewest bytes for what the arena
// holds, because on storage that backs pages whole a page's tail is
// reserved bytes no allocation uses. On granular storage, where a page is
// address space and a tail costs nothing mapped, a growth takes the largest
// page instead (PL31), so the arena grows once. On whole pages a page the
// storage refuses is asked again at the reservation's own size (PL30), and
// a reservation needing more than half a page gets a page of its own size
// from the start (PL32), as PyTorch gives a large request a segment of its
// size: no second one that large could share the page; so does one needing
// more than an eighth whose size does not tile the page, where the rest
// the reservations of its size leave would cost more than the own-size
// page's rounding. A size the arena keeps making (a staple: a model's
// weights and activations) that leaves a tail on the pool's page gets
// pages it tiles, and the pages it opens keep their room for it (PL36,
// PL37, staple.go). An outdated pool serves nothing; [Arena.Drain] gives its pages back once they are empty and
// unguarded and drops the pool when it holds none. A long-lived allocation
// can pin an outdated page indefinitely, so the arena also holds the pool
// side of a relocation: [Arena.Plan] reserves, on the current pool, a target
// for every live allocation of the outdated pages it can empty, and
// [Arena.Commit] re-points each allocation at its target once its bytes
// landed, then drains. Package relocation owns the protocol between the two
// (copy, land, abandon, leak) and when to run it.
//
// # Page guards and granule mapping
//
// A [PageGuard] freezes one sliced page, or one allocation of the other
// pools: nothing new is carved from it, it is never released or unmapped,
// and Plan neither moves it nor carves targets on it. [Sliced.HoldFree]
// freezes less: the free bytes of one range of a page, carved into slices
// of their own and bound (hold.go), for room a graph writes that no buffer
// owns; the rest of the page serves as usual. [Sliced.HoldRoom] sets room
// aside the same way for one owner (a capture's recording), which carves
// from it at the offsets it chooses and gives slices back to it (room.go,
// PL34).
//
// On granular storage ([storage.Granular] with a granule > 0) a sliced page
// is a reservation of address space whose granules are mapped on demand: a
// reservation maps the granules its slice covers before it returns, and
// [Sliced.UnmapFree], which an Explicit cleanup runs, unmaps the ones no
// live slice touches.
//
// # Dry runs
//
// A caller that must know what a reservation would do before it makes one
// (gpumem's WouldFit) asks each pool's dry form (WouldReserve,
// WouldTryReserve, WouldAlloc, WouldCleanup, ...) in a [View]: the pools as
// they are, less what the steps before the reservation would give back
// (bindings released, a periodic or an explicit cleanup), which the dry
// cleanups record in the view, with a [Dry] storage answering for the
// storage. The answer is a [Would]. The sequences of more than one
// question are written once for the reservation and its dry run (the
// arena's page requests, pageTries; its growth, growth); the rest asks the
// pools' own predicates. A dry run writes no pool, page, handle or storage,
// so every invariant below holds through it as before it.
//
// # Owns
//
// [Pool], [Slice], the pools [Sliced], [Exclusive], [Direct] and
// [Persistent], the [Arena] with [PageSizing], [FitKind], Plan and Commit,
// [PageGuard], held free room ([Sliced.HoldFree]), room held for one owner
// ([Room], [Sliced.HoldRoom], [Arena.HoldRoom]), granule mapping of
// sliced pages, the dry runs ([View], [Dry], [Would]), [Limits], [CleanupKind],
// [Usage], [Report], [Kind] and its five implementations, [Bytes], and the
// errors [ErrBufferTooBig] and [ErrPageSizesExhausted].
//
// # Invariants
//
// Pages (page.go) and sliced pools (sliced.go):
//
//   - (PL1) A page's slices are contiguous, in offset order: slice i+1 starts
//     where slice i's effective size ends, the first at the page's offset.
//   - (PL2) The effective sizes (requested size + padding) of a page's slices
//     sum to the page size. A reservation fits by effective size, so reusing
//     a slice with a split keeps the sum exact.
//   - (PL3) The slice at index i of page p carries location (pool, p, i):
//     every index change (split, coalesce, page renumbering) rewrites the
//     descriptors of the slices it moves.
//   - (PL4) While a page's changed signal is down, no slice of it became free
//     since its last scan: maxFree bounds its largest free slice from above,
//     no slice below firstFree is free, and empty is exact. Every allocation
//     on the page raises the signal when a release leaves it free, and so
//     does releasing a page guard.
//   - (PL5) The page at position i of a sliced pool carries index i:
//     releasing pages renumbers the survivors densely, in order (PL3).
//
// Granules of sliced pages on granular storage (granules.go):
//
//   - (PL6) A slice that is not free lies on mapped granules: every granule
//     its effective window touches is mapped. A reservation maps them before
//     it returns, and a refused mapping leaves the page as it was (the
//     granules mapped for it are unmapped again and nothing is carved);
//     a refusal for want of memory passes over that slice to the next one
//     on the page that holds the reservation, whose granules may be mapped.
//   - (PL7) A granule is unmapped only by unmapFree, only when no live slice
//     touches it, and never on a guarded page: a guard's holder may use any
//     address of the page, free slices included.
//
// Slots of the exclusive, direct and persistent pools (single.go):
//
//   - (PL8) A slot's slice is a window at the start of its storage
//     allocation: same ID and offset, effective size at most allocSize.
//     Exclusive pages may be larger than the window they serve; direct and
//     persistent slots fit exactly (effective size == allocSize).
//   - (PL9) The slot at index i carries location (pool, i, 0): every
//     renumbering rewrites its descriptor, so held handles and bindings
//     follow.
//   - (PL10) A slot is free ⇔ its slice's handle is free (refs ≤ 1). An
//     allocation guard holds a binding, so a guarded slot is never free:
//     never handed out again and never released. No pool keeps a separate
//     "guarded" flag.
//
// The exclusive pool (exclusive.go):
//
//   - (PL11) avg = avg·(1 − 0.01) + 0.01·size on every TryReserve of an
//     accepted size, hit or miss; it starts at maxAlloc/2 and stays ≤
//     maxAlloc.
//   - (PL12) A new page holds roundUp(max(uint64(avg), size), align) bytes: at
//     least the request, at most maxAlloc. Its freeCount starts one below
//     allocAfterFree.
//   - (PL13) TryReserve takes, among free pages of allocSize ≥ size, the one
//     with the smallest freeCount (tie: lowest index) and decrements it,
//     saturating.
//   - (PL14) An exclusive Cleanup runs when Explicit or when
//     deallocPeriod/5 reservations passed since the last run: each free page
//     ages (freeCount++) and goes back at allocAfterFree, or at once when
//     Explicit. Survivors are renumbered densely (PL9).
//   - (PL15) A guarded page is never free (PL10): never reused, aged or
//     released.
//
// The direct pool (direct.go):
//
//   - (PL16) Live indices never change: a released slot leaves a vacant (nil)
//     entry, reused by the next Alloc that finds it the lowest vacancy;
//     trailing vacancies are trimmed. A direct pool never renumbers.
//   - (PL17) reserved = Σ allocSize of present slots; every slot fits
//     exactly, so TryReserve reuses only a free slot of exactly the
//     effective size asked.
//   - (PL18) With a watermark (reclaimAt), an Alloc that may release first
//     gives back free slots in index order while reserved + the new
//     effective size exceeds the watermark, stopping once it fits; Reclaim
//     does the same with no new size.
//   - (PL19) A guarded slot is never free (PL10): never reused, never
//     released.
//   - (PL20) Releasing a slot clears its failure marks in the error graph. A
//     call made without the graph (Pool.Alloc) skips free slots that carry
//     marks; they go at the next call that has it.
//
// The persistent pool (persistent.go):
//
//   - (PL21) Slots are dense, in allocation order; only an Explicit cleanup
//     removes any, and it renumbers the survivors (PL9).
//   - (PL22) sizes maps an effective size to the indices of the slots of
//     exactly that size, in index order; every slot is in exactly one
//     bucket, the one of its allocSize. TryReserve and Alloc both key by
//     effective size.
//   - (PL23) The bytes reserved are Σ allocSize, free slots included: freed
//     slots stay until an Explicit cleanup gives them back (marks cleared),
//     renumbers the live ones, rebuilds sizes and flushes the storage.
//     Periodic cleanup does nothing.
//   - (PL24) A guarded slot is never free (PL10): never reused, never
//     released.
//
// The arena (arena.go, plan.go):
//
//   - (PL25) Exactly one pool is current; every other pool the arena holds
//     is outdated, listed once, in growth order.
//   - (PL26) An outdated pool serves no reservation and no relocation target,
//     even with room; Drain gives back its empty unguarded pages and drops
//     it, freeing its slot, once it holds no page.
//   - (PL27) The page size never shrinks: a growth's page size holds the
//     effective size that asked for it, which the current page did not.
//   - (PL28) A growth allocates the new pool's first page and reserves on it
//     before switching: a refused growth changes nothing.
//   - (PL29) While a sliced pool's no-fit bound is known and its
//     reservation signal is down, no unguarded page holds a free slice of
//     more effective bytes than the bound: only a failed full scan sets it,
//     any scan's start drops it, and a release, an unguarding or a new page
//     raises the signal. A reservation needing more skips the scan.
//   - (PL30) On storage that backs pages whole, a new arena page the
//     storage refuses for want of memory is asked again at the
//     reservation's own effective size (at least Min, below the pool's page
//     size); only a refusal does it, so a device with the bytes for every
//     page runs as without it. Such a page is an ordinary page of its pool
//     (its room serves, it is released, relocated off and compacted as any
//     other); the pool's page size stays.
//   - (PL31) On granular storage a growth takes the largest page (Max):
//     a page is address space there and only the granules a slice uses are
//     mapped, so the arena grows at most once and nothing it serves later
//     is outdated; a refused largest page is asked again at the tiled size
//     (its address space may be what was refused). On whole pages a
//     growth's page size tiles what the arena served (tiling.go).
//   - (PL32) On storage that backs pages whole, an arena reservation that
//     needs a new page (a growth's first page included) and more than half
//     of the pool's page, or more than an eighth of it when the k
//     reservations of its size that fit the page would leave more unused
//     per reservation (tail/k) than the own-size page's rounding, gets a
//     page of its own size instead: its effective size rounded up to
//     TileStep, within [Min, Max], when that is smaller than the pool's
//     page. It reads only the size and the page
//     size, never what the device has left, so every capacity places alike
//     until the first refusal; a refused own-size page leaves the
//     reservation to the pool's page and PL30. Such a page is an ordinary
//     page of its pool, as PL30's.
//   - (PL33) An arena pool on whole pages carves a reservation, and a
//     relocation plan a target, from its tightest page: the unguarded page
//     whose smallest free run (adjacent free slices) holding it is the
//     smallest, the first such page on a tie; within that page, first fit.
//     Runs, not slices, so a run an earlier visit left split (coalesceFor's
//     kept slice) weighs as the hole it is, and the choice does not depend
//     on which pages were visited before. Granular storage and the small
//     pool keep first fit across pages (tightest.go). The pool finds that
//     page in a list of its pages' free runs by size (runs.go), which
//     follows the pages: a page whose signal rose or whose slices changed
//     is listed again before the next answer, and Check compares the list
//     with every page that is not queued.
//   - (PL36) On storage that backs pages whole, an arena reservation that
//     needs a new page, that PL32 does not give one of its own size, and
//     whose size is a staple (the arena served at least stapleServedPages
//     pool pages' worth of it) of whole TileStep tiles, at least two to the
//     pool's page P, with a tail of at least P/stapleTailDiv, gets a page of
//     ⌊P/need⌋·need bytes: as many of it as P holds, and no tail. A refused
//     one leaves the reservation to the pool's page and PL30 (staple.go).
//   - (PL37) A page added for a reservation of a staple size that tiles
//     it, at least two to the page, keeps its open room (the trailing free
//     run, and a hole of its size) while that room is a whole number of the
//     staple and less than the page: a reservation of another size that
//     does not tile the room, needing more than an eighth of the page, is
//     carved elsewhere; one needing at least a sixteenth takes it only
//     when no other run of the pool holds it. A pool of one page carves by
//     first fit and keeps nothing (PL33), nor do a compaction's moves. The
//     dry run counts only the room a reservation may take (View.fitOn).
//     Set when the page is added; cleared only when the page yields its
//     room to a reservation nothing else made room for (YieldKeptRoom,
//     gpumem's last make-room stage), so kept room never fails one.
//
// Room held for one owner (room.go):
//
//   - (PL34) A Room's ranges are bound slices (no free room): no
//     reservation, coalescing, release, unmapping or plan reaches them, and
//     only its owner carves from them (TakeAt, TakeFirst), under a page
//     guard too: room is set aside only on unguarded pages, and a guard
//     taken later holds no address of it (it was bound when the guard was
//     taken). What the owner does not take goes back as free room at
//     Release.
//
// Check methods ([Sliced.Check], [Exclusive.Check], [Direct.Check],
// [Persistent.Check], [Arena.Check]) verify the invariants that can be
// checked from the pool's state and panic naming the label broken; tests and
// invariant builds call them.
//
// # Does not know
//
// Streams, queues, fences, captures, devices or the CUDA driver, and the
// bytes themselves: a pool hands out regions, and Plan describes copies
// ([relocation.StorageCopy]) that others perform. Which mode a reservation
// runs under is the caller's (package memory): it chooses whether to call
// TryReserve or Alloc, whether a direct allocation may release
// ([Direct.AllocMayRelease]), which cleanup runs and when, whether a plan may
// add pages ([relocation.TargetRoom]), and calls [Sliced.UnmapFree] only
// where pages may change.
//
// # Concurrency
//
// Nothing in this package is safe for concurrent use, and it takes no lock
// of its own: the caller serialises every call, [PageGuard.Release] included
// (in package gpumem, under the device lock). The state it shares with the
// rest of the device lives in package handle: reference counts, locations
// and free signals, plain fields under that same lock. A release raises the
// page's free signal after its count drops, and coalescing lowers the
// signal before it reads the slices, so a page whose signal is down has
// seen no release since its last scan (PL4). Free-slice descriptors are
// recycled through each sliced pool's handle.Recycler (H6).
package pool
