// Package history owns the two file formats a device's history is written
// in: gpumem's native JSONL trace (version 2) and PyTorch's memory snapshot
// (a protocol-2 pickle that pytorch.org/memory_viz opens). It holds their
// records, their validation and their writers, so the library writes its
// own history (gpumem.Device.WriteTrace and WriteSnapshot) without
// importing the snapshot tool; the readers, the model of PyTorch and
// everything else that studies a workload live with the tool
// (internal/analysis/trace and below), which speaks of these same types.
//
// # Owns
//
// [Event] and [Op] with [Header] and [Device]; [Event.Validate];
// [HoldChecker], which follows what held releases depend on; the JSONL
// [Encoder] (keys in the order of design §13.1); [TorchSnapshot] and
// [WriteTorchSnapshot].
//
// # Invariants
//
//   - (E1) Every event the Encoder writes passes [Event.Validate], its time
//     is not before the previous event's, a release follows a held free of
//     its ID (once) and a pass an open hold of its stream; a refused event
//     writes nothing.
//   - (E2) The tool's Decode reads what the Encoder writes unchanged (its
//     tests keep it so).
//   - WriteTorchSnapshot writes plain data only: no pickle global, so a
//     restricted unpickler loads it.
//
// # Does not know
//
// Devices, pools, placement, or how a trace is read or replayed: it
// imports nothing of the module.
//
// # Concurrency
//
// An [Encoder] and a [HoldChecker] are not safe for concurrent use; the
// functions are safe on distinct arguments.
package history
