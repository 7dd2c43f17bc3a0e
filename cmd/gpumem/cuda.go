package main

import (
	"fmt"

	"github.com/gpumem/gpumem/cuda"
	"github.com/gpumem/gpumem/internal/units"
)

// cudaInfo says whether the cuda backend can run here: the driver's
// verdict (cuda.Available) and, when it can, device 0's name and memory
// and the properties a device on it gets.
func cudaInfo() string {
	if err := cuda.Available(); err != nil {
		return fmt.Sprintf("%-5s not available: %v", "cuda", err)
	}
	b, err := cuda.NewBackend(cuda.Options{})
	if err != nil {
		return fmt.Sprintf("%-5s driver found, but device 0 does not open: %v", "cuda", err)
	}
	defer b.Close()
	c := b.Info()
	p := b.Properties()
	pages := "whole pages"
	if g := b.Granule(); g > 0 {
		pages = "granular pages (" + units.Bytes(g).String() + " granules)"
	}
	v := c.DriverVersion
	return fmt.Sprintf("%-5s available: %s, %s memory, CUDA driver %d.%d; alignment %d B, max page %s, capacity %s, %s",
		"cuda", c.Name, units.Bytes(c.TotalMem), v/1000, v%1000/10, p.Alignment, units.Bytes(p.MaxPageSize), capacityString(p.MaxMemory), pages)
}
