package gpumem

import (
	"bytes"
	"context"
	"testing"
)

// Shared fixtures of the root package's tests.

const (
	kib = uint64(1) << 10
	mib = uint64(1) << 20
)

var bg = context.Background()

// openHost opens a host device and closes it when the test ends.
func openHost(t testing.TB, opts ...Option) *Device {
	t.Helper()
	d, err := Open(opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// pattern returns n bytes that depend on seed and on their index, so a
// buffer holding another buffer's bytes, or shifted bytes, is caught.
func pattern(n uint64, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31+i>>8) ^ seed
	}
	return p
}

func mustAlloc(t testing.TB, s *Stream, size uint64) Buffer {
	t.Helper()
	b, err := s.Alloc(context.Background(), size)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", size, err)
	}
	return b
}

func mustWrite(t testing.TB, b Buffer, data []byte) {
	t.Helper()
	if err := b.Write(context.Background(), data); err != nil {
		t.Fatalf("Write buffer %d: %v", b.ID(), err)
	}
}

func mustFree(t testing.TB, b Buffer) {
	t.Helper()
	if err := b.Free(); err != nil {
		t.Fatalf("Free buffer %d: %v", b.ID(), err)
	}
}

func mustCleanup(t testing.TB, d *Device) {
	t.Helper()
	if err := d.Cleanup(context.Background()); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
}

// wantBytes reads b and fails the test unless it holds want.
func wantBytes(t testing.TB, b Buffer, want []byte) {
	t.Helper()
	got, err := b.Read(context.Background())
	if err != nil {
		t.Fatalf("Read buffer %d: %v", b.ID(), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("buffer %d: read %d bytes differing from the %d expected at byte %d", b.ID(), len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// outdatedPages sums, over every stream, the pages the arena's outdated
// pools hold.
func outdatedPages(d *Device) uint64 {
	var n uint64
	for _, s := range d.Report().Streams {
		for _, p := range s.Dynamic {
			if p.Kind == "adaptive" {
				n += p.OutdatedPages
			}
		}
	}
	return n
}

// arenaPageSize returns the current arena page size of stream i.
func arenaPageSize(d *Device, i int) uint64 {
	for _, p := range d.Report().Streams[i].Dynamic {
		if p.Kind == "adaptive" {
			return p.PageSize
		}
	}
	return 0
}
