package gpumem

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/gpumem/gpumem/memory"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

func addOne(s *Stream, b *Buffer) error {
	return s.Enqueue("add-one", []Use{{Buffer: b, Access: ReadWrite}}, func(res []storage.Resource) error {
		for i := range res[0].Bytes {
			res[0].Bytes[i]++
		}
		return nil
	})
}

func TestSealedGraphReplaysWithoutRunningWhileRecording(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	b := mustAlloc(t, s, 1<<20)
	if err := b.Write(ctx, bytes.Repeat([]byte{10}, 1<<20)); err != nil {
		t.Fatal(err)
	}
	tok, err := s.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	if err := addOne(s, b); err != nil { // warmup runs: 11
		t.Fatal(err)
	}
	if err := s.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	if err := addOne(s, b); err != nil { // recorded, not run
		t.Fatal(err)
	}
	g, err := s.EndCapture(tok)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := b.Read(ctx)
	if got[0] != 11 {
		t.Fatalf("after seal byte = %d, want 11 (recording must not run)", got[0])
	}
	if st := d.Stats(); st.GuardedPages != 1 || st.Captures.Sealed != 1 {
		t.Fatalf("guarded pages %d sealed %d, want 1 and 1", st.GuardedPages, st.Captures.Sealed)
	}
	for range 3 {
		if err := g.Launch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, err = b.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{14}, 1<<20)) {
		t.Fatalf("after three launches byte = %d, want 14", got[0])
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.GuardedPages != 0 {
		t.Fatalf("guards after Close = %d", st.GuardedPages)
	}
}

func TestRecordingThatNeedsAPageDoomsCaptureAndMarksWrites(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	b := mustAlloc(t, s, 1<<20)
	tok, _ := s.PrepareCapture()
	if err := s.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(ctx, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(ctx, 8<<20); !errors.Is(err, ErrPageUpdateForbidden) {
		t.Fatalf("alloc needing a page while recording: %v, want ErrPageUpdateForbidden", err)
	}
	if _, err := s.EndCapture(tok); err == nil {
		t.Fatal("EndCapture of a doomed recording succeeded")
	}
	if _, err := b.Read(ctx); !errors.Is(err, ErrUnwritten) {
		t.Fatalf("read of a doomed recording's output: %v, want ErrUnwritten", err)
	}
	if st := d.Stats(); st.Captures.Doomed != 1 || st.GuardedPages != 0 {
		t.Fatalf("doomed %d guarded %d", st.Captures.Doomed, st.GuardedPages)
	}
}

func TestPrimingKeepsWarmupSlicesSoRecordingNeedsNoPage(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	s := d.DefaultStream()
	fn := func(ctx context.Context, s *Stream) error {
		var bufs []*Buffer
		for range 3 {
			b, err := s.Alloc(ctx, 3<<20)
			if err != nil {
				return err
			}
			if err := addOne(s, b); err != nil {
				return err
			}
			bufs = append(bufs, b)
			if s.capture.Phase() == stream.Prepared {
				// Warmup frees as it goes; the recording holds all three.
				if err := b.Free(); err != nil {
					return err
				}
				bufs = bufs[:0]
			}
		}
		for _, b := range bufs {
			if err := b.Free(); err != nil {
				return err
			}
		}
		return nil
	}
	g, err := s.Capture(ctx, fn)
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	defer g.Close()
	if g.Ops() != 3 {
		t.Fatalf("recorded %d ops, want 3", g.Ops())
	}
}

func TestCleanupWhileAnotherStreamRecordsIsRefusedWithoutWaiting(t *testing.T) {
	ctx := context.Background()
	d := openHost(t)
	a := d.DefaultStream()
	b, _ := d.NewStream()
	tok, _ := a.PrepareCapture()
	if err := a.BeginCapture(tok); err != nil {
		t.Fatal(err)
	}
	if err := b.Cleanup(ctx); !errors.Is(err, ErrRecording) {
		t.Fatalf("cleanup while recording: %v", err)
	}
	if err := d.Cleanup(ctx); !errors.Is(err, ErrRecording) {
		t.Fatalf("device cleanup while recording: %v", err)
	}
	if err := a.Synchronize(ctx); !errors.Is(err, ErrRecording) {
		t.Fatalf("synchronize on the recording stream: %v", err)
	}
	if _, err := a.EndCapture(tok); err == nil {
		t.Fatal("a recording doomed by Synchronize sealed")
	}
	if err := d.Cleanup(ctx); err != nil {
		t.Fatalf("cleanup after the window closed: %v", err)
	}
}

func TestPrepareCaptureRelocatesEveryStream(t *testing.T) {
	ctx := context.Background()
	d := openHost(t, WithMemoryConfig(memory.Config{}))
	a := d.DefaultStream()
	b, _ := d.NewStream()
	keep := mustAlloc(t, b, 1<<20)
	pattern := bytes.Repeat([]byte{7}, 1<<20)
	if err := keep.Write(ctx, pattern); err != nil {
		t.Fatal(err)
	}
	big := mustAlloc(t, b, 10<<20) // growth: keep's page is outdated
	if !b.mem.HasOutdated() {
		t.Fatal("no outdated page after growth")
	}
	tok, err := a.PrepareCapture()
	if err != nil {
		t.Fatal(err)
	}
	if b.mem.HasOutdated() {
		t.Fatal("prepare left stream B's outdated pages")
	}
	if err := a.AbortCapture(tok); err != nil {
		t.Fatal(err)
	}
	got, err := keep.Read(ctx)
	if err != nil || !bytes.Equal(got, pattern) {
		t.Fatalf("bytes lost across capture relocation: %v", err)
	}
	_ = big.Free()
}
