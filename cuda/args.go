package cuda

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/gpumem/gpumem/stream"
)

// ErrArgs is matched (errors.Is) by every launch refused because its
// arguments do not fit the kernel: a count or size that differs from the
// kernel's parameters, a Go type with no fixed C size, a use index the op
// does not have, an offset past the use's end. Nothing reached the driver.
// The *ArgError says which argument; it matches stream.ErrInvalid too.
var ErrArgs = errors.New("cuda: kernel arguments do not fit the kernel")

// ArgError is a launch refused before the driver saw it. Index is the
// argument at fault (from 0), or -1 when the count is wrong.
type ArgError struct {
	Kernel string
	Index  int
	Reason string
}

func (e *ArgError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("cuda: launch %s: %s", e.Kernel, e.Reason)
	}
	return fmt.Sprintf("cuda: launch %s: argument %d: %s", e.Kernel, e.Index, e.Reason)
}

// Is matches ErrArgs and stream.ErrInvalid (an invalid call, as every
// refused argument in gpumem is).
func (e *ArgError) Is(target error) bool { return target == ErrArgs || target == stream.ErrInvalid }

// Scalar is a kernel argument passed by value, each of a fixed C width.
type Scalar interface {
	uint8 | int8 | uint16 | int16 | uint32 | int32 | uint64 | int64 | float32 | float64
}

// Arg is one argument of Op.Launch: a scalar (Val) or the device address
// of one of the op's uses (Use, UseAt), resolved when the op runs, after
// any relocation, so it is always the buffer's current address.
type Arg struct {
	kind argKind
	use  int    // argUse: the op's use whose address is passed, plus off
	off  uint64 // argUse: bytes into the use
	val  any    // argScalar: the value
}

// argKind tells what an Arg passes; the zero Arg passes nothing and is
// refused.
type argKind uint8

const (
	argNone argKind = iota
	argScalar
	argUse
)

// Val passes v by value with its C width: uint8/int8 1 byte, uint16/int16
// 2, uint32/int32/float32 4, uint64/int64/float64 8. Write the type of an
// untyped constant (Val(float32(2)), not Val(2), which is an int and does
// not compile).
func Val[T Scalar](v T) Arg { return Arg{kind: argScalar, val: v} }

// Use passes the device address of the op's i-th use (the start of the
// range it declared), an 8-byte pointer.
func Use(i int) Arg { return Arg{kind: argUse, use: i} }

// UseAt passes the device address offset bytes into the op's i-th use; the
// offset must lie inside the use's range.
func UseAt(i int, offset uint64) Arg { return Arg{kind: argUse, use: i, off: offset} }

// packParams lays each argument in its own 8-byte slot of vals (heap
// memory, which the Go collector never moves) and points ptrs[i] at it:
// the void** array cuLaunchKernel reads. Narrow values fill the slot's low
// bytes (little-endian, as on every platform the driver supports), and the
// driver reads only the parameter's width from each. sizes[i] is argument
// i's C size.
func packParams(kernel string, args []any) (vals []uint64, ptrs []unsafe.Pointer, sizes []uintptr, err error) {
	vals = make([]uint64, len(args))
	ptrs = make([]unsafe.Pointer, len(args))
	sizes = make([]uintptr, len(args))
	for i, a := range args {
		sizes[i] = 8
		switch v := a.(type) {
		case uintptr:
			vals[i] = uint64(v)
		case uint64:
			vals[i] = v
		case int64:
			vals[i] = uint64(v)
		case uint32:
			vals[i], sizes[i] = uint64(v), 4
		case int32:
			vals[i], sizes[i] = uint64(uint32(v)), 4
		case uint16:
			vals[i], sizes[i] = uint64(v), 2
		case int16:
			vals[i], sizes[i] = uint64(uint16(v)), 2
		case uint8:
			vals[i], sizes[i] = uint64(v), 1
		case int8:
			vals[i], sizes[i] = uint64(uint8(v)), 1
		case float32:
			vals[i], sizes[i] = uint64(math.Float32bits(v)), 4
		case float64:
			vals[i] = math.Float64bits(v)
		default:
			return nil, nil, nil, &ArgError{Kernel: kernel, Index: i,
				Reason: fmt.Sprintf("type %T has no fixed C size; use uintptr or a fixed-width integer or float", a)}
		}
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	return vals, ptrs, sizes, nil
}
