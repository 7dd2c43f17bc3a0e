package main

import (
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/units"
	"github.com/gpumem/gpumem/vulkan"
)

// vulkanInfo lists the Vulkan devices the loader enumerates (heaps, memory
// types, the limits gpumem cares about, VK_EXT_memory_budget) and the
// properties a device on the one the backend picks gets; without a loader
// or device it says why.
func vulkanInfo() string {
	infos, err := vulkan.Devices(vulkan.Options{})
	if err != nil {
		return fmt.Sprintf("%-6s not available: %v", "vulkan", err)
	}
	var b strings.Builder
	b.WriteString(vulkanBackendLine())
	for _, d := range infos {
		b.WriteString("\n")
		for _, line := range strings.Split(d.String(), "\n") {
			b.WriteString("       " + line + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// vulkanBackendLine is the backend's one-line summary on the device it
// picks ($GPUMEM_VULKAN_DEVICE).
func vulkanBackendLine() string {
	be, err := vulkan.NewBackend(vulkan.Options{})
	if err != nil {
		return fmt.Sprintf("%-6s devices found, but none opens: %v", "vulkan", err)
	}
	defer be.Close()
	p, info := be.Properties(), be.Info()
	return fmt.Sprintf("%-6s available: %s (device %d, Vulkan %s); alignment %d B, max page %s, capacity %s, whole pages (no sparse binding used)",
		"vulkan", info.Name, info.Index, info.APIVersionString(), p.Alignment, units.Bytes(p.MaxPageSize), capacityString(p.MaxMemory))
}

// vulkanOpen returns how replay opens devices on the vulkan backend and
// the alignment its pages get, or why it cannot run here.
func vulkanOpen() (func(...gpumem.Option) (*gpumem.Device, error), uint64, error) {
	be, err := vulkan.NewBackend(vulkan.Options{})
	if err != nil {
		return nil, 0, fmt.Errorf("no usable Vulkan device: %w", err)
	}
	align := be.Properties().Alignment
	if err := be.Close(); err != nil {
		return nil, 0, err
	}
	open := func(o ...gpumem.Option) (*gpumem.Device, error) { return vulkan.OpenDevice(vulkan.Options{}, o...) }
	return open, align, nil
}
