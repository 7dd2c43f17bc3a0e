// Package gpumem manages GPU device memory for Go compute runtimes: device
// memory in pools of pages carved into slices, one memory per stream, several
// asynchronous streams, relocation of live allocations off outdated pages so
// those pages go back to the device, and graph-capture safety.
//
// The design reference is docs/design.md in the repository; comments across
// the module cite its sections as "design §N".
//
// # Owns
//
// [Device], [Stream], [Buffer], [Mapping], [Backend], the options, [Stats],
// [Report] and the re-exported errors; and every type a user of those
// reads or writes: [Properties], [Mode], [MemoryConfig], the relocation's
// reasons, outcomes and counts ([RelocationStats]), the pools' reports
// ([PoolReport], [Usage]) and [BufferID]. The per-stream memory managers,
// the pools and the relocation protocol are internal: the root converts
// their figures to these types at its boundary. The Device implements the
// relocation's Streams interface internally, holds the device lock, and
// drives reserve, relocate and cleanup.
//
// # Your duties
//
//  1. Open a device (Open for the host, OpenBackend for a driver) and Close
//     it when done.
//  2. Allocate buffers on a stream (Stream.Alloc), write them, and Enqueue
//     work that uses them; every Use names the access, so the device orders
//     cross-stream work and marks what a failed op left unwritten.
//  3. Free every Buffer and Release every Mapping explicitly: nothing is
//     released by finalizers. A Buffer is a value, and a copy of it the
//     same reference. A freed buffer used again returns ErrAlreadyFreed,
//     never someone else's bytes.
//  4. Synchronize (or Read) before trusting results: work runs
//     asynchronously, and an op's failure surfaces on the read of the bytes
//     it left unwritten (ErrUnwritten).
//  5. Call Device.Cleanup when memory should go back now: it relocates what
//     outdated pages hold, then releases every empty page.
//
// # Invariants
//
//   - (D1) No byte moves until every stream's work is done; nothing moves
//     while a stream records a graph.
//   - (D2) Every buffer resolves to its own bytes or to an error, never to
//     another allocation's memory.
//   - (D3) Bookkeeping of one device is serialised by one lock, never held
//     while waiting for a stream: an op (run by a stream's executor) may
//     take it to allocate, free or enqueue, so a relocation, a cleanup or
//     Close waits for the streams with it released and checks the state
//     again after (settle.go). A call from inside an op that would wait for
//     streams returns ErrCalledFromOp.
//   - (D4) Failure marks follow stream order, not the moment a failure is
//     collected (writes.go): a failed op's marks cover only bytes no later
//     op writes, and an op reading bytes whose latest writer failed is
//     skipped.
//
// # Does not know
//
// The cuda driver: a backend supplies storage, queues and device copies.
//
// # Concurrency
//
// Every exported method is safe for concurrent use from many goroutines.
package gpumem
