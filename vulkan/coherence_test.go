package vulkan

import (
	"bytes"
	"context"
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
// wrote through it).
func TestNonCoherentMappingsAreFlushedAndInvalidated(t *testing.T) {
	for _, staging := range []bool{false, true} {
		be, err := NewBackend(Options{Validation: validationInstalled(), Staging: staging})
		if err != nil {
			testBackend(t) // skips or fails as the other tests do
			return
		}
		be.nonCoherent = true
		d, err := gpumem.OpenBackend(be)
		if err != nil {
			t.Fatal(err)
		}
		s := d.DefaultStream()
		ctx := context.Background()
		for _, n := range []int{1, 63, 65, 4097, 100003} {
			buf, err := s.Alloc(ctx, uint64(n))
			if err != nil {
				t.Fatal(err)
			}
			want := bytes.Repeat([]byte{byte(n)}, n)
			if err := buf.Write(ctx, want); err != nil {
				t.Fatal(err)
			}
			got, err := buf.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("staging %v, %d bytes: read back differs", staging, n)
			}
			// Map invalidates what it maps, Release flushes it.
			m, err := buf.Map(ctx)
			if err != nil {
				t.Fatalf("staging %v, %d bytes: Map: %v", staging, n, err)
			}
			if !bytes.Equal(m.Bytes(), want) {
				t.Fatalf("staging %v, %d bytes: the mapping differs from the bytes written", staging, n)
			}
			for i := range m.Bytes() {
				m.Bytes()[i] ^= 0xff
			}
			m.Release()
			got, err = buf.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				if got[i] != want[i]^0xff {
					t.Fatalf("staging %v, %d bytes: byte %d written through the mapping reads %#x, want %#x", staging, n, i, got[i], want[i]^0xff)
				}
			}
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		for _, m := range be.ValidationMessages() {
			t.Errorf("staging %v: validation: %s", staging, m)
		}
	}
}
