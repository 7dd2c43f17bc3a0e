// The snapshot reader's two size limits, both set by SnapshotOptions.MaxBytes
// (the CLI's -max-snapshot) and both reported as a *TooLargeError.
//
//  1. Input bytes: at most MaxBytes bytes of (decompressed) input are read.
//  2. Held bytes: the values decoded so far may hold at most a floor of
//     MaxBytes/heldFloorShare bytes (minHeldFloor at least) plus
//     heldPerInputByte (pickle) or jsonHeldPerInputByte (JSON) bytes per
//     input byte read. The first limit alone did not bound memory: reading
//     a pickle list of None took 22 bytes of memory per input byte, a stack
//     of empty dicts 130, JSON white space 2.7 (read whole before being
//     refused), so a 1 GiB input could take 20 to 130 GiB before being
//     refused (a 1.5 MB gzip file exhausted the machine). The decoders count what every value
//     they build holds (containers, their elements, the stack by its
//     capacity, the memo and what it is referenced from, strings, boxed
//     numbers) as they build it, and refuse the input the moment the count
//     passes the budget for the bytes read so far, so memory stays within a
//     small multiple of what a real snapshot of the same size needs.
//
// The allowances are set from the real snapshots (design §13.2), in held
// bytes per input byte as the decoders count them: the shared PyTorch
// pickles (with stack frames, as PyTorch records them by default) hold 1.0
// to 1.7; the same pickles without frames (recorded with context=None)
// 4.5 to 5.6, their JSON forms 7.8 to 8.2 with frames and 11.4 to 12.1
// without. The pickle allowance, 4, is over twice the densest snapshot
// with frames, and is what a file that will be refused can make the
// reader hold: a 1 GiB input (the default limit) holds at most about
// 4 GiB, where 8 allowed 8 GiB, and a file of small trace-entry dicts
// (4.5, as dense as a real snapshot without frames) runs into it within
// its first hundred MB instead of holding 5 GB before the input-bytes
// limit refuses it. The price: a snapshot recorded without frames reads
// whole only while the floor covers what it holds past the allowance, up
// to about MaxBytes/25 (some 40 MB at the default limit, a million trace
// entries); a larger one needs a larger MaxBytes, which raises the floor. Hostile input of one repeated opcode holds 8 to
// 16 (a list of None or of memo references; the list's and the stack's
// capacities are counted, so 16 right after one doubles), 16 (a stack of
// None or of marks) or 80 (a stack of empty dicts), and is refused once
// past the floor. The floor lets any input of a few MiB through whatever
// its shape, and raising MaxBytes raises it for a legitimately denser one.

package trace

import (
	"fmt"
	"math"
)

// heldPerInputByte is the pickle decoder's allowance of held bytes per
// input byte: over twice the densest real pickle with stack frames (1.7),
// below one without (4.5 to 5.6), which the floor covers up to tens of MB
// (see above).
const heldPerInputByte = 4

// jsonHeldPerInputByte is the JSON decoder's: encoding/json's maps and
// boxed values make a real JSON snapshot hold 8 to 12 bytes per input
// byte, so twice the densest.
const jsonHeldPerInputByte = 24

// heldFloorShare: the held-bytes floor is MaxBytes/heldFloorShare (64 MiB
// for the default 1 GiB), never below minHeldFloor.
const (
	heldFloorShare = 16
	minHeldFloor   = 1 << 20
)

// heldBudget is the held-bytes limit for one input.
type heldBudget struct {
	limit   int64 // MaxBytes, for the error
	floor   int64 // held bytes allowed before any input is read
	perByte int64 // held bytes allowed per input byte read
}

func newHeldBudget(limit, perByte int64) heldBudget {
	return heldBudget{limit: limit, floor: max(limit/heldFloorShare, minHeldFloor), perByte: perByte}
}

// allowed is the held bytes allowed once read input bytes are read,
// saturating at MaxInt64.
func (b heldBudget) allowed(read int64) int64 {
	if read > 0 && b.perByte > (math.MaxInt64-b.floor)/read {
		return math.MaxInt64
	}
	return b.floor + b.perByte*read
}

// check refuses held bytes above what read input bytes allow.
func (b heldBudget) check(held, read int64) error {
	if held > b.allowed(read) {
		return &TooLargeError{Limit: b.limit, Held: held, Read: read, PerByte: b.perByte, Floor: b.floor}
	}
	return nil
}

// TooLargeError is the error for a snapshot past one of the size limits
// set by SnapshotOptions.MaxBytes, or for a gzipped trace a caller bounds
// by the same limit (Kind InputJSONL); the caller names its own way to
// raise it (the CLI's -max-snapshot). A snapshot's matches ErrSnapshot, a
// trace's no sentinel: a message about a trace never speaks of a
// snapshot.
type TooLargeError struct {
	Limit int64 // MaxBytes (or its default), in bytes
	// Kind is what was read: InputJSONL for a gzipped trace, which only
	// the input-bytes limit bounds; zero or InputSnapshot for a snapshot.
	Kind InputKind
	// Held is 0 when the input itself was larger than Limit. Otherwise the
	// decoded values outgrew the held-bytes limit: they held about Held
	// bytes after Read bytes of input, more than Floor + PerByte×Read.
	Held, Read, PerByte, Floor int64
}

func (e *TooLargeError) Error() string {
	if e.Kind == InputJSONL {
		return fmt.Sprintf("gzipped gpumem trace larger than the limit of %d bytes once decompressed", e.Limit)
	}
	// Not "bad": a valid snapshot may be larger than the limit.
	if e.Held == 0 {
		return fmt.Sprintf("PyTorch snapshot: input larger than the limit of %d bytes", e.Limit)
	}
	allowed := heldBudget{floor: e.Floor, perByte: e.PerByte}.allowed(e.Read)
	return fmt.Sprintf("PyTorch snapshot: decoded values hold about %d bytes after %d bytes of input, more than the %d allowed by the limit of %d bytes (%d per input byte read plus %d): far denser than a real snapshot, unless it was recorded without stack frames",
		e.Held, e.Read, allowed, e.Limit, e.PerByte, e.Floor)
}

// Unwrap makes a snapshot's TooLargeError match ErrSnapshot.
func (e *TooLargeError) Unwrap() error {
	if e.Kind == InputJSONL {
		return nil
	}
	return ErrSnapshot
}

// inputTooLarge is the error for an input past limit bytes.
func inputTooLarge(limit int64) error { return &TooLargeError{Limit: limit} }
