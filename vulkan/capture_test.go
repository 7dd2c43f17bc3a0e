package vulkan_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/stream"
	"github.com/gpumem/gpumem/vulkan"
)

// A captured sequence (a write and two dispatches) is one recorded command
// buffer: every launch runs it again, after a relocation too.
func TestCapturedCommandBufferReplaysOnEveryLaunch(t *testing.T) {
	for _, staging := range []bool{false, true} {
		name := map[bool]string{false: "mapped", true: "staging"}[staging]
		t.Run(name, func(t *testing.T) {
			d, b := openDevice(t, vulkan.Options{Staging: staging})
			add := mustKernel(t, b, vulkan.KernelAddU32)
			s := d.DefaultStream()
			acc := mustAlloc(t, s, 64*kib)
			in := mustAlloc(t, s, 4*kib)
			zero := make([]byte, 64*kib)
			mustWrite(t, acc, zero)
			seed := pattern(4*kib, 3)
			g, err := s.Capture(context.Background(), func(_ context.Context, s *gpumem.Stream) error {
				if err := in.Write(context.Background(), seed); err != nil {
					return err
				}
				addOnDevice(t, add, s, in, 1)
				addOnDevice(t, add, s, acc, 2)
				return nil
			})
			if err != nil {
				t.Fatalf("Capture: %v", err)
			}
			if g.Ops() != 3 {
				t.Fatalf("graph of %d ops, want 3", g.Ops())
			}
			// Grow and relocate around the guarded pages.
			large := mustAlloc(t, s, 40*mib)
			if err := large.Free(); err != nil {
				t.Fatal(err)
			}
			if err := d.Cleanup(context.Background()); err != nil {
				t.Fatal(err)
			}
			const launches = 25
			for range launches {
				if err := g.Launch(context.Background()); err != nil {
					t.Fatalf("Launch: %v", err)
				}
			}
			wantBytes(t, acc, plusU32(zero, 2*(launches+1))) // the warmup ran once
			wantBytes(t, in, plusU32(seed, 1))               // rewritten, then added to, each time
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			if err := g.Launch(context.Background()); err == nil {
				t.Fatal("a closed graph launched")
			}
		})
	}
}

// What a recorded command buffer cannot hold invalidates the capture: a
// wait for another stream's unfinished work, a failed op.
func TestCaptureRefusesWhatACommandBufferCannotHold(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	add := mustKernel(t, b, vulkan.KernelAddU32)
	s := d.DefaultStream()
	buf := mustAlloc(t, s, 4*kib)
	mustWrite(t, buf, make([]byte, 4*kib))
	boom := errors.New("boom")
	_, err := s.Capture(context.Background(), func(_ context.Context, s *gpumem.Stream) error {
		addOnDevice(t, add, s, buf, 1)
		return vulkan.Enqueue(s, "fails", nil, func(op *vulkan.Op) error { return boom })
	})
	if !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("a capture with a failing op = %v, want ErrCaptureInvalidated", err)
	}
	q := s.Queue().(stream.Recorder)
	if q.Recording() {
		t.Fatal("still recording after the failed capture")
	}
	// What the doomed capture declared written reads as unwritten, and the
	// stream works on: a fresh write and a dispatch read back.
	if _, err := buf.Read(context.Background()); !errors.Is(err, gpumem.ErrUnwritten) {
		t.Fatalf("Read after a doomed capture = %v, want ErrUnwritten", err)
	}
	mustWrite(t, buf, make([]byte, 4*kib))
	addOnDevice(t, add, s, buf, 3)
	wantBytes(t, buf, plusU32(make([]byte, 4*kib), 3))
}

// At the queue: a host wait on a recording queue, and a graph launched
// inside a capture, invalidate the recording; the sealed graph of a clean
// recording replays.
func TestRecordingQueueRefusesHostWaitsAndNestedLaunches(t *testing.T) {
	q := newRecorderQueue(t)
	noop := stream.Op{Name: "noop", Run: func() error { return nil }}
	if err := q.BeginCapture(1); err != nil {
		t.Fatal(err)
	}
	if seq, err := q.Enqueue(noop); err != nil || seq != 0 {
		t.Fatalf("recorded Enqueue = %d, %v; want 0, nil", seq, err)
	}
	g, err := q.EndCapture(1, nil)
	if err != nil || g.Len() != 1 {
		t.Fatalf("EndCapture = %v, %v", g, err)
	}
	if err := q.Replay(g); err != nil {
		t.Fatal(err)
	}
	f, _ := q.Fence()
	if err := q.Wait(context.Background(), f); err != nil {
		t.Fatal(err)
	}

	if err := q.BeginCapture(2); err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(context.Background(), f); !errors.Is(err, stream.ErrCaptureUnsupported) {
		t.Fatalf("host wait while recording = %v, want ErrCaptureUnsupported", err)
	}
	if _, err := q.EndCapture(2, nil); !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("EndCapture after a host wait = %v, want ErrCaptureInvalidated", err)
	}

	if err := q.BeginCapture(3); err != nil {
		t.Fatal(err)
	}
	if err := q.Replay(g); !errors.Is(err, vulkan.ErrUnsupported) {
		t.Fatalf("a launch inside a capture = %v, want ErrUnsupported", err)
	}
	if _, err := q.EndCapture(3, nil); !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Fatalf("EndCapture after a nested launch = %v, want ErrCaptureInvalidated", err)
	}
	if _, err := q.EndCapture(3, nil); !errors.Is(err, stream.ErrCaptureState) {
		t.Fatalf("EndCapture with nothing recording = %v, want ErrCaptureState", err)
	}
	if err := g.(interface{ Close() error }).Close(); err != nil {
		t.Fatal(err)
	}
}

// A recording queue asked to wait on another backend's incomplete fence
// refuses, as cuda does: the wait would be a host wait the recorded graph
// does not repeat, so the recording is invalidated, never left to replay
// without it.
func TestRecordingQueueRefusesAForeignQueuesIncompleteFence(t *testing.T) {
	q := newRecorderQueue(t)
	host := hostqueue.NewHost()
	defer host.Close()
	release := make(chan struct{})
	if _, err := host.Enqueue(stream.Op{Name: "held", Run: func() error { <-release; return nil }}); err != nil {
		t.Fatal(err)
	}
	f, err := host.Fence()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.BeginCapture(1); err != nil {
		t.Fatal(err)
	}
	// A wait that blocks on the held step instead of refusing would hang:
	// a generous timeout turns that into a failure.
	waited := make(chan error, 1)
	go func() { waited <- q.WaitFence(f) }()
	select {
	case err := <-waited:
		if !errors.Is(err, stream.ErrCaptureCrossStream) {
			t.Errorf("WaitFence on a host queue's incomplete step while recording = %v, want ErrCaptureCrossStream", err)
		}
		close(release)
	case <-time.After(time.Minute):
		close(release)
		<-waited
		t.Fatal("WaitFence on a host queue's incomplete step while recording waited for it instead of refusing")
	}
	if _, err := q.EndCapture(1, nil); !errors.Is(err, stream.ErrCaptureInvalidated) {
		t.Errorf("EndCapture after a refused foreign wait = %v, want ErrCaptureInvalidated", err)
	}
	if err := host.Wait(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	if err := q.WaitFence(f); err != nil {
		t.Errorf("WaitFence on the host queue's completed step, not recording = %v", err)
	}
}

// newRecorderQueue opens a backend and returns its first queue as a
// stream.Recorder, closed when the test ends (before the backend).
func newRecorderQueue(t *testing.T) stream.Recorder {
	t.Helper()
	b := openBackend(t, vulkan.Options{})
	sq, err := b.NewQueue(0)
	if err != nil {
		t.Fatal(err)
	}
	q := sq.(stream.Recorder)
	t.Cleanup(func() { q.Close() })
	return q
}
