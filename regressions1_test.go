package gpumem

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/gpumem/gpumem/storage"
)

var bg = context.Background()

// X1 at Launch: graph on A reads B's buffer; B's pending write is not waited for.
func TestGraphLaunchWaitsForTheOwnersPendingWrite(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	bs, _ := d.NewStream()
	x := mustAlloc(t, bs, 64)
	mustWrite(t, x, []byte{1})
	if err := bs.Synchronize(bg); err != nil {
		t.Fatal(err)
	}
	var seen byte
	g, err := a.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("read", []Use{{Buffer: x, Access: Read}}, func(r []storage.Resource) error { seen = r[0].Bytes[0]; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gate := make(chan struct{})
	_ = bs.Enqueue("block", nil, func([]storage.Resource) error { <-gate; return nil })
	mustWrite(t, x, []byte{2}) // B's write, queued behind the gate
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	done := a.q.Completed()
	fence, _ := a.q.Fence()
	close(gate)
	_ = a.Synchronize(bg)
	_ = bs.Synchronize(bg)
	if done >= fence.Seq {
		t.Fatalf("launch ran (seen %d) before B's earlier write to the buffer: no X1 wait at Launch", seen)
	}
}

// X2 at Launch: graph on A reads buffer of B; B's next write does not wait.
func TestOwnersNextWriteWaitsForALaunchedGraphsRead(t *testing.T) {
	d := openHost(t)
	a := d.DefaultStream()
	bs, _ := d.NewStream()
	x := mustAlloc(t, bs, 64)
	mustWrite(t, x, []byte{1})
	_ = bs.Synchronize(bg)
	var seen byte
	g, err := a.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("read", []Use{{Buffer: x, Access: Read}}, func(r []storage.Resource) error { seen = r[0].Bytes[0]; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gate := make(chan struct{})
	_ = a.Enqueue("block", nil, func([]storage.Resource) error { <-gate; return nil })
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, x, []byte{9}) // B writes after A's launch reads (program order)
	time.Sleep(50 * time.Millisecond)
	close(gate)
	_ = a.Synchronize(bg)
	_ = bs.Synchronize(bg)
	if seen != 1 {
		t.Fatalf("launched read saw %d: B's later write ran before it (no X2 note for read uses at Launch)", seen)
	}
}

// A replayed op that fails leaves its outputs unmarked (§11).
func TestFailedReplayedOpMarksTheGraphsOutputsUnwritten(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	x := mustAlloc(t, s, 64)
	mustWrite(t, x, []byte{7})
	fail := false
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		return s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error {
			if fail {
				return errors.New("boom")
			}
			r[0].Bytes[0] = 42
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_ = s.Synchronize(bg)
	fail = true
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	_ = s.Synchronize(bg)
	got, err := x.Read(bg)
	if !errors.Is(err, ErrUnwritten) {
		t.Fatalf("read after failed replayed op: err=%v byte0=%v, want ErrUnwritten", err, got[:1])
	}
}

// An op skipped (failed input) while recording is silently left out of the graph.
func TestRecordingAnOpWhoseInputCarriesAFailureDoomsTheRecording(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	in := mustAlloc(t, s, 64)
	out := mustAlloc(t, s, 64)
	_ = s.Enqueue("fail", []Use{{Buffer: in, Access: Write}}, func([]storage.Resource) error { return errors.New("boom") })
	_ = s.Synchronize(bg)
	tok, _ := s.PrepareCapture()
	_ = s.BeginCapture(tok)
	err := s.Enqueue("copy", []Use{{Buffer: in, Access: Read}, {Buffer: out, Access: Write}}, func(r []storage.Resource) error { return nil })
	g, endErr := s.EndCapture(tok)
	if endErr == nil {
		defer g.Close()
		t.Fatalf("recording sealed with %d ops although its only op was skipped (enqueue err %v)", g.Ops(), err)
	}
}

func TestMisuseAndExtremeSizesReturnErrorsNeverPanic(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	try := func(name string, f func()) {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panicked: %v", name, r)
			}
		}()
		f()
	}
	try("Alloc(MaxUint64)", func() { _, err := s.Alloc(bg, math.MaxUint64); t.Logf("Alloc(max): %v", err) })
	try("Alloc(MaxUint64-100)", func() { _, err := s.Alloc(bg, math.MaxUint64-100); t.Logf("Alloc(max-100): %v", err) })
	try("Alloc(1<<62)", func() { _, err := s.Alloc(bg, 1<<62); t.Logf("Alloc(1<<62): %v", err) })
	try("Alloc(0)", func() {
		b, err := s.Alloc(bg, 0)
		t.Logf("Alloc(0): %v", err)
		if b != nil {
			_, err = b.Read(bg)
			t.Logf("Read(0): %v", err)
			m, err := b.Map(bg)
			t.Logf("Map(0): %v", err)
			if m != nil {
				m.Release()
			}
			t.Logf("Enqueue(0): %v", s.Enqueue("z", []Use{{Buffer: b, Access: Write}}, func([]storage.Resource) error { return nil }))
			_ = b.Free()
		}
	})
	try("zero Buffer use", func() {
		t.Logf("%v", s.Enqueue("z", []Use{{Buffer: &Buffer{}}}, func([]storage.Resource) error { return nil }))
	})
	try("Use overflow", func() {
		b := mustAlloc(t, s, 64)
		t.Logf("%v", s.Enqueue("z", []Use{{Buffer: b, Offset: 10, Size: math.MaxUint64 - 5}}, func([]storage.Resource) error { return nil }))
		t.Logf("%v", s.Enqueue("z", []Use{{Buffer: b, Offset: math.MaxUint64, Size: 1}}, func([]storage.Resource) error { return nil }))
		t.Logf("%v", s.Enqueue("z", []Use{{Buffer: b, Offset: 64, Size: 0}}, func(r []storage.Resource) error { return nil }))
	})
	try("token misuse", func() {
		tok, _ := s.PrepareCapture()
		t.Logf("begin nil: %v", s.BeginCapture(nil))
		t.Logf("end before begin: %v", func() error { _, err := s.EndCapture(tok); return err }())
		t.Logf("begin after end: %v", s.BeginCapture(tok))
		t.Logf("abort: %v", s.AbortCapture(tok))
		_, err := s.EndCapture(&CaptureToken{s: s})
		t.Logf("end fake: %v", err)
	})
}
