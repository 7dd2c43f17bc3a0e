// The gpumem.Backend adapter: a Device on real device memory.
//
// Structure. A Backend holds one primaryContext (the device's primary context and
// its device executor), the storages it made (one per stream memory) and the
// queues it made (one per stream, each over a driverStream with its own executor
// and a completion watcher). The device (package gpumem) decides everything
// about pages, relocation and captures; this file only maps its calls onto
// the driver layer.
//
// Invariants:
//   - (B1) Storage calls (cuMemAlloc_v2, cuMemFree_v2, the VMM calls of a
//     granularStorage) run on the device executor; stream work (copies,
//     kernels, events, captures) runs on the stream's executor (C1 in
//     doc.go).
//   - (B2) No cuMemFree_v2, cuMemUnmap or cuMemAddressFree runs while a
//     queue of this backend records: frees and unmaps are queued by
//     plainStorage.Dealloc and granularStorage.Unmap and handed to the driver by
//     Flush only when capturing == 0, checked and acted on under capMu,
//     which BeginCapture and EndCapture also hold.
//   - (B3) The first sticky driver error any component sees is kept
//     (Poisoned) and every later storage call fails with it.
//
// Rejected alternatives: asynchronous Enqueue through a feeder goroutine (a
// cross-stream WaitFence would then need the other queue's event before it
// exists); a separate Storage per stream with private frees during a capture
// (a free during any capture may invalidate it, whatever the thread).

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/backendkit"
	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// Alignment is the base alignment of every cuda storage allocation (the
// driver's own is at least this).
const Alignment = 256

// Backend runs a gpumem.Device on one CUDA device: storage on cuMemAlloc_v2
// (pages on reserved address space mapped granule by granule where the
// driver manages virtual memory),
// queues on driver streams with events as fences, relocation copies with
// cuMemcpyDtoDAsync_v2 and graphs through stream capture. It implements
// gpumem.Backend and gpumem.HostTransfers. Open one with NewBackend (or a
// whole Device with OpenDevice); the Device closes it.
type Backend struct {
	ctx     *primaryContext
	props   memory.Properties
	granule uint64 // of the storages it makes; 0: plain (granular.go)

	// capMu orders frees against captures (B2); capturing counts the
	// queues whose capture is open.
	capMu     sync.Mutex
	capturing int

	mu       sync.Mutex // guards the fields below
	queues   map[*queue]struct{}
	storages map[*plainStorage]struct{}
	poison   backendkit.Poison // first sticky error seen (B3); its own lock
	closed   bool

	kmu     sync.Mutex // guards the kernel module, loaded on first Launch
	module  *Module
	kernels map[string]*Function

	clock phaseClock // where a relocation's time goes, for the benchmarks
}

// phaseClock adds up the time the backend spends in the phases of a
// relocation, as the device drives them: waiting for every stream
// (WaitOutsideStreams), the device copies (from a queue's first copy after
// its last event until the watcher saw the event covering it complete) and
// giving storage back (Flush's driver calls: cuMemFree_v2, and on granular
// storage the synchronisation, unmaps and address frees). The benchmarks
// read it (BenchmarkRelocationThroughput's phases); it costs two clock
// reads per phase and takes no lock.
type phaseClock struct {
	sync, copy, release atomic.Int64 // nanoseconds
}

// phases is a snapshot of a phaseClock.
type phases struct {
	sync, copy, release time.Duration
}

func (c *phaseClock) snapshot() phases {
	return phases{time.Duration(c.sync.Load()), time.Duration(c.copy.Load()), time.Duration(c.release.Load())}
}

func (p phases) sub(q phases) phases {
	return phases{p.sync - q.sync, p.copy - q.copy, p.release - q.release}
}

var (
	_ gpumem.Backend       = (*Backend)(nil)
	_ gpumem.HostTransfers = (*Backend)(nil)
)

// NewBackend opens the device opts names (driver from opts.Library,
// $GPUMEM_LIBCUDA or libcuda.so.1). When the backend cannot run here (no
// driver, a driver too old, no such device) the error wraps both
// gpumem.ErrNotSupported and ErrNoDriver: fall back to gpumem.Open. It never
// panics for want of a driver.
func NewBackend(opts Options) (*Backend, error) {
	c, err := openContext(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: cuda backend on device %d: %w", gpumem.ErrNotSupported, opts.Device, err)
	}
	total := c.TotalMem()
	maxPage := max(uint64(Alignment), total/4/Alignment*Alignment)
	return &Backend{
		ctx:      c,
		props:    memory.Properties{MaxPageSize: maxPage, Alignment: Alignment, MaxMemory: total},
		granule:  granuleFor(c),
		queues:   make(map[*queue]struct{}),
		storages: make(map[*plainStorage]struct{}),
	}, nil
}

// OpenDevice opens a gpumem.Device on the cuda backend: NewBackend, then
// gpumem.OpenBackend with more. Without a usable driver the error wraps
// gpumem.ErrNotSupported and ErrNoDriver.
func OpenDevice(opts Options, more ...gpumem.Option) (*gpumem.Device, error) {
	b, err := NewBackend(opts)
	return backendkit.OpenDevice(b, err, more)
}

// devContext returns the driver context the backend runs on.
func (b *Backend) devContext() *primaryContext { return b.ctx }

// Info describes the device the backend runs on: ordinal, name, memory,
// driver version and the optional driver features found.
func (b *Backend) Info() DeviceInfo {
	c := b.ctx
	return DeviceInfo{Ordinal: c.ordinal, Name: c.name, TotalMem: c.totalMem, DriverVersion: c.version, Features: c.features}
}

// MemInfo returns the device's free and total bytes as the driver sees
// them now (cuMemGetInfo_v2): memory other processes, or other contexts
// of this one, hold is not free. After Close it returns ErrClosed.
func (b *Backend) MemInfo() (free, total uint64, err error) { return b.ctx.MemGetInfo() }

// LoadModule loads a module image of one's own into the backend's
// context: PTX text, a cubin or a fatbin (see KindOf). PTX need not end in
// a NUL. For PTX every .entry is looked up before LoadModule returns, so
// the JIT has run, and refused, by then, whatever the driver's module
// loading mode: a refusal is a *JITError with the JIT's log, and nothing
// stays loaded. Unload the module when the work that launched its kernels
// is done: nothing unloads it for you before the backend closes.
func (b *Backend) LoadModule(image []byte) (*Module, error) { return b.ctx.LoadModule(image) }

// Name implements gpumem.Backend: "cuda".
func (b *Backend) Name() string { return "cuda" }

// Properties implements gpumem.Backend: alignment 256, MaxMemory the
// device's total memory, MaxPageSize a quarter of it rounded down to the
// alignment.
func (b *Backend) Properties() gpumem.Properties { return gpumem.Properties(b.props) }

// Granule returns the mapping granule of the storages NewStorage makes: the
// driver's recommended granularity where it manages virtual memory (and
// $GPUMEM_CUDA_GRANULAR does not turn it off), else 0 (plain storages).
func (b *Backend) Granule() uint64 { return b.granule }

// NewStorage implements gpumem.Backend: a *granularStorage drawing on
// budget where the backend maps granules (Granule() > 0), else a plain
// *Storage on cuMemAlloc_v2.
func (b *Backend) NewStorage(budget *storage.Budget) (storage.Storage, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, fmt.Errorf("%w: cuda backend", ErrClosed)
	}
	s := &plainStorage{b: b, budget: budget, live: make(map[storage.ID]devAlloc), granule: b.granule}
	b.storages[s] = struct{}{}
	if s.granule > 0 {
		s.ranges = make(map[storage.ID]*vmmRange)
		s.unmapping = make(map[*vmmRange]struct{})
		return &granularStorage{s}, nil
	}
	return s, nil
}

// NewQueue implements gpumem.Backend: a queue over a new driver stream.
func (b *Backend) NewQueue(index int) (stream.Queue, error) {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: cuda backend", ErrClosed)
	}
	q, err := newQueue(b, index)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.Join(fmt.Errorf("%w: cuda backend", ErrClosed), q.Close())
	}
	b.queues[q] = struct{}{}
	return q, nil
}

// queueOf returns q as a queue of this backend.
func (b *Backend) queueOf(q stream.Queue, call string) (*queue, error) {
	return backendkit.QueueOf("cuda", q, call, func(cq *queue) bool { return cq.b == b })
}

// CopyOnDevice implements gpumem.Backend: cuMemcpyDtoDAsync_v2 of src into
// dst (equal sizes) on q's stream. The copy is covered by q's next Fence.
// Refused while q records (a relocation never runs then).
func (b *Backend) CopyOnDevice(q stream.Queue, src, dst storage.Resource) error {
	cq, err := b.queueOf(q, "copy on device")
	if err != nil {
		return err
	}
	if src.Size != dst.Size {
		return fmt.Errorf("cuda: copy on device: source of %d bytes, target of %d: %w", src.Size, dst.Size, stream.ErrInvalid)
	}
	if src.Size == 0 {
		return nil
	}
	if src.Ptr == 0 || dst.Ptr == 0 {
		return fmt.Errorf("cuda: copy on device: resource without a device address (source %#x, target %#x): %w", src.Ptr, dst.Ptr, stream.ErrInvalid)
	}
	return cq.copyDtoD(dst.Ptr, src.Ptr, src.Size)
}

// WaitOutsideStreams implements gpumem.Backend: cuCtxSynchronize.
func (b *Backend) WaitOutsideStreams() error {
	t0 := time.Now()
	err := b.ctx.Synchronize()
	b.clock.sync.Add(int64(time.Since(t0)))
	b.notePoison(err)
	return err
}

// CopyToDevice implements gpumem.HostTransfers: cuMemcpyHtoDAsync_v2 of src
// into dst on q's stream. It runs inside an op on q (on its executor); the
// driver has read src when it returns (pageable memory).
func (b *Backend) CopyToDevice(q stream.Queue, dst storage.Resource, src []byte) error {
	cq, err := b.queueOf(q, "copy to device")
	if err != nil {
		return err
	}
	if uint64(len(src)) > dst.Size {
		return fmt.Errorf("cuda: copy to device: %d bytes into a window of %d: %w", len(src), dst.Size, stream.ErrInvalid)
	}
	if len(src) == 0 {
		return nil
	}
	err = cq.s.CopyHtoD(dst.Ptr, src)
	b.notePoison(err)
	return err
}

// CopyToHost implements gpumem.HostTransfers: cuMemcpyDtoHAsync_v2 of src
// into dst on q's stream. It runs inside an op on q; dst is pageable, so
// the bytes are there when it returns, after q's earlier work. A dst of
// prefaultMin bytes or more has its pages written first, in parallel
// (prefault), so the driver's copy does not fault them in one by one; on
// failure dst's bytes are unspecified.
func (b *Backend) CopyToHost(q stream.Queue, dst []byte, src storage.Resource) error {
	cq, err := b.queueOf(q, "copy to host")
	if err != nil {
		return err
	}
	if uint64(len(dst)) > src.Size {
		return fmt.Errorf("cuda: copy to host: %d bytes from a window of %d: %w", len(dst), src.Size, stream.ErrInvalid)
	}
	if len(dst) == 0 {
		return nil
	}
	if len(dst) >= prefaultMin {
		prefault(dst)
	}
	err = cq.s.CopyDtoH(dst, src.Ptr)
	b.notePoison(err)
	return err
}

// prefaultMin is the size from which CopyToHost prefaults its destination.
const prefaultMin = 8 << 20

// prefault writes a zero into every 4 KiB page of dst, from up to
// GOMAXPROCS goroutines over parts of at least 4 MiB, and returns when all
// are done. A slice fresh from the Go heap (Buffer.Read's) has no memory
// behind it yet: the driver's copy into pageable memory, one thread, would
// take a page fault per page (about 2.5 GB/s measured on an H200 host's
// VM, against 11.8 GB/s into warm memory); faulting them in parallel first
// costs a fraction of that, and next to nothing where the pages are
// already there.
func prefault(dst []byte) {
	const page = 4 << 10
	workers := min(runtime.GOMAXPROCS(0), len(dst)/(4<<20))
	if workers < 2 {
		return // one thread: the copy faults them as fast
	}
	part := (len(dst)/workers + page - 1) &^ (page - 1)
	var wg sync.WaitGroup
	for off := 0; off < len(dst); off += part {
		p := dst[off:min(off+part, len(dst))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < len(p); i += page {
				p[i] = 0
			}
			p[len(p)-1] = 0
		}()
	}
	wg.Wait()
}

// launch launches a kernel of kernelsPTX (kernelAddOne, kernelFillU8) on q's
// stream over n bytes at ptr, one thread per byte, with extra arguments
// after (ptr, n): kernelAddOne takes none, kernelFillU8 exactly one, the
// value as a uint32; other extras, or another kernel name, are refused
// with an error wrapping stream.ErrInvalid (the driver would read missing
// arguments out of bounds). Call it inside an op's Run on q, with ptr from
// the op's resolved resource, so the launch is ordered (and, while q
// records, captured) with q's other work. The module is loaded on the
// first call.
func (b *Backend) launch(q stream.Queue, kernel string, ptr uintptr, n uint64, extra ...any) error {
	cq, err := b.queueOf(q, "launch "+kernel)
	if err != nil {
		return err
	}
	if err := checkKernelExtras(kernel, extra); err != nil {
		return err
	}
	f, err := b.function(kernel)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	cfg, err := Linear(n, 256)
	if err != nil {
		return err
	}
	args := append([]any{ptr, n}, extra...)
	err = cq.s.Launch(f, cfg, args...)
	b.notePoison(err)
	return err
}

// checkKernelExtras checks Launch's extra arguments against the parameters
// of kernelsPTX's kernels after (data, n).
func checkKernelExtras(kernel string, extra []any) error {
	switch kernel {
	case kernelAddOne:
		if len(extra) != 0 {
			return fmt.Errorf("cuda: launch %s: %d extra arguments, the kernel takes none: %w", kernel, len(extra), stream.ErrInvalid)
		}
	case kernelFillU8:
		if len(extra) != 1 {
			return fmt.Errorf("cuda: launch %s: %d extra arguments, the kernel takes one (the value, a uint32): %w", kernel, len(extra), stream.ErrInvalid)
		}
		if _, ok := extra[0].(uint32); !ok {
			return fmt.Errorf("cuda: launch %s: the value is a %T, the kernel takes a uint32: %w", kernel, extra[0], stream.ErrInvalid)
		}
	default:
		return fmt.Errorf("cuda: launch: %q is not a kernel of KernelsPTX: %w", kernel, stream.ErrInvalid)
	}
	return nil
}

// function returns a kernel of kernelsPTX, loading the module once.
func (b *Backend) function(name string) (*Function, error) {
	b.kmu.Lock()
	defer b.kmu.Unlock()
	if f, ok := b.kernels[name]; ok {
		return f, nil
	}
	if b.module == nil {
		m, err := b.ctx.LoadModule([]byte(kernelsPTX))
		if err != nil {
			b.notePoison(err)
			return nil, fmt.Errorf("cuda: loading the kernel module: %w", err)
		}
		b.module = m
		b.kernels = make(map[string]*Function)
	}
	f, err := b.module.Function(name)
	if err != nil {
		return nil, err
	}
	b.kernels[name] = f
	return f, nil
}

// Poisoned returns the first sticky driver error the backend saw (it
// matches gpumem.ErrDevicePoisoned), or nil. Once poisoned, nothing on the
// device can be trusted: close it.
func (b *Backend) Poisoned() error { return b.poison.Err() }

// notePoison keeps err when it is the first sticky fault (B3, backendkit DK1).
func (b *Backend) notePoison(err error) { b.poison.Note(err) }

// Close implements gpumem.Backend: closes every queue still open, frees
// every allocation the storages hold (live or queued), unloads the kernel
// module and releases the context. Idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	queues := make([]*queue, 0, len(b.queues))
	for q := range b.queues {
		queues = append(queues, q)
	}
	storages := make([]*plainStorage, 0, len(b.storages))
	for s := range b.storages {
		storages = append(storages, s)
	}
	poisoned := b.poison.Err() != nil
	b.mu.Unlock()

	var errs []error
	for _, q := range queues {
		errs = append(errs, q.Close())
	}
	for _, s := range storages {
		errs = append(errs, s.release())
	}
	b.kmu.Lock()
	if b.module != nil {
		errs = append(errs, b.module.Unload())
		b.module, b.kernels = nil, nil
	}
	b.kmu.Unlock()
	errs = append(errs, b.ctx.Close())
	if poisoned {
		// Every call fails on a poisoned context; what it held dies with
		// it. Only the poison itself is worth reporting, and Poisoned
		// already does.
		return nil
	}
	return errors.Join(errs...)
}

// forget drops a closed queue from the backend's list.
func (b *Backend) forget(q *queue) {
	b.mu.Lock()
	delete(b.queues, q)
	b.mu.Unlock()
}
