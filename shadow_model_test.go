package gpumem_test

// TestShadowModel runs the shadow model (internal/shadowmodel: a seeded,
// randomized run of the public API against a shadow copy of every
// buffer's bytes and failure marks, written as a script) on host and Sim
// devices. The package doc says what the model does and checks.
//
// Short run (part of the normal suite: about 1.05e5 steps over 14 seeds,
// every configuration kind twice; -short runs a quarter):
//
//	go test -race -run TestShadowModel -count=1 .
//
// Long run (new seeds until the duration has passed, then totals:
// operations, faults injected, bytes compared, seeds, violations):
//
//	go test -run TestShadowModel -soak 10m .
//
// A failing seed writes its script to a file and prints how to replay it
// (go test ./internal/shadowmodel -run TestReplay -script FILE), and how
// to generate it again, as here:
//
//	go test -race -run TestShadowModel -shadow.seed 9 -shadow.ops 21000 -count=1 -v .
//
// While a known defect is being fixed, -shadow.known 13,15 makes the
// generator avoid the patterns that trigger defects 13 and 15 (default:
// none, full checking; the package doc lists them).

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/shadowmodel"
)

var (
	smSoak  = flag.Duration("soak", 0, "TestShadowModel: run new seeds until this much time has passed, then print totals")
	smSeed  = flag.Uint64("shadow.seed", 0, "TestShadowModel: run only this seed")
	smOps   = flag.Int("shadow.ops", 0, "TestShadowModel: with -shadow.seed, the seed's steps (default: as in the run that printed it)")
	smKnown = flag.String("shadow.known", "", "TestShadowModel: comma-separated numbers of known defects (reliability-2026-12.md) whose triggering patterns the generator avoids")
)

const (
	smShortOps   = 105_000 // steps of the short run, over all seeds
	smSoakOps    = 20_000  // steps of each soak seed
	smShortSeeds = 2 * shadowmodel.Kinds
)

// smKnownList is -shadow.known's numbers.
func smKnownList() []int {
	var out []int
	for _, f := range strings.Split(*smKnown, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// smRace reports whether the test binary was built with -race (the
// generator then caps large sizes).
var smRace = sync.OnceValue(func() bool {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" {
				return s.Value == "true"
			}
		}
	}
	return false
})

func TestShadowModel(t *testing.T) {
	if *smSeed != 0 {
		ops := *smOps
		if ops == 0 {
			ops = smSeedOps(*smSeed, testing.Short())
		}
		res := smRun(t, *smSeed, shadowmodel.ConfigFor(*smSeed), ops, shadowmodel.Target{})
		t.Logf("seed %d: %s", *smSeed, res)
		return
	}
	if *smSoak > 0 {
		smSoakRun(t, *smSoak)
		return
	}
	var sum shadowmodel.Totals
	for seed := uint64(1); seed <= smShortSeeds; seed++ {
		start := time.Now()
		cfg := shadowmodel.ConfigFor(seed)
		res := smRun(t, seed, cfg, smSeedOps(seed, testing.Short()), shadowmodel.Target{})
		sum.Add(res)
		t.Logf("seed %d (%s, %v): %s", seed, cfg.Name, time.Since(start).Round(time.Millisecond), res)
	}
	t.Logf("total: %s", sum)
}

// smSeedOps is how many steps a seed runs: in the short run, an equal
// share of smShortOps, four shares for Sim seeds (they copy no bytes, so
// they cost a tenth of a host seed's time); a quarter of that under -short;
// smSoakOps for the soak's seeds.
func smSeedOps(seed uint64, short bool) int {
	if seed > smShortSeeds {
		return smSoakOps
	}
	const simWeight = 4
	per := smShortOps / (smShortSeeds + 2*(simWeight-1)) // two Sim seeds
	if short {
		per /= 4
	}
	if shadowmodel.ConfigFor(seed).Backend == shadowmodel.Sim {
		return simWeight * per
	}
	return per
}

func smSoakRun(t *testing.T, d time.Duration) {
	start := time.Now()
	seed := uint64(time.Now().UnixNano())
	var sum shadowmodel.Totals
	for time.Since(start) < d {
		seed++
		fmt.Fprintf(os.Stderr, "shadow: seed %d (%s)\n", seed, shadowmodel.ConfigFor(seed).Name)
		sum.Add(smRun(t, seed, shadowmodel.ConfigFor(seed), smSeedOps(seed, false), shadowmodel.Target{}))
	}
	msg := fmt.Sprintf("soak %v: %s", time.Since(start).Round(time.Second), sum)
	t.Log(msg)
	fmt.Fprintln(os.Stderr, "shadow:", msg)
}

// smRun generates seed's script of steps steps on cfg, runs it on tgt, and
// fails t with the script written out on any violation.
func smRun(t *testing.T, seed uint64, cfg shadowmodel.Config, steps int, tgt shadowmodel.Target) shadowmodel.Totals {
	t.Helper()
	s := shadowmodel.Generate(seed, cfg, shadowmodel.Gen{Steps: steps, Known: smKnownList(), Race: smRace()})
	res, err := shadowmodel.Run(s, tgt)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	shadowmodel.Check(t, s, res, fmt.Sprintf("go test -run '^%s$' -shadow.seed %d -shadow.ops %d -count=1 -v .", t.Name(), seed, steps))
	return res.Totals
}
