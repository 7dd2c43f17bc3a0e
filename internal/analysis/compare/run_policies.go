package compare

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

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
// misjudge. The first policy to fail stops the others; the error returned is
// the first in names' order that is not that stop.
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
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if p := opts.Progress; p != nil {
		var mu sync.Mutex
		opts.Progress = func(policy, step string, done, total int) {
			mu.Lock()
			defer mu.Unlock()
			p(policy, step, done, total)
		}
	}
	errs := make([]error, len(names))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if context.Cause(ctx) == errStopped {
				errs[i] = errStopped
				return
			}
			results[i], errs[i] = runPolicy(ctx, name, events, c, opts, how)
			if errs[i] != nil {
				stop(errStopped)
			}
		})
	}
	wg.Wait()
	var first error
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, errStopped) || context.Cause(ctx) == errStopped && errors.Is(err, context.Canceled):
			// stopped because another policy failed: that one's error is returned
		case first == nil:
			first = policyError(names[i], err)
		}
	}
	if first != nil {
		return nil, first
	}
	return results, nil
}

// errStopped is the cause runPolicies cancels the other policies' replays
// with when one fails.
var errStopped = errors.New("compare: another policy failed")

// policyError names the policy whose replay failed with err.
func policyError(name string, err error) error { return fmt.Errorf("policy %s: %w", name, err) }
