package shadowmodel

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem"
)

// Config is the device a script runs on and what the generator drew
// sizes for. A script's header carries it (the "config" line), so a
// script replays without its seed.
type Config struct {
	Name           string     `arg:"name"` // what reports call it
	Backend        Backend    `arg:"backend"`
	Granular       bool       `arg:"granular"`           // gpumem.WithPageGranular
	Faulty         bool       `arg:"faulty"`             // every stream's storage in a storage.Faulty
	ExclusivePages bool       `arg:"exclusive-pages"`    // exclusive-pages dynamic memory
	Capacity       uint64     `arg:"capacity,omitempty"` // gpumem.WithCapacity; 0 = unlimited
	Props          Properties `arg:"props,omitempty"`    // gpumem.WithProperties when set
	Streams        int        `arg:"streams"`            // the default stream and Streams-1 more
	Workers        int        `arg:"workers"`            // goroutines, each with its own buffers
	// HostMaps: on a device backend, Buffer.Map maps the device's memory
	// (gpumem.HostMapper, host-visible pages); without it such a backend
	// refuses Map with ErrNotSupported, and the generator leaves Map out.
	HostMaps bool `arg:"host-maps"`
	// MaxPage is the device's max page size (Device.Properties): the
	// generator draws sizes below it, and too-big allocations above it.
	MaxPage uint64 `arg:"max-page"`
}

// Backend is what the device runs on.
type Backend int

const (
	Host   Backend = iota + 1 // host bytes (gpumem.Open)
	Sim                       // accounting only (gpumem.WithSim): no bytes to compare
	Vulkan                    // device memory: ops reach their bytes through gpumem.HostTransfers
)

var backendNames = []string{Host: "host", Sim: "sim", Vulkan: "vulkan"}

func (b Backend) MarshalText() ([]byte, error)  { return marshalEnum(backendNames, int(b)) }
func (b *Backend) UnmarshalText(t []byte) error { return unmarshalEnum(backendNames, (*int)(b), t) }

// device reports whether the backend holds no host bytes: ops see their
// bytes through gpumem.HostTransfers (copied in stream order inside the
// op, so the same checks run), Map runs only with HostMaps, and captures
// are recorded device commands (Target.Rotate).
func (c Config) device() bool { return c.Backend != Host && c.Backend != Sim }

// Properties are gpumem.WithProperties' figures ("max-page/alignment/max-memory" in a script).
type Properties struct{ MaxPage, Alignment, MaxMemory uint64 }

func (p Properties) MarshalText() ([]byte, error) {
	return fmt.Appendf(nil, "%d/%d/%d", p.MaxPage, p.Alignment, p.MaxMemory), nil
}

func (p *Properties) UnmarshalText(t []byte) error {
	f := strings.Split(string(t), "/")
	if len(f) != 3 {
		return fmt.Errorf("properties %q: want max-page/alignment/max-memory", t)
	}
	var v [3]uint64
	for i, s := range f {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("properties %q: %w", t, err)
		}
		v[i] = n
	}
	*p = Properties{v[0], v[1], v[2]}
	return nil
}

// Kinds is how many configurations ConfigFor cycles through.
const Kinds = 7

// ConfigFor derives a host or Sim configuration from the seed: the kind
// cycles with the seed, so consecutive seeds cover every kind; the streams
// (2-6) and goroutines (3-5) are drawn from it.
func ConfigFor(seed uint64) Config {
	r := rand.New(rand.NewPCG(seed, 0xc0f1))
	c := Config{Backend: Host, Streams: 2 + r.IntN(5), Workers: 3 + r.IntN(3)}
	switch seed % Kinds {
	case 0:
		c.Name, c.Capacity = "host whole-page, 64 MiB", 64<<20
	case 1:
		c.Name, c.Granular, c.Capacity = "host granular, 96 MiB", true, 96<<20
	case 2:
		c.Name, c.Backend, c.Capacity = "sim, 1 GiB", Sim, 1<<30
		if r.IntN(2) == 0 {
			c.Name, c.Granular = "sim granular, 1 GiB", true
		}
	case 3:
		c.Name, c.Faulty, c.Capacity = "host whole-page faulty, 64 MiB", true, 64<<20
	case 4:
		c.Name, c.Granular, c.Faulty, c.Capacity = "host granular faulty, 96 MiB", true, true, 96<<20
	case 5:
		// No capacity, so no out-of-memory is explainable; a small max page
		// makes growths frequent all the same. The MaxMemory figure asks for
		// no relocation (memory pressure is answered only after a failed
		// reservation, design §8.1): it must not change what the model sees.
		c.Name = "host unlimited, 8 MiB pages, MaxMemory 48 MiB"
		c.Props = Properties{MaxPage: 8 << 20, Alignment: 32, MaxMemory: 48 << 20}
	case 6:
		c.Name, c.ExclusivePages, c.Capacity = "host exclusive pages, 64 MiB", true, 64<<20
	}
	c.MaxPage = hostMaxPage(c.Capacity)
	if c.Props != (Properties{}) {
		c.MaxPage = c.Props.MaxPage
	}
	return c
}

// VulkanConfigFor derives a Vulkan configuration from the seed: whole
// pages (the backend has no granular storage), capacities far below
// lavapipe's heap, injected storage faults on every third. The backend's
// own figures (maxPage, hostMaps) complete it.
func VulkanConfigFor(seed, maxPage uint64, hostMaps bool) Config {
	r := rand.New(rand.NewPCG(seed, 0xc0f1))
	c := Config{Backend: Vulkan, Streams: 2 + r.IntN(5), Workers: 3 + r.IntN(3), Capacity: 64 << 20,
		MaxPage: maxPage, HostMaps: hostMaps}
	switch seed % 3 {
	case 0:
		c.Name, c.Faulty = "vulkan whole-page faulty, 64 MiB", true
	case 1:
		c.Name = "vulkan whole-page, 64 MiB"
	case 2:
		c.Name, c.ExclusivePages = "vulkan exclusive pages, 64 MiB", true
	}
	return c
}

// validate says what makes c unusable.
func (c Config) validate() error {
	switch {
	case c.Backend < Host || c.Backend > Vulkan:
		return fmt.Errorf("config: no backend")
	case c.Streams < 1 || c.Streams > 64:
		return fmt.Errorf("config: %d streams, want 1 to 64 (stream sets are 64-bit masks)", c.Streams)
	case c.Workers < 1:
		return fmt.Errorf("config: %d workers, want at least 1", c.Workers)
	case c.Capacity == 0 && c.Props.MaxMemory == 0:
		return fmt.Errorf("config: neither a capacity nor props' max memory: the generator's budget derives from one")
	case c.MaxPage == 0:
		return fmt.Errorf("config: no max-page")
	}
	return nil
}

// budget is the live bytes each goroutine keeps below: half the memory,
// shared out.
func (c Config) budget() uint64 {
	limit := c.Capacity
	if limit == 0 {
		limit = c.Props.MaxMemory
	}
	return limit / 2 / uint64(c.Workers)
}

// sizeCap is the largest ordinary allocation. Under the race detector
// (race) every copied byte is tracked: large buffers are capped where they
// still outgrow the 2 MiB first arena page. Sim copies no bytes.
func (c Config) sizeCap(race bool) uint64 {
	if c.Backend == Sim {
		return min(c.MaxPage/2, c.budget()*3/4)
	}
	n := min(c.MaxPage/2, c.budget()*3/4, baseLen-(1<<20))
	if race {
		n = min(n, 5<<20)
	}
	return n
}

// hostMaxPage is the max page of a Sim device of this capacity (0: none),
// asked of such a device: the script is drawn before any device opens,
// and the model keeps no copy of the device's rule for its page size.
func hostMaxPage(capacity uint64) uint64 {
	opts := []gpumem.Option{gpumem.WithSim()}
	if capacity != 0 {
		opts = append(opts, gpumem.WithCapacity(capacity))
	}
	d, err := gpumem.Open(opts...)
	if err != nil {
		panic(fmt.Sprintf("shadowmodel: opening a Sim device to read its max page: %v", err))
	}
	defer d.Close()
	return d.Properties().MaxPageSize
}
