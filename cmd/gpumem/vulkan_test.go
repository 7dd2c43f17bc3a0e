package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/compare"
	"github.com/gpumem/gpumem/vulkan"
)

// needVulkan skips (fails under CI=true) without a usable Vulkan device.
func needVulkan(t *testing.T) {
	t.Helper()
	_, err := vulkan.Devices(vulkan.Options{})
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and no Vulkan device: %v", err)
	}
	if errors.Is(err, vulkan.ErrNoLoader) || errors.Is(err, vulkan.ErrNoDevice) {
		t.Skipf("no Vulkan device: %v", err)
	}
	t.Fatal(err)
}

func TestInfoListsTheVulkanDevices(t *testing.T) {
	needVulkan(t)
	out := mustRun(t, "info")
	for _, want := range []string{"vulkan available: ", "heap 0: ", "memory type 0: ", "maxMemoryAllocationCount ", "minStorageBufferOffsetAlignment ", "nonCoherentAtomSize ", "VK_EXT_memory_budget "} {
		if !strings.Contains(out, want) {
			t.Errorf("info does not say %q:\n%s", want, out)
		}
	}
}

func TestInfoSaysWhyVulkanIsNotAvailable(t *testing.T) {
	t.Setenv(vulkan.EnvLibrary, filepath.Join(t.TempDir(), "libvulkan.so.1"))
	out := mustRun(t, "info")
	if !strings.Contains(out, "vulkan not available: ") || !strings.Contains(out, "libvulkan.so.1") {
		t.Errorf("info without a loader:\n%s", out)
	}
}

func TestReplayOnTheVulkanBackend(t *testing.T) {
	needVulkan(t)
	path := filepath.Join(t.TempDir(), "capture.jsonl")
	mustRun(t, "synth", "-workload", "capture", "-allocs", "60", "-o", path)
	var onVulkan, onSim replayJSON
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", "-backend", "vulkan", path), &onVulkan)
	decodeOne(t, mustRun(t, "replay", "-quiet", "-json", path), &onSim)
	if !slices.Equal(onVulkan.policyNames(), compare.Policies()) {
		t.Fatalf("vulkan replay policies %v, want %v", onVulkan.policyNames(), compare.Policies())
	}
	if onVulkan.Events != onSim.Events || onVulkan.PeakLive != onSim.PeakLive {
		t.Fatalf("vulkan replay: %d events, peak live %d; sim: %d, %d", onVulkan.Events, onVulkan.PeakLive, onSim.Events, onSim.PeakLive)
	}
	for _, p := range onVulkan.Policies {
		want := "vulkan"
		if strings.HasPrefix(p.Name, "torch") {
			want = "torch-model"
		}
		if p.Replay.Backend != want {
			t.Errorf("policy %s replayed on backend %q, want %q", p.Name, p.Replay.Backend, want)
		}
		if p.FailedAllocs != 0 || p.PeakReserved < onVulkan.PeakLive {
			t.Errorf("vulkan policy %s: %d failed allocations, peak reserved %d; peak live %d", p.Name, p.FailedAllocs, p.PeakReserved, onVulkan.PeakLive)
		}
	}
}
