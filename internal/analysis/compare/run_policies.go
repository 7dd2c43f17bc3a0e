package compare

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// runPolicies runs each named policy on events (runPolicy) and returns
// their results in names' order. On Sim storage the policies run side by
// side, at most GOMAXPROCS at once: each replays the same read-only events
// on a device of its own, and with their capacity searches (up to about a
// hundred replays each) they are nearly all of a replay's time, so a trace's
// seven policies take about as long as its slowest on a machine with the
// cores. A replay on host storage or on a device backend (Options.Host,
// Options.Open) runs alone, one policy after the other: its memory is the
// machine's or the GPU's, which side-by-side replays would share and
// misjudge. The first policy to fail stops the others (those not begun
// never begin), and its error is returned.
func runPolicies(ctx context.Context, names []string, events []trace.Event, c *Comparison, opts Options, how deviceOptions) ([]PolicyResult, error) {
	results := make([]PolicyResult, len(names))
	if opts.Host || opts.Open != nil || len(names) == 1 {
		for i, name := range names {
			res, err := runPolicy(ctx, name, events, c, opts, how)
			if err != nil {
				return nil, policyError(name, err)
			}
			results[i] = res
		}
		return results, nil
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	opts.Progress = oneAtATime(opts.Progress)
	errs := make([]error, len(names))
	var stopper atomic.Int32 // the index of the first policy to fail, -1 before
	stopper.Store(-1)
	sideBySide(len(names), func(i int) {
		if ctx.Err() != nil {
			return // another policy failed, or the caller's context ended
		}
		results[i], errs[i] = runPolicy(ctx, names[i], events, c, opts, how)
		if errs[i] != nil && stopper.CompareAndSwap(-1, int32(i)) {
			stop()
		}
	})
	if i := stopper.Load(); i >= 0 {
		return nil, policyError(names[i], errs[i])
	}
	if err := ctx.Err(); err != nil {
		return nil, err // ended before any policy saw it
	}
	return results, nil
}

// policyError names the policy whose replay failed with err.
func policyError(name string, err error) error { return fmt.Errorf("policy %s: %w", name, err) }

// sideBySide runs run(0), …, run(n−1), at most GOMAXPROCS at once, and
// returns once every one has: replays (a run's policies, advise's
// settings) are independent and each keeps a CPU busy.
func sideBySide(n int, run func(i int)) {
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			run(i)
		})
	}
	wg.Wait()
}

// oneAtATime is progress (nil: nil) for replays running side by side:
// called by one at a time, as the CLI's progress bar, which is not safe for
// concurrent use, must be.
func oneAtATime(progress func(policy, step string, done, total int)) func(policy, step string, done, total int) {
	if progress == nil {
		return nil
	}
	var mu sync.Mutex
	return func(policy, step string, done, total int) {
		mu.Lock()
		defer mu.Unlock()
		progress(policy, step, done, total)
	}
}
