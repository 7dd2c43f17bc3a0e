// The snapshot reader's two size limits, both set by SnapshotOptions.MaxBytes
// (the CLI's -max-snapshot) and both reported as a *TooLargeError.
//
//  1. Input bytes: at most MaxBytes bytes of (decompressed) input are read.
//  2. Held bytes: the values decoded so far may hold at most about
//     MaxBytes/heldFloorShare bytes plus heldPerInputByte (pickle) or
//     jsonHeldPerInputByte (JSON) bytes per input byte read. The first limit
//     alone did not bound memory: a pickle list of None costs 16 bytes of
//     memory per 2 bytes of input, a stack of empty dicts 80 per byte, so a
//     1 GiB input could take 20 to 80 GiB before being refused (a 1.5 MB
//     gzip file exhausted the machine). The decoders count what every value
//     they build holds (containers, their elements, the stack, the memo,
//     strings) as they build it, and refuse the input the moment the count
//     passes the budget for the bytes read so far, so memory stays within a
//     small multiple of what a real snapshot of the same size needs.
//
// The allowance per input byte is set from the real snapshots (design
// §13.2): pickles with stack frames hold about 1.5 bytes of values per
// input byte, pickles without frames (record_history without stacks)
// about 4, JSON about 8; the floor lets any input of a few MiB through
// whatever its shape, and raising MaxBytes raises it for a legitimately
// denser one.

package trace

import (
	"fmt"
	"math"
)

// heldPerInputByte is the pickle decoder's allowance of held bytes per
// input byte: 2.5 times the densest real pickle (about 4, frames removed),
// and below any hostile list of scalars (8 for "Na", 16 for a stack of
// None, 80 for one of empty dicts).
const heldPerInputByte = 8

// jsonHeldPerInputByte is the JSON decoder's: encoding/json's maps and
// boxed values make a real JSON snapshot hold about 8 bytes per input byte.
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
// set by SnapshotOptions.MaxBytes; the caller names its own way to raise
// it (the CLI's -max-snapshot). It matches ErrSnapshot.
type TooLargeError struct {
	Limit int64 // MaxBytes (or its default), in bytes
	// Held is 0 when the input itself was larger than Limit. Otherwise the
	// decoded values outgrew the held-bytes limit: they held about Held
	// bytes after Read bytes of input, more than Floor + PerByte×Read.
	Held, Read, PerByte, Floor int64
}

func (e *TooLargeError) Error() string {
	if e.Held == 0 {
		return fmt.Sprintf("%v: input larger than the limit of %d bytes", ErrSnapshot, e.Limit)
	}
	allowed := heldBudget{floor: e.Floor, perByte: e.PerByte}.allowed(e.Read)
	return fmt.Sprintf("%v: decoded values hold about %d bytes after %d bytes of input, more than the %d allowed by the limit of %d bytes (%d per input byte read plus %d): far denser than a real snapshot",
		ErrSnapshot, e.Held, e.Read, allowed, e.Limit, e.PerByte, e.Floor)
}

// Unwrap makes a TooLargeError match ErrSnapshot.
func (e *TooLargeError) Unwrap() error { return ErrSnapshot }

// inputTooLarge is the error for an input past limit bytes.
func inputTooLarge(limit int64) error { return &TooLargeError{Limit: limit} }
