// Package hoststorage owns the storages the library makes itself rather
// than a driver: [Host] (real aligned bytes: the host backend's default),
// [Sim] (accounting only, for replaying huge traces), their granular forms
// [GranularHost] and [GranularSim] with [Granulate] and [Plain], which add
// or hide granules around a storage, the [Faulty] wrapper that refuses on
// cue for tests ([FaultInjector] for copies and waits), the [Observable]
// hook the host queues' software graph watches storage calls through,
// and what the host machine can give a process ([MachineMemory]).
//
// It is internal: a user reaches these storages through gpumem.Open and
// its options (WithSim, WithPageGranular), and a backend implements the
// public storage interfaces with its own.
//
// # Invariants
//
// Those of package storage (S1–S4, and G1–G4 of storage/granular.go), and:
//
//   - A Host refuses any single allocation larger than the machine's memory
//     (MachineMemory) or than the Go runtime can make, whatever the budget.
//
// # Does not know
//
// Pages, slices, handles, streams or relocation.
//
// # Concurrency
//
// Every storage here is safe for concurrent use; each guards its map with
// its own small lock. A Faulty's settings may change while it is in use.
package hoststorage
