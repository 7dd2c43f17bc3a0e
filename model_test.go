package gpumem

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpumem/gpumem/internal/memory"
	"github.com/gpumem/gpumem/storage"
)

// A rapid state machine against a reference model: random allocations,
// frees, writes (host writes and ops on any stream), reads, growth
// allocations and cleanups across 2–3 streams. The model is the live buffers
// and the bytes their writes left; every read must return the last write.

// modelBuf is one live buffer and what the model knows of its bytes: the
// first known bytes are data[:known] (writes always start at offset 0; a
// fresh buffer's bytes are unspecified).
type modelBuf struct {
	b     Buffer
	data  []byte
	known int
}

type deviceModel struct {
	d        *Device
	streams  []*Stream
	live     []*modelBuf
	capacity uint64
	maxPage  uint64
}

func (m *deviceModel) pick(t *rapid.T, label string) *modelBuf {
	return m.live[rapid.IntRange(0, len(m.live)-1).Draw(t, label)]
}

func (m *deviceModel) alloc(t *rapid.T, size uint64) {
	s := m.streams[rapid.IntRange(0, len(m.streams)-1).Draw(t, "stream")]
	b, err := s.Alloc(context.Background(), size)
	if errors.Is(err, ErrOutOfMemory) {
		return // the capacity is deliberately tight: allowed, nothing changes
	}
	if err != nil {
		t.Fatalf("Alloc(%d) on %s: %v", size, s.name, err)
	}
	if b.Size() != size {
		t.Fatalf("Alloc(%d) returned a buffer of %d bytes", size, b.Size())
	}
	m.live = append(m.live, &modelBuf{b: b, data: make([]byte, size)})
}

func (m *deviceModel) verify(t *rapid.T, mb *modelBuf) {
	got, err := mb.b.Read(context.Background())
	if err != nil {
		t.Fatalf("Read buffer %d: %v", mb.b.ID(), err)
	}
	if uint64(len(got)) != mb.b.Size() {
		t.Fatalf("Read buffer %d: %d bytes, want %d", mb.b.ID(), len(got), mb.b.Size())
	}
	if !bytes.Equal(got[:mb.known], mb.data[:mb.known]) {
		t.Fatalf("Read buffer %d differs from its last write at byte %d", mb.b.ID(), firstDiff(got[:mb.known], mb.data[:mb.known]))
	}
}

// checkNoNeedlessOutdated: right after Device.Cleanup, a stream may keep
// outdated pages only while one of its live buffers sits on one (it could
// not be moved for lack of room); otherwise none remains.
func (m *deviceModel) checkNoNeedlessOutdated(t *rapid.T) {
	rep := m.d.Report()
	for i, s := range m.streams {
		if streamOutdated(m.d, i) == 0 {
			continue
		}
		m.d.mu.Lock()
		current := s.mem.Dynamic().(*memory.AdaptiveMemory).Arena().Current().Index()
		m.d.mu.Unlock()
		stranded := false
		for _, mb := range m.live {
			if mb.b.s != s {
				continue
			}
			p := mb.b.h.Location().Pool()
			if p >= 2 && p <= 65 && p != current {
				stranded = true
			}
		}
		if !stranded {
			t.Fatalf("%s keeps %d outdated pages after Device.Cleanup with no live buffer on them\n%s", s.name, streamOutdated(m.d, i), rep)
		}
	}
}

func TestModelEveryReadReturnsTheLastWriteAcrossGrowthAndRelocation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		align := rapid.SampledFrom([]uint64{32, 50, 256}).Draw(t, "alignment")
		m := &deviceModel{capacity: 24 * mib, maxPage: 4 * mib}
		d, err := Open(
			WithProperties(Properties{MaxPageSize: m.maxPage, Alignment: align, MaxMemory: m.capacity}),
			WithCapacity(m.capacity))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer d.Close()
		m.d = d
		m.streams = []*Stream{d.DefaultStream()}
		for n := rapid.IntRange(2, 3).Draw(t, "streams"); len(m.streams) < n; {
			s, err := d.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			m.streams = append(m.streams, s)
		}
		ctx := context.Background()

		t.Repeat(map[string]func(*rapid.T){
			"alloc": func(t *rapid.T) {
				size := rapid.OneOf(
					rapid.Just(uint64(0)),
					rapid.Uint64Range(1, 64*kib),
					rapid.Uint64Range(64*kib+1, 1*mib),
				).Draw(t, "size")
				m.alloc(t, size)
			},
			"grow": func(t *rapid.T) {
				// Larger than the floor page: the arena grows when it does
				// not fit the current page size.
				m.alloc(t, rapid.Uint64Range(1*mib+mib/2, 3*mib+mib/2).Draw(t, "size"))
			},
			"free": func(t *rapid.T) {
				if len(m.live) == 0 {
					t.Skip("nothing live")
				}
				i := rapid.IntRange(0, len(m.live)-1).Draw(t, "buffer")
				if err := m.live[i].b.Free(); err != nil {
					t.Fatalf("Free: %v", err)
				}
				if err := m.live[i].b.Free(); !errors.Is(err, ErrAlreadyFreed) {
					t.Fatalf("second Free = %v, want ErrAlreadyFreed", err)
				}
				m.live = append(m.live[:i], m.live[i+1:]...)
			},
			"write": func(t *rapid.T) {
				if len(m.live) == 0 {
					t.Skip("nothing live")
				}
				mb := m.pick(t, "buffer")
				n := rapid.IntRange(0, len(mb.data)).Draw(t, "length")
				data := pattern(uint64(n), rapid.Byte().Draw(t, "seed"))
				if err := mb.b.Write(ctx, data); err != nil {
					t.Fatalf("Write: %v", err)
				}
				copy(mb.data, data)
				mb.known = max(mb.known, n)
			},
			"write on any stream": func(t *rapid.T) {
				if len(m.live) == 0 {
					t.Skip("nothing live")
				}
				mb := m.pick(t, "buffer")
				s := m.streams[rapid.IntRange(0, len(m.streams)-1).Draw(t, "stream")]
				data := pattern(mb.b.Size(), rapid.Byte().Draw(t, "seed"))
				err := s.Enqueue("fill", []Use{{Buffer: mb.b, Access: Write}}, func(res []storage.Resource) error {
					copy(res[0].Bytes, data)
					return nil
				})
				if err != nil {
					t.Fatalf("Enqueue on %s: %v", s.name, err)
				}
				copy(mb.data, data)
				mb.known = len(data)
			},
			"read": func(t *rapid.T) {
				if len(m.live) == 0 {
					t.Skip("nothing live")
				}
				m.verify(t, m.pick(t, "buffer"))
			},
			"stream cleanup": func(t *rapid.T) {
				s := m.streams[rapid.IntRange(0, len(m.streams)-1).Draw(t, "stream")]
				if err := s.Cleanup(ctx); err != nil {
					t.Fatalf("Stream.Cleanup: %v", err)
				}
			},
			"device cleanup": func(t *rapid.T) {
				if err := d.Cleanup(ctx); err != nil {
					t.Fatalf("Device.Cleanup: %v", err)
				}
				m.checkNoNeedlessOutdated(t)
				var want uint64
				for _, mb := range m.live {
					want += mb.b.Size()
				}
				if got := d.Stats().BytesInUse; got != want {
					t.Fatalf("BytesInUse after Device.Cleanup = %d, want %d (the live buffers' sizes)", got, want)
				}
				for _, mb := range m.live {
					m.verify(t, mb)
				}
			},
			"": func(t *rapid.T) {
				st := d.Stats()
				if st.BytesAllocated > m.capacity {
					t.Fatalf("BytesAllocated %d above the capacity %d", st.BytesAllocated, m.capacity)
				}
				var live uint64
				for _, mb := range m.live {
					live += mb.b.Size()
				}
				if st.BytesInUse < live {
					t.Fatalf("BytesInUse %d below the live buffers' %d", st.BytesInUse, live)
				}
				d.mu.Lock()
				defer d.mu.Unlock()
				for _, s := range m.streams {
					func() {
						defer func() {
							if r := recover(); r != nil {
								t.Fatalf("%s: arena invariant broken: %v", s.name, r)
							}
						}()
						s.mem.Dynamic().(*memory.AdaptiveMemory).Arena().Check()
					}()
				}
			},
		})
		for _, mb := range m.live {
			m.verify(t, mb)
		}
	})
}
