package gpumem

import (
	"testing"

	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/internal/relocation"
)

// The root's public enums are the internal ones' values under public names
// (Mode.internal, MemoryConfig.internal, RelocationReason.String convert by
// value): each constant must name the internal constant of the same value,
// and Runs must hold one counter per reason. The struct mirrors
// (Properties, Usage, RelocationStats) need no test: their conversions do
// not compile once the fields differ.
func TestPublicEnumsMatchTheInternalOnes(t *testing.T) {
	for _, c := range []struct {
		name         string
		public, want uint8
	}{
		{"Auto", uint8(Auto), uint8(memory.Auto)},
		{"Persistent", uint8(Persistent), uint8(memory.Persistent)},
		{"Dedicated", uint8(Dedicated), uint8(memory.Dedicated)},
		{"Adaptive", uint8(Adaptive), uint8(memory.Adaptive)},
		{"ExclusivePages", uint8(ExclusivePages), uint8(memory.ExclusivePages)},
		{"PersistentEnabled", uint8(PersistentEnabled), uint8(memory.Enabled)},
		{"PersistentSizeMatch", uint8(PersistentSizeMatch), uint8(memory.SizeMatch)},
		{"PersistentDisabled", uint8(PersistentDisabled), uint8(memory.Disabled)},
		{"PersistentEnforced", uint8(PersistentEnforced), uint8(memory.Enforced)},
		{"RelocationExplicit", uint8(RelocationExplicit), uint8(relocation.Explicit)},
		{"RelocationMemoryPressure", uint8(RelocationMemoryPressure), uint8(relocation.MemoryPressure)},
		{"RelocationArenaFull", uint8(RelocationArenaFull), uint8(relocation.ArenaFull)},
		{"RelocationCapture", uint8(RelocationCapture), uint8(relocation.Capture)},
		{"RelocationCompact", uint8(RelocationCompact), uint8(relocation.Compact)},
		{"RelocationNothingToMove", uint8(RelocationNothingToMove), uint8(relocation.NothingToMove)},
		{"RelocationMoved", uint8(RelocationMoved), uint8(relocation.Moved)},
		{"RelocationAbandoned", uint8(RelocationAbandoned), uint8(relocation.Abandoned)},
		{"RelocationLeaked", uint8(RelocationLeaked), uint8(relocation.Leaked)},
	} {
		if c.public != c.want {
			t.Errorf("%s is %d, the internal constant %d", c.name, c.public, c.want)
		}
	}
	if n := len(RelocationStats{}.Runs); n != relocation.NumReasons || int(RelocationCompact) != n-1 {
		t.Errorf("RelocationStats.Runs holds %d counters and RelocationCompact is %d; the relocation has %d reasons", n, RelocationCompact, relocation.NumReasons)
	}
	for m, want := range map[Mode]string{Auto: "auto", Persistent: "persistent", Dedicated: "dedicated"} {
		if m.String() != want {
			t.Errorf("Mode %d prints %q, want %q (traces spell it so)", m, m.String(), want)
		}
	}
}
