// The device a trace was recorded on, as options for the device a replay
// runs on.

package replay

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/memory"
)

// DeviceOptions returns the options that open a device running as the one
// that recorded a trace ran (the header's Device, which
// trace.DecodeWithHeader reads and gpumem's Device.WriteTrace writes): its
// capacity (WithCapacity), largest page, alignment and memory figure
// (WithProperties), whole or granular pages (WithPageGranular; granular
// pages map 2 MiB granules on the host and Sim backends, whatever granule
// the recording device had), its memory config and whether it relocated
// and compacted. A replay on another page size or capacity replays another
// device: a 2 GiB device's largest page is 512 MiB, and its trace replayed
// with 1 GiB pages peaks higher. The backend is the caller's (add
// gpumem.WithSim for accounting only); options appended after these
// override them. A device whose figures are impossible or whose config
// names are unknown is refused with an error wrapping trace.ErrBadHeader
// or gpumem.ErrInvalidConfig.
func DeviceOptions(d trace.Device) ([]gpumem.Option, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	// The names are the memory manager's (the header spells them as it
	// does), and gpumem's public values are its values
	// (gpumem.TestPublicEnumsMatchTheInternalOnes).
	var cfg gpumem.MemoryConfig
	if d.Dynamic != "" {
		k, err := memory.ParseDynamicKind(d.Dynamic)
		if err != nil {
			return nil, fmt.Errorf("the trace header's device: %w", err)
		}
		cfg.Dynamic = gpumem.DynamicMemory(k)
	}
	if d.Persistent != "" {
		p, err := memory.ParsePersistentMemory(d.Persistent)
		if err != nil {
			return nil, fmt.Errorf("the trace header's device: %w", err)
		}
		cfg.Persistent = gpumem.PersistentMemory(p)
	}
	if d.BaseMode != "" {
		m, err := memory.ParseMode(d.BaseMode)
		if err != nil {
			return nil, fmt.Errorf("the trace header's device: base mode: %w", err)
		}
		base := gpumem.Mode(m)
		cfg.BaseMode = &base
	}
	opts := []gpumem.Option{
		gpumem.WithCapacity(d.Capacity),
		gpumem.WithProperties(gpumem.Properties{MaxPageSize: d.MaxPage, Alignment: d.Alignment, MaxMemory: d.MaxMemory}),
		gpumem.WithMemoryConfig(cfg),
		gpumem.WithPageGranular(d.Granule > 0),
	}
	if d.NoRelocate {
		opts = append(opts, gpumem.WithoutRelocation())
	}
	if d.NoCompact {
		opts = append(opts, gpumem.WithoutCompaction())
	}
	return opts, nil
}
