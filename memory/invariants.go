//go:build invariants

package memory

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/pool"
)

// Built with -tags invariants, the memory checks its pools after every
// mutation: page tiling and indexes (each pool's Check), and accounting
// (what is in use fits in what is reserved, the guard count is never
// negative). A broken invariant panics at the mutation that broke it. The
// release build compiles none of it (invariants_off.go).

// invariantsOn says whether the invariants build tag is set.
const invariantsOn = true

// checker is a pool that can verify its own invariants.
type checker interface{ Check() }

// checkInvariants verifies every pool of the memory; it panics when one is
// broken.
func (m *Manager) checkInvariants(after string) {
	m.persistent.Check()
	m.dedicated.Check()
	for i := 0; i < 256; i++ {
		p := m.dynamic.Pool(uint8(i))
		if p == nil {
			continue
		}
		if c, ok := p.(checker); ok {
			c.Check()
		}
	}
	u := m.Report().Usage()
	if u.BytesInUse > u.BytesReserved {
		panic(fmt.Sprintf("memory %s after %s: %d bytes in use exceed the %d reserved", m.name, after, u.BytesInUse, u.BytesReserved))
	}
	if m.guards < 0 {
		panic(fmt.Sprintf("memory %s after %s: %d guards", m.name, after, m.guards))
	}
}

var _ checker = (*pool.Arena)(nil)
