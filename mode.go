// Modes: what kind of data a stream's next allocations hold, which decides
// the pool that serves them (Stream.Window).

package gpumem

import "github.com/gpumem/gpumem/internal/memory"

// Mode says what kind of data a stream's next allocations hold, and so
// which pool serves them: ordinary working memory goes to the dynamic
// memory, whose pages relocation may renumber and give back; data that
// stays (weights) packs tighter in an exact-fit pool; a one-off buffer
// gets storage of its own, returned at its free, so it neither stays
// reserved nor shapes the pools' page sizes. Stream.Window opens a window
// of a mode; MemoryConfig.BaseMode sets the mode outside windows.
type Mode uint8

const (
	// Auto is ordinary working memory, served by the dynamic memory; a
	// HistoryWindow entry with Mode Auto closed the innermost window.
	Auto Mode = iota
	// Persistent is data likely never freed (weights): the exact-fit
	// persistent pool.
	Persistent
	// Dedicated gives each allocation its own device allocation, returned
	// once freed: one-off buffers that must neither stay reserved nor shape
	// pool sizing.
	Dedicated
)

// String returns the mode's name as traces spell it: "auto",
// "persistent", "dedicated".
func (m Mode) String() string { return m.internal().String() }

// internal is m as the memory manager takes it; the constants above have
// its values (TestPublicEnumsMatchTheInternalOnes).
func (m Mode) internal() memory.Mode { return memory.Mode(m) }
