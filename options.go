package gpumem

import (
	"log/slog"

	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/storage"
)

// Option configures Open and OpenBackend. Later options of one kind replace
// earlier ones.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	capacity    uint64
	sim         bool
	props       *memory.Properties
	cfg         MemoryConfig
	log         *slog.Logger
	wrapStorage func(storage.Storage) storage.Storage
	noRelocate  bool
	noCompact   bool
	userWrap    func(storage.Storage) storage.Storage // WithStorageWrapper's
	granular    *bool                                 // WithPageGranular's; granular.go
	history     *HistoryOptions                       // WithHistory's; history.go
}

// WithCapacity bounds the device's memory to bytes (default: the machine's
// memory, physical plus swap, on the host; unlimited with WithSim; the
// driver's total on cuda). Every stream's storage draws on it. On the host
// one allocation is refused (ErrOutOfMemory) beyond the machine's memory
// whatever the capacity: a larger capacity only lets more allocations fit.
func WithCapacity(bytes uint64) Option { return optionFunc(func(o *options) { o.capacity = bytes }) }

// WithSim replaces host bytes by accounting only (Sim storage) and worker
// queues by inline ones: a 100 GiB workload replays on a laptop, fast. Ops
// run synchronously over resources without bytes: on the enqueuing
// goroutine, before Enqueue (or Write, or Launch) returns, once the device
// lock is released.
func WithSim() Option { return optionFunc(func(o *options) { o.sim = true }) }

// WithProperties overrides the backend's memory properties (max page size,
// alignment, the memory figure a periodic cleanup judges granule pressure
// against). Open refuses properties that cannot work with an error
// wrapping ErrInvalidConfig.
func WithProperties(p Properties) Option {
	return optionFunc(func(o *options) { ip := p.internal(); o.props = &ip })
}

// WithMemoryConfig chooses the memory policies of every stream (default:
// adaptive with relocation, persistent memory enabled). A later
// WithMemoryConfig replaces an earlier one.
func WithMemoryConfig(c MemoryConfig) Option { return optionFunc(func(o *options) { o.cfg = c }) }

// WithLogger sends the device's logs to l (default: discarded).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(o *options) { o.log = l }) }

// WithStorageWrapper wraps every stream's storage (for example in one that
// refuses allocations on cue, to test a runtime's failure paths). A
// wrapper that does not implement storage.Granular leaves pages backed
// whole.
func WithStorageWrapper(wrap func(storage.Storage) storage.Storage) Option {
	return optionFunc(func(o *options) { o.userWrap = wrap; o.rewrap() })
}

// WithoutRelocation turns relocation off: outdated pages go back only when
// their last allocation is freed. For comparing policies (the replay tool's
// adaptive-norelocate), not for production.
func WithoutRelocation() Option { return optionFunc(func(o *options) { o.noRelocate = true }) }

// WithoutCompaction turns compaction of current pages off: the make-room
// path stops after relocating off outdated pages, and Defragment moves
// nothing. For comparing policies (the replay tool's -nocompact), and for
// a runtime whose kernels cannot afford the copies; WithoutRelocation
// implies it.
func WithoutCompaction() Option { return optionFunc(func(o *options) { o.noCompact = true }) }
