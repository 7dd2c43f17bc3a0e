// Package trace owns gpumem's trace formats: the native event model and its
// JSONL codec, the PyTorch memory-snapshot reader and the synthetic
// workloads (design §13). It holds events, codecs and readers only: replaying
// a trace on a device is package replay's job, comparing policies package
// compare's.
//
// # Owns
//
// The reading side of the native format, whose records are the library's
// (package history: [Event] and [Op] — alloc, free, cleanup, window,
// capture, and the held releases: a free with Held, release, hold, pass —
// with [Header] and the [Encoder]; this package names them too): [Decode]
// (design §13.1); [ReadSnapshot], which reads a PyTorch CUDA memory snapshot —
// pickle (its own unpickler, plain data only, no globals), JSON or gzip, in
// every shape memory_viz reads (snapshot_doc.go) — and converts one device's
// trace and segments (the one with data, or the chosen one;
// [ReadSnapshotDevices] each with data) to native events with a prelude rebuilding the
// allocations made before the ring buffer's window, PyTorch's reserved-bytes
// timeline and the segments held when the window began (design §13.2; the rules
// are in snapshot.go's header); [Synth], the deterministic synthetic
// workloads (design §13.3) listed by [Workloads]; and [Default], a small
// embedded trace. The sub-package trace/torch models PyTorch's caching
// allocator for comparison; like trace, it imports no device package.
//
// # Invariants
//
//   - (E1) Every event Decode yields or the Encoder writes passes
//     [Event.Validate]; times never decrease along a trace; a release
//     follows a held free of its ID (once), a pass an open hold of its
//     stream.
//   - (E2) Decode(Encoder output) yields the encoded events unchanged.
//   - (E3) A converted snapshot is a valid native trace: unique IDs, frees
//     only of live IDs, releases only of IDs a held free left taken (the
//     Encoder takes it), dense streams 0…Streams−1, and PeakLive/FinalLive
//     are the peak and final sums of live sizes over its events (a held
//     free's bytes end at its free).
//   - (E4) Synth(name, seed, params) yields the same events on every
//     iteration and every run; a different seed yields different events.
//   - (E5) Bad input never panics: a malformed line, pickle or snapshot is
//     an error wrapping one of the package's sentinels with its position
//     (line, byte offset or entry index); a pickle that names a global or
//     builds an object is refused with [ErrPickleGlobal] before anything is
//     looked up.
//   - (E6) Reading a snapshot holds memory bounded by its input: the
//     decoded values hold at most SnapshotOptions.MaxBytes/16 (1 MiB at
//     least) plus 4 bytes per input byte read (24 for JSON), and an input
//     past that, or past MaxBytes, is a [*TooLargeError] (limits.go).
//
// # Does not know
//
// Devices, streams, pools or placement: events carry logical IDs, not
// addresses, and replaying them against a gpumem.Device is package
// replay's job (design §13.4). It imports no device package: not the root
// package, cuda, storage, handle, relocation, pool, memory or stream.
//
// # Concurrency
//
// Functions are safe for concurrent use on distinct inputs; an [Encoder] is
// not safe for concurrent use. The sequences Decode and Synth return may be
// iterated by one goroutine at a time, and again from the start.
package trace
