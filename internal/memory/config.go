package memory

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpumem/gpumem/storage"
)

// ErrInvalidConfig is returned by Config.Validate and New for a setting that
// cannot work; the message names the field and the fix.
var ErrInvalidConfig = errors.New("memory: invalid config")

// Mode says what kind of data the next allocations hold.
type Mode uint8

const (
	// Auto is ordinary working memory, served by the dynamic memory.
	Auto Mode = iota
	// Persistent is data likely never freed (weights): the exact-fit
	// persistent pool.
	Persistent
	// Dedicated gives each allocation its own device allocation, returned
	// once freed: one-off buffers that must neither stay reserved nor shape
	// pool sizing.
	Dedicated
)

func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case Persistent:
		return "persistent"
	case Dedicated:
		return "dedicated"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode parses "auto", "persistent" or "dedicated".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Auto, Persistent, Dedicated} {
		if s == m.String() {
			return m, nil
		}
	}
	return Auto, fmt.Errorf("%w: mode %q: want one of auto, persistent, dedicated", ErrInvalidConfig, s)
}

// PersistentMemory says how Persistent windows and the persistent pool are
// used.
type PersistentMemory uint8

const (
	// Enabled serves Persistent windows from the persistent pool (default).
	Enabled PersistentMemory = iota
	// SizeMatch also serves an Auto allocation whose effective size matches
	// an existing persistent bucket from it: good for training loops.
	SizeMatch
	// Disabled ignores Persistent windows.
	Disabled
	// Enforced makes Persistent the base mode; may run out of memory when
	// sizes vary.
	Enforced
)

var persistentNames = []string{"enabled", "size-match", "disabled", "enforced"}

func (p PersistentMemory) String() string {
	if int(p) < len(persistentNames) {
		return persistentNames[p]
	}
	return fmt.Sprintf("PersistentMemory(%d)", uint8(p))
}

// ParsePersistentMemory parses the text forms of PersistentMemory.
func ParsePersistentMemory(s string) (PersistentMemory, error) {
	for i, n := range persistentNames {
		if s == n {
			return PersistentMemory(i), nil
		}
	}
	return Enabled, fmt.Errorf("%w: persistent memory %q: want one of %s", ErrInvalidConfig, s, strings.Join(persistentNames, ", "))
}

// DynamicKind selects the dynamic memory.
type DynamicKind uint8

const (
	// Adaptive is tiny + small + arena, with relocation (default).
	Adaptive DynamicKind = iota
	// ExclusivePages is 24 buckets of one allocation per page: nothing is
	// ever outdated.
	ExclusivePages
)

var dynamicNames = []string{"adaptive", "exclusive-pages"}

func (k DynamicKind) String() string {
	if int(k) < len(dynamicNames) {
		return dynamicNames[k]
	}
	return fmt.Sprintf("DynamicKind(%d)", uint8(k))
}

// ParseDynamicKind parses "adaptive" or "exclusive-pages".
func ParseDynamicKind(s string) (DynamicKind, error) {
	for i, n := range dynamicNames {
		if s == n {
			return DynamicKind(i), nil
		}
	}
	return Adaptive, fmt.Errorf("%w: dynamic memory %q: want one of %s", ErrInvalidConfig, s, strings.Join(dynamicNames, ", "))
}

// LogLevel says how much a manager logs.
type LogLevel uint8

const (
	// LogDisabled logs only warnings and errors.
	LogDisabled LogLevel = iota
	// LogBasic adds Info: pool layout, growths, mode changes, explicit
	// cleanups, new persistent pages.
	LogBasic
	// LogFull adds Debug: every reservation's route, usage after each new
	// dynamic page.
	LogFull
)

// PageGranularity says whether sliced pages map what they hold.
type PageGranularity uint8

const (
	// GranulesAuto maps sliced pages granule by granule when the storage
	// can (storage.Granular with a granule > 0): a reservation maps the
	// granules its slice covers, cleanups unmap the granules no live slice
	// touches. On any other storage pages are backed whole (default).
	GranulesAuto PageGranularity = iota
	// GranulesOff backs every page whole, whatever the storage offers.
	GranulesOff
)

var granularityNames = []string{"auto", "off"}

func (g PageGranularity) String() string {
	if int(g) < len(granularityNames) {
		return granularityNames[g]
	}
	return fmt.Sprintf("PageGranularity(%d)", uint8(g))
}

// ParsePageGranularity parses "auto" or "off".
func ParsePageGranularity(s string) (PageGranularity, error) {
	for i, n := range granularityNames {
		if s == n {
			return PageGranularity(i), nil
		}
	}
	return GranulesAuto, fmt.Errorf("%w: page granularity %q: want one of %s", ErrInvalidConfig, s, strings.Join(granularityNames, ", "))
}

// Properties are what the device tells the memory about itself.
type Properties struct {
	// MaxPageSize is the largest page the pools make. A buffer larger than
	// it is a dedicated allocation of its own (design §6.3), so it bounds
	// pooling, not the buffers a device serves; a backend whose driver has
	// a hard bound on one allocation refuses larger ones in its storage.
	MaxPageSize uint64
	// Alignment is the base alignment of every allocation.
	Alignment uint64
	// MaxMemory is the budget the runtime stands behind for a whole
	// workload; 0 = no figure, which turns off the granule unmap under
	// pressure (design §6.4). Relocation never reads it.
	MaxMemory uint64
}

// Config chooses the memory's policies. The zero value is the default:
// adaptive dynamic memory, persistent memory enabled, base mode Auto.
type Config struct {
	Dynamic    DynamicKind
	Persistent PersistentMemory
	// BaseMode overrides the base mode when set.
	BaseMode *Mode
	LogLevel LogLevel
	// PageGranular says whether sliced pages map what they hold on a
	// granular storage (default GranulesAuto: yes where the storage can).
	PageGranular PageGranularity
}

// minExclusivePage is the smallest max page exclusive pages work with: their
// first bucket is 32 KiB.
const minExclusivePage = 32 << 10

// Validate checks c against p; the error wraps ErrInvalidConfig and names
// the field and the fix.
func (c Config) Validate(p Properties) error {
	switch {
	case p.Alignment == 0:
		return fmt.Errorf("%w: Properties.Alignment is 0; use the backend's alignment (32 on the host)", ErrInvalidConfig)
	case p.MaxPageSize < p.Alignment:
		return fmt.Errorf("%w: Properties.MaxPageSize %d is below Properties.Alignment %d; raise the max page size", ErrInvalidConfig, p.MaxPageSize, p.Alignment)
	case int(c.Dynamic) >= len(dynamicNames):
		return fmt.Errorf("%w: MemoryConfig.Dynamic %d is unknown; want one of %s", ErrInvalidConfig, c.Dynamic, strings.Join(dynamicNames, ", "))
	case int(c.Persistent) >= len(persistentNames):
		return fmt.Errorf("%w: MemoryConfig.Persistent %d is unknown; want one of %s", ErrInvalidConfig, c.Persistent, strings.Join(persistentNames, ", "))
	case c.LogLevel > LogFull:
		return fmt.Errorf("%w: Config.LogLevel %d is unknown; want LogDisabled, LogBasic or LogFull", ErrInvalidConfig, c.LogLevel)
	case int(c.PageGranular) >= len(granularityNames):
		return fmt.Errorf("%w: Config.PageGranular %d is unknown; want one of %s", ErrInvalidConfig, c.PageGranular, strings.Join(granularityNames, ", "))
	case c.BaseMode != nil && *c.BaseMode > Dedicated:
		return fmt.Errorf("%w: MemoryConfig.BaseMode %d is unknown; want auto, persistent or dedicated", ErrInvalidConfig, *c.BaseMode)
	}
	if c.Dynamic == ExclusivePages {
		if max := p.MaxPageSize / p.Alignment * p.Alignment; max < minExclusivePage {
			return fmt.Errorf("%w: MemoryConfig.Dynamic exclusive-pages needs Properties.MaxPageSize of at least %d bytes (rounded: %d); raise it or use adaptive",
				ErrInvalidConfig, minExclusivePage, max)
		}
	}
	if storage.RoundUp(p.MaxPageSize, p.Alignment) < p.MaxPageSize {
		return fmt.Errorf("%w: Properties.MaxPageSize %d overflows when aligned", ErrInvalidConfig, p.MaxPageSize)
	}
	return nil
}
