package shadowmodel

// The model's only uses of internal/memory's types (modes, properties, the
// memory configuration), kept here so a change of those types is one edit.

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/memory"
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

func (m mode) memory() memory.Mode {
	switch m {
	case persistent:
		return memory.Persistent
	case dedicated:
		return memory.Dedicated
	}
	return memory.Auto
}

// deviceOptions are the options that open the device c describes; wrap
// (nil: none) wraps every stream's storage.
func deviceOptions(c Config, wrap func(storage.Storage) storage.Storage) []gpumem.Option {
	var opts []gpumem.Option
	if c.Capacity != 0 {
		opts = append(opts, gpumem.WithCapacity(c.Capacity))
	}
	if p := c.Props; p != (Properties{}) {
		opts = append(opts, gpumem.WithProperties(memory.Properties{MaxPageSize: p.MaxPage, Alignment: p.Alignment, MaxMemory: p.MaxMemory}))
	}
	if c.Backend == Sim {
		opts = append(opts, gpumem.WithSim())
	}
	if c.Granular {
		opts = append(opts, gpumem.WithPageGranular(true))
	}
	if c.ExclusivePages {
		opts = append(opts, gpumem.WithMemoryConfig(memory.Config{Dynamic: memory.ExclusivePages, Persistent: memory.SizeMatch}))
	}
	if wrap != nil {
		opts = append(opts, gpumem.WithStorageWrapper(wrap))
	}
	return opts
}
