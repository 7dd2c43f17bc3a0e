package gpumem

import (
	"context"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

func TestLaunchNotesAreDroppedWhenTheGraphCloses(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	b, _ := d.NewStream()
	x := mustAlloc(t, a, 64)
	g, err := b.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		_ = g.Launch(bg)
	}
	_ = b.Synchronize(bg)
	_ = g.Close()
	mustFree(t, x)
	mustCleanup(t, d)
	d.mu.Lock()
	n := len(d.foreign[x.h.Descriptor()])
	d.mu.Unlock()
	if n > 0 {
		t.Fatalf("after 1000 launches, sync, graph close, free and cleanup, d.foreign still holds %d fences for the freed buffer", n)
	}
}
