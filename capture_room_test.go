package gpumem

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// R7 (reliability-2026-12-b): a capture's rehearsal succeeded and its
// recording then found no held room for its scratch allocation, on granular
// storage, while other goroutines worked. The window: BeginCapture
// rehearses and lets go of the room with the device lock held, and the
// recording's allocations take the lock again one by one; in between,
// another goroutine's graph sealed over a buffer on the same page (the
// shadow model's captures use buffers of another stream's memory), and a
// guarded page serves nothing new. Granular storage made it likely: there
// one arena page and one small page hold everything a stream allocates, so
// the other graph's buffer and the recording's room share a page.
//
// Scripted here: the capture function's recording pass lets another
// goroutine capture a graph over a buffer on the recording stream's page
// and try what else it may (a cleanup, a defragmentation, allocations on
// its own stream), either before the recording's first allocation or
// between a recorded free and the allocation that reuses its room. The
// rehearsal's room is held for the recording (memory.RecordingRoom), so it
// seals, and its graph replays.
func TestRecordingKeepsItsRehearsedRoomWhateverAnotherGoroutineDoes(t *testing.T) {
	for _, granular := range []bool{false, true} {
		for _, when := range []string{"before the first allocation", "between a recorded free and the next allocation"} {
			d := openHost(t, WithPageGranular(granular))
			s := d.DefaultStream()
			o, err := d.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			x := mustAlloc(t, s, 1000) // on s's small page, as the scratch will be
			mustWrite(t, x, pattern(1000, 3))
			out := mustAlloc(t, s, 4096)
			if err := s.Synchronize(bg); err != nil {
				t.Fatal(err)
			}
			// meanwhile is another goroutine's work between the
			// rehearsal and an allocation of the recording.
			var others []string
			meanwhile := func() {
				done := make(chan struct{})
				go func() {
					defer close(done)
					g, err := o.Capture(bg, func(ctx context.Context, o *Stream) error {
						return o.Enqueue("read-x", []Use{{Buffer: x, Access: Read}}, func([]storage.Resource) error { return nil })
					})
					if err != nil {
						others = append(others, "capture over x: "+err.Error())
						return
					}
					t.Cleanup(func() { _ = g.Close() })
					if err := d.Cleanup(bg); !errors.Is(err, ErrRecording) {
						others = append(others, "Cleanup while recording: want ErrRecording")
					}
					if _, err := d.Defragment(bg, DefragOptions{}); !errors.Is(err, ErrRecording) {
						others = append(others, "Defragment while recording: want ErrRecording")
					}
					for range 4 {
						if _, err := o.Alloc(bg, 3*mib); err != nil {
							others = append(others, "allocation on another stream: "+err.Error())
						}
					}
				}()
				<-done
			}
			calls := 0
			g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
				calls++
				recording := calls == 2
				if recording && when == "before the first allocation" {
					meanwhile()
				}
				tmp, err := s.Alloc(ctx, 31125)
				if err != nil {
					return err
				}
				if err := s.Enqueue("scratch", []Use{{Buffer: tmp, Access: Write}, {Buffer: out, Access: Write}},
					func(res []storage.Resource) error { copy(res[1].Bytes, pattern(4096, 7)); return nil }); err != nil {
					return err
				}
				if err := tmp.Free(); err != nil {
					return err
				}
				if recording && when != "before the first allocation" {
					meanwhile()
				}
				tmp2, err := s.Alloc(ctx, 31125) // the recording reuses tmp's room
				if err != nil {
					return err
				}
				if err := s.Enqueue("scratch2", []Use{{Buffer: tmp2, Access: Write}}, func([]storage.Resource) error { return nil }); err != nil {
					return err
				}
				return tmp2.Free()
			})
			if len(others) > 0 {
				t.Fatalf("granular=%v, %s: the other goroutine: %v", granular, when, others)
			}
			if err != nil {
				t.Errorf("granular=%v, another graph sealed %s: %v", granular, when, err)
				continue
			}
			if st := d.Stats(); st.Captures.Reused != 2 {
				t.Fatalf("granular=%v, %s: %d recorded buffers' room went back to the recording, want 2 (tmp's, which tmp2 took, and tmp2's)", granular, when, st.Captures.Reused)
			}
			mustWrite(t, out, pattern(4096, 0))
			if err := g.Launch(bg); err != nil {
				t.Fatal(err)
			}
			wantBytes(t, out, pattern(4096, 7))
			wantBytes(t, x, pattern(1000, 3))
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			// What the recording held is released with the graph.
			if st := d.Stats(); st.BytesPendingFree != 0 {
				t.Fatalf("granular=%v, %s: %d bytes pending free once the graph closed, want 0", granular, when, st.BytesPendingFree)
			}
		}
	}
}

// A recording that strays from its warmup says which of its allocations
// found no room and why, beside the remedy.
func TestRecordingThatStraysFromItsRehearsalSaysWhichAllocationAndWhy(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	calls := 0
	_, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		calls++
		b, err := s.Alloc(ctx, 1<<20)
		if err != nil {
			return err
		}
		size := uint64(1 << 20)
		if calls == 2 {
			size = 3 << 20 // the recording asks more than its warmup did
		}
		c, err := s.Alloc(ctx, size)
		if err != nil {
			return errors.Join(err, b.Free())
		}
		return errors.Join(c.Free(), b.Free())
	})
	if !errors.Is(err, ErrPageUpdateForbidden) ||
		!strings.Contains(err.Error(), "the recording's allocation 2 asks 3145728 bytes where its warmup's asked 1048576") ||
		!strings.Contains(err.Error(), "warm up with the same allocations and frees") {
		t.Fatalf("capture = %v; want ErrPageUpdateForbidden naming allocation 2, its size and the warmup's, and the remedy", err)
	}
	if st := d.Stats(); st.BytesPendingFree != 0 || st.GuardedPages != 0 {
		t.Fatalf("after the doomed capture: %d bytes pending free, %d guarded pages; want nothing held", st.BytesPendingFree, st.GuardedPages)
	}
}
