package vulkan

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
)

func TestAtomRangeRoundsOutToTheAtomWithinTheAllocation(t *testing.T) {
	b := &Backend{dev: &device{info: DeviceInfo{Limits: Limits{NonCoherentAtomSize: 64}}}}
	a := &allocation{reserved: 1000}
	for _, c := range []struct{ off, n, wantOff, wantN uint64 }{
		{0, 1, 0, 64},
		{63, 2, 0, 128},
		{64, 64, 64, 64},
		{900, 100, 896, 104}, // clamped to the allocation's end (1000)
		{960, 10, 960, 40},
	} {
		o, n := b.atomRange(a, c.off, c.n)
		if o != c.wantOff || n != c.wantN {
			t.Errorf("atomRange(%d, %d) = [%d, +%d), want [%d, +%d)", c.off, c.n, o, n, c.wantOff, c.wantN)
		}
	}
}

// With every mapping treated as not coherent, Write and Read flush and
// invalidate rounded ranges (the validation layer checks each against
// nonCoherentAtomSize and the allocation), and the bytes still round-trip,
// on the mapped and the staging paths, at odd offsets and sizes; so do
// Map (which invalidates) and Mapping.Release (which flushes what the host
// wrote through it) where pages are host-visible. Where they are not (a
// discrete GPU, simulated here on lavapipe by the "unmapped" case), Write
// and Read go through staging buffers, whose flushes and invalidations are
// checked the same way, and Map is refused with gpumem.ErrNotSupported by
// design, so the "map" part skips, saying so.
func TestNonCoherentMappingsAreFlushedAndInvalidated(t *testing.T) {
	for _, c := range []struct {
		name              string
		staging, unmapped bool
	}{{"mapped", false, false}, {"staging", true, false}, {"unmapped", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			be, err := NewBackend(Options{Validation: validationInstalled(), Staging: c.staging})
			if err != nil {
				testBackend(t) // skips or fails as the other tests do
				return
			}
			be.nonCoherent = true
			if c.unmapped || discreteAsked() {
				simulateDiscrete(be)
			}
			d, err := gpumem.OpenBackend(be)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := d.Close(); err != nil {
					t.Error(err)
				}
				for _, m := range be.ValidationMessages() {
					t.Errorf("validation: %s", m)
				}
			}()
			s := d.DefaultStream()
			ctx := context.Background()
			sizes := []int{1, 63, 65, 4097, 100003}
			bufs := make([]gpumem.Buffer, len(sizes))
			for i, n := range sizes {
				buf, err := s.Alloc(ctx, uint64(n))
				if err != nil {
					t.Fatal(err)
				}
				bufs[i] = buf
				want := bytes.Repeat([]byte{byte(n)}, n)
				if err := buf.Write(ctx, want); err != nil {
					t.Fatal(err)
				}
				got, err := buf.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%d bytes: read back differs", n)
				}
			}
			if made, _, _, _ := be.stagingCounts(); (c.staging || !be.PagesHostVisible()) && made == 0 {
				t.Fatal("no staging buffer was made: the staging path's flushes were not exercised")
			}
			t.Run("map", func(t *testing.T) {
				if !be.PagesHostVisible() {
					if _, err := bufs[0].Map(ctx); !errors.Is(err, gpumem.ErrNotSupported) {
						t.Fatalf("Map where pages are not host-visible = %v, want gpumem.ErrNotSupported", err)
					}
					t.Skip("pages are not host-visible here: Map is not supported (the backend holds no host bytes), so its invalidation and Release's flush cannot be exercised")
				}
				for i, n := range sizes {
					buf := bufs[i]
					want := bytes.Repeat([]byte{byte(n)}, n)
					// Map invalidates what it maps, Release flushes it.
					m, err := buf.Map(ctx)
					if err != nil {
						t.Fatalf("%d bytes: Map: %v", n, err)
					}
					if !bytes.Equal(m.Bytes(), want) {
						t.Fatalf("%d bytes: the mapping differs from the bytes written", n)
					}
					for i := range m.Bytes() {
						m.Bytes()[i] ^= 0xff
					}
					m.Release()
					got, err := buf.Read(ctx)
					if err != nil {
						t.Fatal(err)
					}
					for i := range got {
						if got[i] != want[i]^0xff {
							t.Fatalf("%d bytes: byte %d written through the mapping reads %#x, want %#x", n, i, got[i], want[i]^0xff)
						}
					}
				}
			})
		})
	}
}
