package backendkit

import (
	"fmt"
	"sync/atomic"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// Op is one running op as a backend's public Op wraps it: the queue Q it
// runs on, its name and its uses resolved to their current places. It is
// valid only while the op's run function runs (Live).
type Op[Q stream.Queue] struct {
	Q    Q
	Name string
	Res  []storage.Resource

	ended atomic.Bool
}

// Enqueue submits an op on s, a stream of a device on the calling
// backend, whose queue must be a Q, as gpumem's Stream.Enqueue does: run
// gets the *Op, ended once it returns. A stream of another backend, or a
// nil run, is refused with an error wrapping stream.ErrInvalid.
func Enqueue[Q stream.Queue](backend string, s *gpumem.Stream, name string, uses []gpumem.Use, run func(*Op[Q]) error) error {
	q, ok := s.Queue().(Q)
	if !ok {
		return fmt.Errorf("%s: enqueue %q: %s runs on the %s backend, not %s: %w",
			backend, name, s.Name(), s.Device().Backend().Name(), backend, stream.ErrInvalid)
	}
	if run == nil {
		return fmt.Errorf("%s: enqueue %q: nil run function: %w", backend, name, stream.ErrInvalid)
	}
	return s.Enqueue(name, uses, func(res []storage.Resource) error {
		op := &Op[Q]{Q: q, Name: name, Res: res}
		defer op.ended.Store(true)
		return run(op)
	})
}

// Live refuses call after the run function returned (the error wraps
// ended, the backend's sentinel) or, onRunner being false, from another
// goroutine than the run function's (wrapping stream.ErrInvalid; why adds
// the consequence, "" none).
func (op *Op[Q]) Live(backend, call string, onRunner bool, ended error, why string) error {
	if op.ended.Load() {
		return fmt.Errorf("%s: op %q: %s: %w", backend, op.Name, call, ended)
	}
	if !onRunner {
		return fmt.Errorf("%s: op %q: %s from another goroutine than the op's run function%s: %w",
			backend, op.Name, call, why, stream.ErrInvalid)
	}
	return nil
}

// Use returns the op's i-th use, or an error wrapping stream.ErrInvalid
// when the op has none such.
func (op *Op[Q]) Use(backend string, i int) (storage.Resource, error) {
	if i < 0 || i >= len(op.Res) {
		return storage.Resource{}, fmt.Errorf("%s: op %q: use %d of an op with %d uses: %w", backend, op.Name, i, len(op.Res), stream.ErrInvalid)
	}
	return op.Res[i], nil
}
