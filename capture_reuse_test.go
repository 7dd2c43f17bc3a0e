package gpumem

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// fill is an op writing seed's pattern over all of b.
func fill(s *Stream, b Buffer, seed byte) error {
	return s.Enqueue("fill", []Use{{Buffer: b, Access: Write}}, func(res []storage.Resource) error {
		copy(res[0].Bytes, pattern(uint64(len(res[0].Bytes)), seed))
		return nil
	})
}

// copyInto is an op copying src into dst.
func copyInto(s *Stream, dst, src Buffer) error {
	return s.Enqueue("copy", []Use{{Buffer: dst, Access: Write}, {Buffer: src, Access: Read}}, func(res []storage.Resource) error {
		copy(res[0].Bytes, res[1].Bytes)
		return nil
	})
}

// temporary allocates n bytes on s, fills them (an op writing seed's
// pattern) and frees them: in a recording, room that goes back to it.
func temporary(ctx context.Context, s *Stream, n uint64, seed byte) error {
	tmp, err := s.Alloc(ctx, n)
	if err != nil {
		return err
	}
	if err := fill(s, tmp, seed); err != nil {
		return err
	}
	return tmp.Free()
}

// Two temporaries of a recording, alive one after the other, share one
// slice, and every launch still computes what the recorded ops say: the
// first temporary's uses all run before the second's.
func TestRecordingReusesAFreedTemporaryAndEveryLaunchKeepsItsResults(t *testing.T) {
	const n = 1 << 20
	d := openHost(t)
	s := d.DefaultStream()
	out1, out2 := mustAlloc(t, s, n), mustAlloc(t, s, n)
	step := func(ctx context.Context, s *Stream) error {
		for i, out := range []Buffer{out1, out2} {
			tmp, err := s.Alloc(ctx, n)
			if err != nil {
				return err
			}
			if err := fill(s, tmp, byte(7+i)); err != nil {
				return err
			}
			if err := copyInto(s, out, tmp); err != nil {
				return err
			}
			if err := tmp.Free(); err != nil {
				return err
			}
		}
		return nil
	}
	g, err := s.Capture(bg, step)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if st := d.Stats(); st.Captures.Reused != 2 {
		t.Fatalf("reused %d temporaries, want 2", st.Captures.Reused)
	}
	for range 3 {
		mustWrite(t, out1, pattern(n, 1))
		mustWrite(t, out2, pattern(n, 2))
		if err := g.Launch(bg); err != nil {
			t.Fatal(err)
		}
		wantBytes(t, out1, pattern(n, 7))
		wantBytes(t, out2, pattern(n, 8))
	}
}

// Room a recorded temporary gave back stays the graph's: the seal holds it
// (a bound slice of its own), so a buffer allocated after the seal keeps
// its bytes across launches, which write that room; the rest of the page
// is not guarded and serves that buffer.
func TestReturnedRoomIsHeldSoLaterBuffersSurviveLaunches(t *testing.T) {
	const n = 1 << 20
	d := openHost(t)
	s := d.DefaultStream()
	var room handle.Location
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		tmp, err := s.Alloc(ctx, n)
		if err != nil {
			return err
		}
		if err := fill(s, tmp, 5); err != nil {
			return err
		}
		room = tmp.h.Location()
		return tmp.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := d.Stats(); st.Captures.Reused != 1 || st.GuardedPages != 0 {
		t.Fatalf("reused %d, guarded pages %d: want 1 and 0 (the room held, not its page)", st.Captures.Reused, st.GuardedPages)
	}
	later := mustAlloc(t, s, n)
	if loc := later.h.Location(); loc.Pool() != room.Pool() || loc.Page() != room.Page() || loc == room {
		t.Fatalf("later buffer at %v, the held room at %v: want the same page, another slice", loc, room)
	}
	mustWrite(t, later, pattern(n, 9))
	for range 2 {
		if err := g.Launch(bg); err != nil {
			t.Fatal(err)
		}
	}
	wantBytes(t, later, pattern(n, 9))
	// Closed, the graph lets go of the room: with the buffer freed too, a
	// cleanup gives every page back.
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	mustFree(t, later)
	mustCleanup(t, d)
	if got := d.BytesAllocated(); got != 0 {
		t.Fatalf("%d bytes still allocated after the close, the free and a cleanup: the held room leaked", got)
	}
}

// A buffer allocated while recording on room an earlier temporary used, and
// still live at the seal, is overwritten at each launch wherever no
// recorded op of its own writes: a recorded read of those bytes refuses the
// seal, and bytes no recorded op touches read as ErrGraphScratch after a
// launch instead of as the temporary's.
func TestLiveBufferOnReturnedRoom(t *testing.T) {
	const n = 1 << 20
	record := func(t *testing.T, use func(s *Stream, y Buffer) error) (*Device, Buffer, *Graph, error) {
		t.Helper()
		d := openHost(t)
		s := d.DefaultStream()
		var y Buffer
		g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
			err := temporary(ctx, s, n, 5)
			if err != nil {
				return err
			}
			if y, err = s.Alloc(ctx, n); err != nil {
				return err
			}
			return use(s, y)
		})
		return d, y, g, err
	}
	t.Run("read before written refuses the seal", func(t *testing.T) {
		out := Buffer{}
		d, _, g, err := record(t, func(s *Stream, y Buffer) error {
			if out.IsZero() {
				out, _ = s.Alloc(bg, n) // the warmup's: before the recording
			}
			return copyInto(s, out, y)
		})
		if g != nil {
			g.Close()
			t.Fatal("sealed a graph whose op reads bytes the launch overwrites first")
		}
		if !errors.Is(err, ErrCaptureInvalidated) || !strings.Contains(err.Error(), "allocate the buffer before the capture") {
			t.Fatalf("capture: %v, want ErrCaptureInvalidated naming the fix", err)
		}
		if st := d.Stats(); st.Captures.Doomed != 1 || st.GuardedPages != 0 {
			t.Fatalf("doomed %d, guarded pages %d: want 1, 0", st.Captures.Doomed, st.GuardedPages)
		}
	})
	t.Run("bytes no op writes read as scratch", func(t *testing.T) {
		_, y, g, err := record(t, func(s *Stream, y Buffer) error {
			return s.Enqueue("half", []Use{{Buffer: y, Access: Write, Size: n / 2}}, func(res []storage.Resource) error {
				copy(res[0].Bytes, pattern(n/2, 3))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		mustWrite(t, y, pattern(n, 1))
		wantBytes(t, y, pattern(n, 1))
		if err := g.Launch(bg); err != nil {
			t.Fatal(err)
		}
		if _, err := y.Read(bg); !errors.Is(err, ErrUnwritten) || !errors.Is(err, ErrGraphScratch) {
			t.Fatalf("read after a launch: %v, want ErrUnwritten wrapping ErrGraphScratch", err)
		}
		mustWrite(t, y, pattern(n, 4)) // a write replaces the marks
		wantBytes(t, y, pattern(n, 4))
	})
	t.Run("bytes an op writes first are the graph's output", func(t *testing.T) {
		_, y, g, err := record(t, func(s *Stream, y Buffer) error { return fill(s, y, 6) })
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if err := g.Launch(bg); err != nil {
			t.Fatal(err)
		}
		wantBytes(t, y, pattern(n, 6))
	})
}

// A recorded buffer something else still refers to when freed (here a
// clone) keeps its slice until the seal, as before reuse existed.
func TestRecordedBufferWithAnotherReferenceIsNotReused(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	var clones []Buffer
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		tmp, err := s.Alloc(ctx, 1<<20)
		if err != nil {
			return err
		}
		if err := fill(s, tmp, 5); err != nil {
			return err
		}
		clones = append(clones, tmp.Clone())
		return tmp.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if st := d.Stats(); st.Captures.Reused != 0 {
		t.Fatalf("reused %d buffers, want 0: a clone still refers to it", st.Captures.Reused)
	}
	for _, c := range clones {
		mustFree(t, c)
	}
}

// A recorded buffer cloned, its original freed and the clone still live at
// the seal: the seal takes its binding through the slice, not through the
// freed reference (found by review: it panicked).
func TestCloneOfARecordedBufferLiveAtTheSealOnReturnedRoom(t *testing.T) {
	const n = 1 << 20
	d := openHost(t)
	s := d.DefaultStream()
	var keep Buffer
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		if err := temporary(ctx, s, n, 5); err != nil {
			return err
		}
		y, err := s.Alloc(ctx, n)
		if err != nil {
			return err
		}
		if err := fill(s, y, 6); err != nil {
			return err
		}
		c := y.Clone()
		if !keep.IsZero() {
			if err := keep.Free(); err != nil { // the warmup's clone
				return err
			}
		}
		keep = c
		return y.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	wantBytes(t, keep, pattern(n, 6))
	desc := keep.h.Descriptor()
	mustFree(t, keep)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := desc.Refs(); got != 1 {
		t.Fatalf("after the clone's free and the graph's close: refs %d, want 1 (the slice only)", got)
	}
	_ = d
}

// A seal refused for one live buffer on returned room releases the
// bindings it took of the others checked before it (found by review: a
// leaked binding kept the slice forever).
func TestRefusedSealReleasesTheOverlapBindingsItTook(t *testing.T) {
	const n = 1 << 20
	d := openHost(t)
	s := d.DefaultStream()
	out := mustAlloc(t, s, n)
	var y1, y2 Buffer
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		var ts [2]Buffer
		for i := range ts {
			var err error
			if ts[i], err = s.Alloc(ctx, n); err != nil {
				return err
			}
			if err := fill(s, ts[i], byte(i)); err != nil {
				return err
			}
		}
		for _, t := range ts {
			if err := t.Free(); err != nil {
				return err
			}
		}
		var err error
		if y1, err = s.Alloc(ctx, n); err != nil {
			return err
		}
		if y2, err = s.Alloc(ctx, n); err != nil {
			return err
		}
		if err := fill(s, y1, 3); err != nil {
			return err
		}
		return copyInto(s, out, y2) // y2 read before anything writes it
	})
	if g != nil || !errors.Is(err, ErrCaptureInvalidated) {
		t.Fatalf("capture: graph %v, %v; want the seal refused", g, err)
	}
	d1, d2 := y1.h.Descriptor(), y2.h.Descriptor()
	mustFree(t, y1)
	mustFree(t, y2)
	if d1.Refs() != 1 || d2.Refs() != 1 {
		t.Fatalf("after both frees: refs %d and %d, want 1 and 1 (the slices only)", d1.Refs(), d2.Refs())
	}
	_ = d
}

// A replayed op that fails writing a recorded buffer whose room went back
// marks nothing through its stale descriptor (found by review: it marked
// the free slice, and the failure outlived the graph).
func TestFailedReplayedOpMarksNothingOnReturnedRoom(t *testing.T) {
	const n = 1 << 20
	d := openHost(t)
	s := d.DefaultStream()
	// The warmup's op may still run on the stream when the launch is
	// armed: atomic.
	var fail atomic.Bool
	g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
		tmp, err := s.Alloc(ctx, n)
		if err != nil {
			return err
		}
		if err := s.Enqueue("maybe-fail", []Use{{Buffer: tmp, Access: Write}}, func([]storage.Resource) error {
			if fail.Load() {
				return errors.New("injected")
			}
			return nil
		}); err != nil {
			return err
		}
		return tmp.Free()
	})
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := g.Launch(bg); err != nil {
		t.Fatal(err)
	}
	_ = s.Synchronize(bg)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.collectFailuresLocked()
	d.g.Prune()
	live := d.g.Live()
	d.mu.Unlock()
	if live != 0 {
		t.Fatalf("%d failure nodes still carried after the graph closed: a mark on a free slice", live)
	}
}

// A buffer the recording placed on returned room and freed while something
// else still bound it (a hold, another stream's use) was not returned, and
// nothing of the recording touched it; once that binding goes, its slice
// must still be the graph's, which writes there at every launch (found by
// review: a later buffer landed there and a launch overwrote it).
func TestTakenSliceOnReturnedRoomStaysTheGraphsAfterItsOwnerLetsGo(t *testing.T) {
	const n = 1 << 20
	for _, by := range []string{"hold", "another stream's use"} {
		t.Run(by, func(t *testing.T) {
			d := openHost(t)
			s := d.DefaultStream()
			s2, err := d.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			var release func()
			g, err := s.Capture(bg, func(ctx context.Context, s *Stream) error {
				if err := temporary(ctx, s, n, 5); err != nil {
					return err
				}
				c, err := s.Alloc(ctx, n) // on tmp's returned room
				if err != nil {
					return err
				}
				if s.capture.Recording() {
					if by == "hold" {
						if release, err = c.Hold(); err != nil {
							return err
						}
					} else if err := fill(s2, c, 3); err != nil {
						return err
					}
				}
				return c.Free() // not returned: something else binds it
			})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if release != nil {
				release()
			}
			if err := s2.Synchronize(bg); err != nil {
				t.Fatal(err)
			}
			later := mustAlloc(t, s, n)
			mustWrite(t, later, pattern(n, 9))
			if err := g.Launch(bg); err != nil {
				t.Fatal(err)
			}
			wantBytes(t, later, pattern(n, 9))
		})
	}
}
