// Package memory owns one stream's memory: which pool serves a reservation,
// when pages may be added, released or renumbered, and when the arena asks
// for a relocation.
//
// # Owns
//
// [Manager] (modes and nested windows, [PageUpdate], the reserve paths, bind
// (in the reservation itself when held room serves it), lookup, guards,
// cleanup, the relocate entry point), [Dynamic] memory
// ([ExclusivePools] or [Adaptive] = tiny + small + arena), [Config] and
// [Properties] with validation errors, reports, [ErrPageUpdateForbidden],
// [ErrInvalidConfig], [ErrAlreadyPlaced] and [MaySucceedAfterReclaim];
// the dry runs of a reservation and a cleanup ([Manager.WouldReserve],
// [Manager.WouldReserveExact], [Manager.WouldCleanup]), which take the
// reservation's routes and ask each pool its dry form (pool would.go), so
// a device can say whether an allocation would fit before making it.
//
// # Invariants
//
//   - (M1) A reservation under PageUpdate Forbidden adds, releases and moves
//     nothing; under AddOnly it may add a page but never releases or
//     renumbers one.
//   - (M2) A failed reservation leaves every pool as it was.
//   - (M3) Lookup is identity-checked: a stale location never resolves to
//     another allocation's memory (Find returns ErrNotFound instead).
//   - (M4) The effective mode is the innermost window, else the base mode.
//
// # Does not know
//
// Streams, fences or captures: the caller says what a reservation may do to
// pages (PageUpdate) and supplies the relocation's copy queue.
//
// # Concurrency
//
// A Manager is not safe for concurrent use: the device lock serialises every
// call.
package memory
