package gpumem

import (
	"bytes"
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// Tests of Buffer.Read (buffer.go): what it copies and which fences it waits on.

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

// A host Read on a non-recording stream waits on a long-passed fence of a
// stream that now records: the Read fails and B's recording is invalidated.
func TestReadSkipsPassedFencesOfARecordingStream(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	b, _ := d.NewStream()
	x := mustAlloc(t, a, 64)
	mustWrite(t, x, []byte{1})
	_ = a.Synchronize(bg)
	g, err := b.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error { r[0].Bytes[0] = 5; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	_ = b.Synchronize(bg) // B's launch has completed
	tok, _ := b.PrepareCapture()
	if err := b.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	_, rerr := x.Read(bg)
	_, eerr := b.EndCapture(tok)
	if rerr != nil || eerr != nil {
		t.Fatalf("Read on A (not recording) = %v; B's (empty) recording End = %v", rerr, eerr)
	}
}
