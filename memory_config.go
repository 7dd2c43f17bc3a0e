// The memory policies a device's streams use, and how much their pools
// log (WithMemoryConfig).

package gpumem

import (
	"log/slog"

	"github.com/gpumem/gpumem/internal/memory"
)

// MemoryConfig chooses the memory policies of every stream of a device
// (WithMemoryConfig). The zero value is the default, and the right one for
// a runtime that does not know better: adaptive dynamic memory (which
// relocates), Persistent windows served from the persistent pool, base
// mode Auto. The other choices exist to compare policies (the replay
// tool's exclusive-pages) and for workloads that know their shape (a
// training loop's size-match). Open refuses an unknown value with an
// error wrapping ErrInvalidConfig that names the field.
type MemoryConfig struct {
	// Dynamic is the memory that serves Auto allocations (design §5).
	Dynamic DynamicMemory
	// Persistent says how Persistent windows and the persistent pool are
	// used (design §6.2).
	Persistent PersistentMemory
	// BaseMode, when set, is the mode outside any window (default Auto,
	// or Persistent with PersistentEnforced).
	BaseMode *Mode
	// Log, when set, is the least level the pools log at, through the
	// device's logger (WithLogger): slog.LevelInfo adds their layout,
	// growths, mode changes, explicit cleanups and new persistent pages;
	// slog.LevelDebug adds every reservation's route and the usage after
	// each new dynamic page. Unset: warnings and errors only, whatever the
	// logger would print. It is read once, at Open.
	Log slog.Leveler
}

// DynamicMemory selects the memory that serves ordinary allocations.
type DynamicMemory uint8

const (
	// Adaptive is tiny + small + arena, with relocation: the default. Its
	// arena grows to larger pages as allocations grow and relocates what
	// the smaller pages still hold, so they go back.
	Adaptive DynamicMemory = iota
	// ExclusivePages is 24 buckets of one allocation per page: nothing is
	// ever outdated and nothing moves, at the price of a page per
	// allocation.
	ExclusivePages
)

// PersistentMemory says how Persistent windows and the persistent pool are
// used.
type PersistentMemory uint8

const (
	// PersistentEnabled serves Persistent windows from the persistent pool
	// (the default).
	PersistentEnabled PersistentMemory = iota
	// PersistentSizeMatch also serves an Auto allocation whose effective
	// size matches an existing persistent bucket from it: good for training
	// loops, which allocate the weights' sizes again each step.
	PersistentSizeMatch
	// PersistentDisabled ignores Persistent windows.
	PersistentDisabled
	// PersistentEnforced makes Persistent the base mode; it may run out of
	// memory when sizes vary.
	PersistentEnforced
)

// internal is c as the memory manager takes it. The constants above have
// the manager's values (TestPublicEnumsMatchTheInternalOnes), so an
// unknown value stays unknown and Validate names it.
func (c MemoryConfig) internal() memory.Config {
	ic := memory.Config{
		Dynamic:    memory.DynamicKind(c.Dynamic),
		Persistent: memory.PersistentMemory(c.Persistent),
		LogLevel:   memory.LogDisabled,
	}
	if c.BaseMode != nil {
		m := c.BaseMode.internal()
		ic.BaseMode = &m
	}
	if c.Log != nil {
		switch level := c.Log.Level(); {
		case level <= slog.LevelDebug:
			ic.LogLevel = memory.LogFull
		case level <= slog.LevelInfo:
			ic.LogLevel = memory.LogBasic
		}
	}
	return ic
}
