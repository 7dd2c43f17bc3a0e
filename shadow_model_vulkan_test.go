package gpumem_test

// The shadow model (internal/shadowmodel) on the Vulkan backend: the same
// goroutines, operation mix and checks, on device memory of a real driver
// (lavapipe where there is no GPU), with the Khronos validation layer on
// where it is installed and any message it reports failing the test.
// What differs on Vulkan is said in shadowmodel.Config.HostMaps and
// Target.Rotate: ops reach their bytes through gpumem.HostTransfers; Map
// maps the device memory where pages are host-visible (lavapipe's are);
// captures are recorded command buffers, so the graph ops are device
// commands (staged writes, vulkan.Op.Copy) whose launches replay the
// recording's bytes, and none fails on some launches only.
//
//	go test -race -run ShadowModelOnVulkan -count=1 .
//
// Long run (new seeds until the duration has passed, then totals):
//
//	go test -run ShadowModelOnVulkan -soak 10m .

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/shadowmodel"
	"github.com/gpumem/gpumem/internal/vulkantest"
	"github.com/gpumem/gpumem/vulkan"
)

// smVulkanSeeds are the short run's seeds, one per configuration
// shadowmodel.VulkanConfigFor derives; smVulkanOps their steps each.
var smVulkanSeeds = []uint64{1, 2, 3, 4, 5, 6}

const smVulkanOps = 2500

func TestShadowModelOnVulkan(t *testing.T) {
	seeds, ops := smVulkanSeeds, smVulkanOps
	if testing.Short() {
		ops /= 4
	}
	if *smSeed != 0 {
		seeds = []uint64{*smSeed}
		if *smOps != 0 {
			ops = *smOps
		}
	}
	if *smSoak > 0 && *smSeed == 0 {
		smSoakOnVulkan(t, *smSoak, ops)
		return
	}
	var sum shadowmodel.Totals
	for _, seed := range seeds {
		start := time.Now()
		res, name := smRunOnVulkan(t, seed, ops)
		sum.Add(res)
		t.Logf("seed %d (%s, %v): %s", seed, name, time.Since(start).Round(time.Millisecond), res)
	}
	t.Logf("total: %s", sum)
}

// smSoakOnVulkan is -soak on Vulkan: new seeds of ops steps each (each on
// a fresh validated backend) until d has passed, then totals, as
// smSoakRun prints them for the other storages.
func smSoakOnVulkan(t *testing.T, d time.Duration, ops int) {
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	var sum shadowmodel.Totals
	for time.Since(start) < d && !t.Failed() {
		seed++
		fmt.Fprintf(os.Stderr, "shadow: seed %d (vulkan)\n", seed)
		res, _ := smRunOnVulkan(t, seed, ops)
		sum.Add(res)
	}
	msg := fmt.Sprintf("vulkan soak %v: %s", time.Since(start).Round(time.Second), sum)
	t.Log(msg)
	fmt.Fprintln(os.Stderr, "shadow:", msg)
}

// smRunOnVulkan runs one seed on a fresh validated Vulkan backend and
// fails t on any validation message once the device (and with it the
// backend) is closed.
func smRunOnVulkan(t *testing.T, seed uint64, ops int) (shadowmodel.Totals, string) {
	t.Helper()
	b, err := vulkan.NewBackend(vulkantest.Validated(vulkan.Options{}))
	vulkantest.Need(t, err)
	cfg := shadowmodel.VulkanConfigFor(seed, b.Properties().MaxPageSize, b.PagesHostVisible())
	res := smRun(t, seed, cfg, ops, shadowmodel.VulkanTarget(b))
	// Device.Close closed the backend (idempotent: this returns its error).
	if err := b.Close(); err != nil {
		t.Errorf("seed %d: vulkan Backend.Close: %v", seed, err)
	}
	for _, m := range b.ValidationMessages() {
		t.Errorf("seed %d (%s): validation: %s", seed, cfg.Name, m)
	}
	return res, cfg.Name
}
