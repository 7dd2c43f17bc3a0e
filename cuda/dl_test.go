//go:build linux

package cuda

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// A failed load always says why. dlerror's message is per OS thread, so a
// goroutine that moved between dlopen and dlerror used to read an empty
// one (5 of 60 runs of `gpumem info` without a driver). Busy goroutines
// run alongside to make the scheduler move the loading goroutines.
func TestLoadFailureAlwaysHasAReason(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range 2 * runtime.GOMAXPROCS(0) {
		busy.Add(1)
		go func() {
			defer busy.Done()
			for {
				select {
				case <-stop:
					return
				default:
					runtime.Gosched()
				}
			}
		}()
	}
	defer func() { close(stop); busy.Wait() }()

	const runs = 200
	var wg sync.WaitGroup
	errs := make([]error, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = available(missing)
		}()
	}
	wg.Wait()
	prefix := "load " + missing + ": "
	for i, err := range errs {
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("run %d: available(missing) = %v, want ErrNoDriver", i, err)
		}
		_, reason, ok := strings.Cut(err.Error(), prefix)
		if !ok || strings.TrimSpace(reason) == "" {
			t.Fatalf("run %d: %q has no reason after %q", i, err, prefix)
		}
		if !strings.Contains(reason, "No such file") {
			t.Fatalf("run %d: reason %q does not say the file is missing", i, reason)
		}
	}
}
