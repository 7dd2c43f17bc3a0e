package dl

import (
	"runtime"
	"strings"
	"sync"
	"testing"
)

// A missing library fails with the loader's reason on every try, from many
// goroutines at once (dlerror is per thread: without the locked thread the
// message came back empty now and then).
func TestOpenOfAMissingLibraryAlwaysSaysWhy(t *testing.T) {
	if runtime.GOOS != "linux" {
		if _, err := Open("libnothing.so", false); err == nil {
			t.Fatal("Open succeeded off Linux")
		}
		return
	}
	var wg sync.WaitGroup
	errs := make(chan string, 200)
	for range 200 {
		wg.Go(func() {
			_, err := Open("/nonexistent/libgpumem-missing.so.1", false)
			if err == nil {
				errs <- "opened a missing library"
				return
			}
			if !strings.Contains(err.Error(), "libgpumem-missing.so.1") && !strings.Contains(err.Error(), "no reason") {
				errs <- err.Error()
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("Open of a missing library: %q, want the loader's reason naming the file", e)
	}
}

// The C library is there on every Linux machine: its symbols resolve, a
// made-up one is 0.
func TestSymbolFindsWhatTheLibraryExports(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("libraries are loaded on Linux only")
	}
	lib, err := Open("libc.so.6", false)
	if err != nil {
		t.Fatal(err)
	}
	if Symbol(lib, "malloc") == 0 || Symbol(lib, "gpumem_no_such_symbol") != 0 {
		t.Fatalf("malloc at %#x, a missing symbol at %#x", Symbol(lib, "malloc"), Symbol(lib, "gpumem_no_such_symbol"))
	}
}
