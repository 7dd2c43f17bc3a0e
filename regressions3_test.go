package gpumem

import (
	"context"
	"errors"
	"testing"
	"unsafe"

	"github.com/gpumem/gpumem/memory"
	"github.com/gpumem/gpumem/storage"
)

func TestAlignmentPropertyIsHonoured(t *testing.T) {
	d := openHost(t, WithProperties(memory.Properties{MaxPageSize: 64 * mib, Alignment: 4096}))
	s := d.DefaultStream()
	for i := 0; i < 8; i++ {
		b := mustAlloc(t, s, 100)
		_ = s.Enqueue("addr", []Use{{Buffer: b, Access: Read}}, func(r []storage.Resource) error {
			p := uintptr(unsafe.Pointer(unsafe.SliceData(r[0].Bytes)))
			if p%4096 != 0 {
				t.Errorf("buffer at %#x not 4096-aligned (props Alignment 4096)", p)
			}
			return nil
		})
	}
	_ = s.Synchronize(bg)
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

// Graph.Launch after Graph.Close says "device closed".
func TestLaunchOfAClosedGraphSaysTheGraphIsClosed(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	x := mustAlloc(t, s, 64)
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Close()
	err = g.Launch(bg)
	t.Logf("Launch after Graph.Close: %v (errors.Is ErrClosed=%v)", err, errors.Is(err, ErrClosed))
}
