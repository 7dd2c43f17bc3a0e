// The device a trace was recorded on, as options for the device a replay
// runs on.

package replay

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/analysis/trace"
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
// or memory.ErrInvalidConfig.
func DeviceOptions(d trace.Device) ([]gpumem.Option, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	var cfg memory.Config
	var err error
	if d.Dynamic != "" {
		if cfg.Dynamic, err = memory.ParseDynamicKind(d.Dynamic); err != nil {
			return nil, fmt.Errorf("the trace header's device: %w", err)
		}
	}
	if d.Persistent != "" {
		if cfg.Persistent, err = memory.ParsePersistentMemory(d.Persistent); err != nil {
			return nil, fmt.Errorf("the trace header's device: %w", err)
		}
	}
	if d.BaseMode != "" {
		m, err := memory.ParseMode(d.BaseMode)
		if err != nil {
			return nil, fmt.Errorf("the trace header's device: base mode: %w", err)
		}
		cfg.BaseMode = &m
	}
	opts := []gpumem.Option{
		gpumem.WithCapacity(d.Capacity),
		gpumem.WithProperties(memory.Properties{MaxPageSize: d.MaxPage, Alignment: d.Alignment, MaxMemory: d.MaxMemory}),
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
