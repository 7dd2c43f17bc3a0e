package compare

import (
	"fmt"
	"slices"

	"github.com/gpumem/gpumem/internal/units"
)

// capacityLines are the sentences replay and advise write about the
// capacity asked about, before any verdict (none without a capacity): the
// notes on the capacity as the user gave it (CapacityNotes), whether the
// live tensors alone pass it (liveOverLine, naming what cannot fit: "no
// policy and no allocator setting", "no allocator setting"), and what it
// counts (overheadLine; replay's header already says what -overhead sets
// aside, so withOverhead false leaves that sentence out).
func (c *Comparison) capacityLines(what string, withOverhead bool) []string {
	if c.Capacity == 0 {
		return nil
	}
	lines := slices.Clone(c.CapacityNotes)
	if c.LiveOverCapacity > 0 {
		lines = append(lines, c.liveOverLine(what))
	}
	if c.Overhead == 0 || withOverhead {
		lines = append(lines, c.overheadLine())
	}
	return lines
}

// liveOverLine says that what cannot fit the capacity, since the live
// tensors alone pass it, how much live memory must go, and how users
// shed it.
func (c *Comparison) liveOverLine(what string) string {
	has := units.Bytes(c.Capacity - c.Overhead).String()
	if c.Overhead > 0 {
		has = "the " + has + " the allocator has (-capacity less -overhead)"
	}
	return fmt.Sprintf("%s can fit %s: the live tensors alone peak at %s, %s more. That much live memory must go at the peak, whatever the allocator does: a smaller batch or sequence length, activation checkpointing, or offloading weights, optimizer state or activations to the CPU.",
		what, has, units.Bytes(c.PeakLive), units.Bytes(c.LiveOverCapacity))
}

// overheadLine says what the capacity counts: without -overhead only what
// the allocator reserves, not the CUDA context nor the framework's memory
// outside the allocator, and how to measure them; with it, what it sets
// aside.
func (c *Comparison) overheadLine() string {
	if c.Overhead > 0 {
		return fmt.Sprintf("of %s, -overhead sets %s aside for the CUDA context and memory outside the allocator: the allocator has %s.",
			units.Bytes(c.Capacity), units.Bytes(c.Overhead), units.Bytes(c.Capacity-c.Overhead))
	}
	return fmt.Sprintf("%s counts only what PyTorch's caching allocator reserves: the CUDA context (a few hundred MiB) and the framework's memory outside the allocator (NCCL buffers, library workspaces, other processes) are not counted; -overhead SIZE sets them aside (nvidia-smi's used memory less torch.cuda.memory_reserved() while the program runs).",
		units.Bytes(c.Capacity))
}

// tightWords is what a margin below the worth-a-change threshold is
// called, and why ("" for a margin at or above it): within what one run
// differs from the next, and, without -overhead, the uncounted CUDA
// context takes part of it.
func (c *Comparison) tightWords(margin int64, threshold uint64) string {
	if threshold == 0 || margin >= int64(threshold) {
		return ""
	}
	w := fmt.Sprintf("tight: under %s, a change's worth", units.Bytes(threshold))
	if c.Overhead == 0 {
		w += ", and the CUDA context, not counted, takes a few hundred MiB of it"
	}
	return w
}
