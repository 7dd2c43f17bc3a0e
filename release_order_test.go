package gpumem

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// deallocCounter counts the deallocations that reach the storage.
type deallocCounter struct {
	storage.Storage
	n *atomic.Int64
}

func (c *deallocCounter) Dealloc(id storage.ID) {
	c.n.Add(1)
	c.Storage.Dealloc(id)
}

// A page stays with the storage until the ops queued on its stream before
// the free have run: freed slices are reused in stream order, but a page
// given back follows no order. The queued op records how many deallocations
// had reached the storage when it ran.
func TestPageOfAFreedBufferIsNotGivenBackUnderItsQueuedOps(t *testing.T) {
	for _, path := range []string{"explicit cleanup", "periodic dedicated release"} {
		t.Run(path, func(t *testing.T) {
			var deallocs atomic.Int64
			d := openHost(t, WithStorageWrapper(func(s storage.Storage) storage.Storage {
				return &deallocCounter{Storage: s, n: &deallocs}
			}))
			s := d.DefaultStream()
			var b Buffer
			if path == "periodic dedicated release" {
				done := s.Window(Dedicated)
				b = mustAlloc(t, s, 4*mib)
				done()
			} else {
				b = mustAlloc(t, s, 4*mib)
			}
			gate := make(chan struct{})
			if err := s.Enqueue("block", nil, func([]storage.Resource) error { <-gate; return nil }); err != nil {
				t.Fatal(err)
			}
			var seen int64 = -1
			err := s.Enqueue("use", []Use{{Buffer: b, Access: Write}}, func(r []storage.Resource) error {
				seen = deallocs.Load()
				clear(r[0].Bytes)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			mustFree(t, b)
			finished := make(chan error, 1)
			go func() {
				if path == "periodic dedicated release" {
					x, err := s.Alloc(context.Background(), 64) // a periodic cleanup runs first
					if err == nil {
						err = x.Free()
					}
					finished <- err
					return
				}
				finished <- d.Cleanup(context.Background())
			}()
			close(gate)
			if err := <-finished; err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(context.Background()); err != nil {
				t.Fatal(err)
			}
			if seen != 0 {
				t.Fatalf("%d storage deallocations happened before an op queued ahead of them ran", seen)
			}
			mustCleanup(t, d)
			if deallocs.Load() == 0 {
				t.Fatal("the freed page never went back")
			}
		})
	}
}

// With granular host pages a page given back is unmapped: an op queued
// before the free must still find its bytes (no fault).
func TestGranularPageIsNotUnmappedUnderItsQueuedOps(t *testing.T) {
	d := openHost(t, WithPageGranular(true))
	s := d.DefaultStream()
	b := mustAlloc(t, s, 4*mib)
	gate := make(chan struct{})
	if err := s.Enqueue("block", nil, func([]storage.Resource) error { <-gate; return nil }); err != nil {
		t.Fatal(err)
	}
	err := s.Enqueue("use", []Use{{Buffer: b, Access: Write}}, func(r []storage.Resource) error {
		for i := range r[0].Bytes {
			r[0].Bytes[i] = 1
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mustFree(t, b)
	finished := make(chan error, 1)
	go func() { finished <- d.Cleanup(context.Background()) }()
	close(gate)
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// releasingBackend is the host backend with a Releaser that records how it
// was called.
type releasingBackend struct {
	hostBackend
	d        *Device
	releases int
	locked   bool // a Release found the device lock held
}

func (b *releasingBackend) Releasing() bool { return true }

func (b *releasingBackend) Release() {
	b.releases++
	if b.d.mu.TryLock() {
		b.d.mu.Unlock()
	} else {
		b.locked = true
	}
}

// An explicit cleanup that did its work ends with the backend's Release,
// called with the device lock released (design §9.7); a refused one does
// not call it.
func TestCleanupEndsWithTheBackendsReleaseWithoutTheLock(t *testing.T) {
	be := &releasingBackend{hostBackend: hostBackend{props: hostProperties(0)}}
	d, err := OpenBackend(be)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	be.d = d
	s := d.DefaultStream()
	mustFree(t, mustAlloc(t, s, 4096))
	if err := d.Cleanup(bg); err != nil {
		t.Fatal(err)
	}
	if err := s.Cleanup(bg); err != nil {
		t.Fatal(err)
	}
	if be.releases != 2 || be.locked {
		t.Fatalf("%d releases (locked: %v), want 2 without the device lock", be.releases, be.locked)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if err := d.Cleanup(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Cleanup with a cancelled context = %v", err)
	}
	if be.releases != 2 {
		t.Fatalf("a refused Cleanup released (%d releases)", be.releases)
	}
}
