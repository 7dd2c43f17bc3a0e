package gpumem_test

// The shadow model (shadow_model_test.go) on the Vulkan backend: the same
// workers, operation mix and checks, on device memory of a real driver
// (lavapipe where there is no GPU), with the Khronos validation layer on
// where it is installed and any message it reports failing the test.
//
// This external test package imports package vulkan, which imports
// gpumem: no cycle, since gpumem_test is a package of its own that nothing
// imports, and the model is reused as it is instead of moving its 2400
// lines into a shared package. What differs on Vulkan is said in
// smConfig.device, deviceMaps and graphRotate: ops reach their bytes
// through gpumem.HostTransfers; Map maps the device memory where pages are
// host-visible (lavapipe's are); captures are recorded command buffers, so
// the graph ops are device commands (staged writes, vulkan.Op.Copy) whose
// launches replay the recording's bytes, and none fails on some launches
// only.
//
//	go test -race -run ShadowModelOnVulkan -count=1 .
//
// Long run (new seeds until the duration has passed, then totals):
//
//	go test -run ShadowModelOnVulkan -soak 10m .

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/vulkantest"
	"github.com/gpumem/gpumem/vulkan"
)

// smVulkanSeeds are the short run's seeds, one per configuration
// smVulkanConfig derives; smVulkanOps their operations each.
var smVulkanSeeds = []uint64{1, 2, 3, 4, 5, 6}

const smVulkanOps = 2500

// smVulkanConfig derives a Vulkan configuration from the seed: whole pages
// (the backend has no granular storage), capacities far below lavapipe's
// heap, injected storage faults through WithStorageWrapper on every third.
func smVulkanConfig(seed uint64) smConfig {
	r := rand.New(rand.NewPCG(seed, 0xc0f1))
	c := smConfig{streams: 2 + r.IntN(5), workers: 3 + r.IntN(3), capacity: 64 << 20, device: true}
	switch seed % 3 {
	case 0:
		c.name, c.faulty = "vulkan whole-page faulty, 64 MiB", true
	case 1:
		c.name = "vulkan whole-page, 64 MiB"
	case 2:
		c.name, c.exclPage = "vulkan exclusive pages, 64 MiB", true
	}
	return c
}

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
	var sum smTotals
	for _, seed := range seeds {
		start := time.Now()
		res := smRunOnVulkan(t, seed, ops)
		sum.add(res)
		t.Logf("seed %d (%s, %v): %s", seed, smVulkanConfig(seed).name, time.Since(start).Round(time.Millisecond), res)
	}
	t.Logf("total: %s", sum)
}

// smSoakOnVulkan is -soak on Vulkan: new seeds of ops operations each
// (each on a fresh validated backend) until d has passed, then totals, as
// smSoakRun prints them for the other storages.
func smSoakOnVulkan(t *testing.T, d time.Duration, ops int) {
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	var sum smTotals
	for time.Since(start) < d && !t.Failed() {
		seed++
		fmt.Fprintf(os.Stderr, "shadow: seed %d (%s)\n", seed, smVulkanConfig(seed).name)
		sum.add(smRunOnVulkan(t, seed, ops))
	}
	msg := fmt.Sprintf("vulkan soak %v: %s", time.Since(start).Round(time.Second), sum)
	t.Log(msg)
	fmt.Fprintln(os.Stderr, "shadow:", msg)
}

// smRunOnVulkan runs one seed on a fresh validated Vulkan backend and
// fails t on any validation message once the device (and with it the
// backend) is closed.
func smRunOnVulkan(t *testing.T, seed uint64, ops int) smTotals {
	t.Helper()
	b, err := vulkan.NewBackend(vulkantest.Validated(vulkan.Options{}))
	vulkantest.Need(t, err)
	cfg := smVulkanConfig(seed)
	cfg.deviceMaps = b.PagesHostVisible()
	cfg.graphRotate = smVulkanRotate
	opened := false
	cfg.open = func(opts ...gpumem.Option) (*gpumem.Device, error) {
		if opened {
			return nil, fmt.Errorf("%w: the shadow model opened a second device on one vulkan backend", gpumem.ErrInvalidUse)
		}
		opened = true
		return gpumem.OpenBackend(b, opts...)
	}
	res := smRunConfig(t, seed, cfg, ops)
	// Device.Close closed the backend (idempotent: this returns its error).
	if err := b.Close(); err != nil {
		t.Errorf("seed %d: vulkan Backend.Close: %v", seed, err)
	}
	for _, m := range b.ValidationMessages() {
		t.Errorf("seed %d (%s): validation: %s", seed, cfg.name, m)
	}
	return res
}

// smVulkanRotate is the model's graph-rotate op on Vulkan
// (smConfig.graphRotate): device copies, so a capture records them.
func smVulkanRotate(s *gpumem.Stream, name string, uses []gpumem.Use, n, rot, tmp uint64) error {
	return vulkan.Enqueue(s, name, uses, func(op *vulkan.Op) error {
		// uses[1] = uses[0][rot:] ++ uses[0][:rot]
		if err := op.Copy(vulkan.UseRange(1, 0, n-rot), vulkan.UseRange(0, rot, n-rot)); err != nil {
			return err
		}
		if err := op.Copy(vulkan.UseRange(1, n-rot, rot), vulkan.UseRange(0, 0, rot)); err != nil {
			return err
		}
		if tmp > 0 && len(uses) > 2 {
			return op.Copy(vulkan.UseRange(2, 0, tmp), vulkan.UseRange(0, 0, tmp))
		}
		return nil
	})
}
