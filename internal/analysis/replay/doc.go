// Package replay applies a trace's events, in order, to a gpumem device and
// reports what the device did with them (design §13.4).
//
// # Owns
//
// [Run] with its [Options], the [Report] it returns (event counts, held
// frees, failed
// allocations by kind, live/device/reserved peaks, storage, growth,
// relocation and capture counters; the JSON field names are the CLI's),
// the timeline [Point] and [ErrStopped]. The replay's rules (streams made
// on demand, IDs mapped to buffers, which errors are counted and which stop
// it) are in replay.go's header. Failed allocations are counted by
// gpumem.FailureKind, the classifier the device's own failed-reservation
// counters use.
//
// # Invariants
//
//   - (R1) A failed allocation, an ignored free, an implied free, an
//     ignored release, a pass with no open hold and a capture phase the
//     device refuses are counted, never fatal; only a
//     cancelled context, a closed device, a device error it cannot count or
//     an event it refuses (wrapping trace.ErrInvalidEvent) stop the replay,
//     with ErrStopped naming the event; with Options.FailFast, so does the
//     first failed allocation.
//   - (R2) Live and device bytes are sampled after every event: the peaks
//     are exact.
//   - (R3) The timeline keeps, of every bucket of consecutive events, the
//     points where live or device bytes were lowest and highest: its
//     highest point is the reported peak, to the byte.
//
// # Does not know
//
// How events are read or made (package trace), policies or their
// comparison (package compare), or PyTorch's allocator (package
// trace/torch).
//
// # Concurrency
//
// Runs on distinct devices may proceed concurrently. One device serves one
// Run at a time: Run takes the device's existing streams as trace streams
// 0, 1, … and creates the rest.
package replay
