// Package compare runs one allocation trace under several memory policies
// and reports them side by side: what each reserved at its peak, the
// smallest device on which it ran without running out of memory, what
// relocation cost, whether it fits a given capacity, where its reserved
// bytes sat at its peak, and, for PyTorch snapshots, what PyTorch itself
// reserved over the window the replay uses.
//
// # Owns
//
// The policies (adaptive, adaptive-pages, adaptive-norelocate, exclusive,
// and PyTorch's model as torch, torch-expandable and torch:CONF), the
// capacity search, the verdict at a capacity (with the margin, the
// capacity less the smallest device), the slow path of every replay at a
// capacity (SlowPath: PyTorch's retries and device calls, gpumem's cleanups
// and relocations), the breakdown at the peak, PyTorch's per-window
// figures of a snapshot (FromSnapshot), the advice over a grid of PyTorch
// settings (Advise: the defaults' verdict first, a setting only when it is
// worth a change, ChangeThreshold), and the text, JSON and HTML
// renderings.
//
// The policies of one run replay side by side on Sim storage, at most
// GOMAXPROCS at once, each on a device of its own over the same read-only
// events; on host storage or a device backend one after the other, since
// they would share that memory (run_policies.go).
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
//   - (C3) Every figure says which run it comes from: the unlimited
//     replay (PeakReserved, Relocations, BytesMoved), the smallest-capacity
//     replay (MinCapacity*) or the replay at Options.Capacity (Verdict).
//   - (C4) A breakdown's parts and its live bytes add up to its reserved
//     bytes; a drawn timeline's peak is the reported peak (replay R3).
//
// # Does not know
//
// How events are read (package trace), how they are applied to a device
// (package replay) or how PyTorch's allocator places blocks (package
// trace/torch); the CLI chooses inputs and outputs.
//
// # Concurrency
//
// Run replays policies one after another; nothing here is shared, so
// Advise runs one Run per setting in parallel.
package compare
