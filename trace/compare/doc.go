// Package compare runs one allocation trace under several memory policies
// and reports them side by side: what each reserved at its peak, the
// smallest device on which it ran without running out of memory, what
// relocation cost, and, for PyTorch snapshots, what PyTorch itself
// reserved.
//
// # Owns
//
// The policies (adaptive, adaptive-norelocate, exclusive, torch), the
// capacity search, and the text, JSON and HTML renderings of a comparison.
//
// # Invariants
//
//   - (C1) Every policy replays the same events; gpumem policies run on Sim
//     storage with one fixed max page size, so only the policy differs.
//   - (C2) The smallest capacity is searched over whole MiB (bisection, then
//     a bounded scan below it and a second bisection, since out-of-memory is
//     not always monotonic in capacity); the reported figure ran with no
//     failed allocation and 1 MiB less failed (or it is the peak live bytes
//     rounded up). It is at least 1 MiB: capacity 0 means unlimited.
//
// # Does not know
//
// How events are read (package trace), how they are applied to a device
// (package replay) or how PyTorch's allocator places blocks (package
// trace/torch); the CLI chooses inputs and outputs.
//
// # Concurrency
//
// Run replays policies one after another; nothing here is shared.
package compare
