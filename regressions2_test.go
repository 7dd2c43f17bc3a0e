package gpumem

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
)

// Read copies the bytes after dropping its binding and the lock: a concurrent
// Cleanup may relocate the buffer and give back (munmap) its old page first.
func TestReadRacingCleanupCopiesWhileTheBytesAreHeld(t *testing.T) {
	for i := 0; i < 400; i++ {
		d := openHost(t, WithPageGranular(true))
		s := d.DefaultStream()
		want := pattern(4*mib+3, 51)
		b := mustAlloc(t, s, uint64(len(want)))
		mustWrite(t, b, want)
		mustFree(t, mustAlloc(t, s, 7*mib))
		_ = s.Synchronize(bg)
		var wg sync.WaitGroup
		wg.Add(2)
		var got []byte
		var rerr error
		go func() { defer wg.Done(); got, rerr = b.Read(bg) }()
		go func() {
			defer wg.Done()
			for j := 0; j < i%50; j++ {
				runtime.Gosched()
			}
			_ = d.Cleanup(bg)
		}()
		wg.Wait()
		if rerr != nil {
			t.Fatal(rerr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("iteration %d: Read returned bytes differing at %d", i, firstDiff(got, want))
		}
		_ = d.Close()
	}
}
