package gpumem

import (
	"sync"

	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// Backend is what a device runs on: the host (the embedded default), a
// simulation, or a driver such as package cuda. It supplies storage, queues
// and device-side copies; the device decides everything else.
type Backend interface {
	// Name names the backend ("host", "sim", "cuda").
	Name() string
	// Properties are the memory properties the device starts from.
	Properties() Properties
	// NewStorage returns a storage for one stream's memory, drawing on the
	// device's shared budget.
	NewStorage(b *storage.Budget) (storage.Storage, error)
	// NewQueue returns the queue of the index-th stream.
	NewQueue(index int) (stream.Queue, error)
	// CopyOnDevice copies src to dst (equal sizes) in the order of q. The
	// relocation calls it only after every stream's work is done.
	CopyOnDevice(q stream.Queue, src, dst storage.Resource) error
	// WaitOutsideStreams waits for driver work not ordered on any queue.
	WaitOutsideStreams() error
	// Close releases the backend.
	Close() error
}

// Releaser is implemented by a backend whose storage gives freed memory
// back off the caller's path, after Flush returns: vulkan frees on a
// goroutine of its own, so that a relocation under the device lock does
// not pay for vkFreeMemory, and BytesAllocated counts a freed allocation
// until then (storage S2). An explicit cleanup (Device.Cleanup,
// Stream.Cleanup) that did its work ends with Release, called with the
// device lock released (design §9.7) when Releasing says there is
// something to give back: so when the cleanup returns, every byte it freed
// that no queued work still uses is back, and BytesAllocated says so.
type Releaser interface {
	// Releasing reports whether Release would give anything back now. It
	// is called under the device lock and must not block.
	Releasing() bool
	// Release gives back, before it returns, every deallocation the
	// storages were handed that no queued work uses any more. It never
	// waits for streams' work: what that work still uses goes back once it
	// completes, without another call.
	Release()
}

// hostBackend is the embedded default: Host storage and worker-goroutine
// queues, or with sim, Sim storage and inline queues for fast replay.
//
// Host storage holds real bytes, so a device opened without WithCapacity
// (an unlimited budget) gets the machine's memory as its capacity instead:
// every stream's Host storage draws on one budget of hoststorage.MachineMemory
// bytes, made on the first NewStorage. Sim holds no bytes and stays
// unlimited.
type hostBackend struct {
	sim   bool
	props Properties

	machineOnce sync.Once
	machine     *storage.Budget

	// runners is shared by the sim backend's held inline queues.
	runnersOnce sync.Once
	runners     *hostqueue.RunnerGroup
}

func (h *hostBackend) Name() string {
	if h.sim {
		return "sim"
	}
	return "host"
}

func (h *hostBackend) Properties() Properties { return h.props }

func (h *hostBackend) NewStorage(b *storage.Budget) (storage.Storage, error) {
	if h.sim {
		return hoststorage.NewSim(h.props.Alignment, b), nil
	}
	if b.Capacity() == 0 {
		h.machineOnce.Do(func() { h.machine = storage.NewBudget(hoststorage.MachineMemory()) })
		b = h.machine
	}
	return hoststorage.NewHost(h.props.Alignment, b), nil
}

func (h *hostBackend) NewQueue(int) (stream.Queue, error) {
	if h.sim {
		h.runnersOnce.Do(func() { h.runners = hostqueue.NewRunnerGroup() })
		return hostqueue.NewInlineHeld(h.runners), nil
	}
	return hostqueue.NewHost(), nil
}

// CopyOnDevice copies at once: the relocation calls it only after every
// stream's work is done and under the device lock, so nothing else can run
// on q or touch either window before the copy queue's final wait; running
// the copy now is what the queue would do next.
func (h *hostBackend) CopyOnDevice(_ stream.Queue, src, dst storage.Resource) error {
	copy(dst.Bytes, src.Bytes)
	return nil
}

func (h *hostBackend) WaitOutsideStreams() error { return nil }

func (h *hostBackend) Close() error { return nil }
