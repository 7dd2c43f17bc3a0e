package shadowmodel

// The model's only uses of internal/memory's types (modes, properties, the
// memory configuration), kept here so a change of those types is one edit.

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// mode is an allocation's memory mode: auto (no window), or a Persistent
// or Dedicated window (Stream.Window) around the Alloc.
type mode int

const (
	auto mode = iota
	persistent
	dedicated
)

var modeNames = []string{auto: "auto", persistent: "persistent", dedicated: "dedicated"}

func (m mode) MarshalText() ([]byte, error)  { return marshalEnum(modeNames, int(m)) }
func (m *mode) UnmarshalText(t []byte) error { return unmarshalEnum(modeNames, (*int)(m), t) }

func (m mode) memory() gpumem.Mode {
	switch m {
	case persistent:
		return gpumem.Persistent
	case dedicated:
		return gpumem.Dedicated
	}
	return gpumem.Auto
}

// deviceOptions are the options that open the device c describes; wrap
// (nil: none) wraps every stream's storage.
func deviceOptions(c Config, wrap func(storage.Storage) storage.Storage) []gpumem.Option {
	var opts []gpumem.Option
	if c.Capacity != 0 {
		opts = append(opts, gpumem.WithCapacity(c.Capacity))
	}
	if p := c.Props; p != (Properties{}) {
		opts = append(opts, gpumem.WithProperties(gpumem.Properties{MaxPageSize: p.MaxPage, Alignment: p.Alignment, MaxMemory: p.MaxMemory}))
	}
	if c.Backend == Sim {
		opts = append(opts, gpumem.WithSim())
	}
	if c.Granular {
		opts = append(opts, gpumem.WithPageGranular(true))
	}
	if c.ExclusivePages {
		opts = append(opts, gpumem.WithMemoryConfig(gpumem.MemoryConfig{Dynamic: gpumem.ExclusivePages, Persistent: gpumem.PersistentSizeMatch}))
	}
	if wrap != nil {
		opts = append(opts, gpumem.WithStorageWrapper(wrap))
	}
	return opts
}
