//go:build invariants

package memory

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/pool"
)

// Built with -tags invariants, the memory checks its pools after its
// mutations (every one, or one routine mutation in many on a large memory:
// invariantSampleSlices): page tiling and indexes (each pool's Check), and accounting
// (what is in use fits in what is reserved, the guard count is never
// negative). A broken invariant panics at the mutation that broke it. The
// release build compiles none of it (invariants_off.go).

// invariantsOn says whether the invariants build tag is set.
const invariantsOn = true

// checker is a pool that can verify its own invariants.
type checker interface{ Check() }

// invariantSampleSlices sets how often a routine mutation is checked on a
// large memory: a full check visits every slice, so once a memory holds n
// live allocations only one reservation, bind or held free in
// 1 + n/invariantSampleSlices is checked (every one below that many), and
// a check costs about invariantSampleSlices slice visits per mutation
// however large the memory grows. Replaying a snapshot of a training step
// (tens of thousands of live allocations) checked every reservation took
// 17 times the release build's time; the compare package's tests under the
// invariants tag spent most of their minutes there.
const invariantSampleSlices = 64

// invariantSampler schedules the routine checks (invariantSampleSlices).
type invariantSampler struct {
	skip uint64 // routine mutations to leave unchecked before the next check
	// For the sampler's test: full checks run, routine mutations seen.
	checks, routines uint64
}

// routine reports whether a check after this mutation may be skipped: a
// reservation, a bind, a held free or a periodic cleanup, the mutations
// every allocation makes. A relocation, compaction, hole or explicit
// cleanup is always checked: they move or give back many slices at once,
// rarely.
func routine(after string) bool {
	switch after {
	case "Reserve", "ReserveExact", "Bind", "HoldFree", "Periodic cleanup":
		return true
	}
	return false
}

// checkInvariants verifies every pool of the memory; it panics when one is
// broken. A routine mutation on a memory of many live allocations is
// checked one in 1 + n/invariantSampleSlices (invariantSampler), so a
// broken invariant panics at most that many mutations after the one that
// broke it; a small memory, and every relocation, compaction and cleanup,
// is checked every time.
func (m *Manager) checkInvariants(after string) {
	if routine(after) {
		m.inv.routines++
		if m.inv.skip > 0 {
			m.inv.skip--
			return
		}
	}
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
	m.inv.skip = u.Allocations / invariantSampleSlices
	m.inv.checks++
}

var _ checker = (*pool.Arena)(nil)
