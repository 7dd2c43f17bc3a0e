// Package backendtest is the conformance suite every gpumem.Backend passes,
// in the style of testing/fstest.TestFS: a backend's tests open devices on
// it and call TestBackend, which checks what the device relies on the
// backend for (design §9.6) through the device's public API, one sub-test
// per rule, every message naming the backend.
//
// The checks, by sub-test:
//
//   - accounting: Stats (BytesInUse, BytesPendingFree, BytesReserved,
//     BytesAllocated, the storage calls) agree with the buffers alive and
//     with the report after allocations, clones, frees and Cleanup, and
//     come back to zero (or to what Options.CachedBytes declares) once
//     everything is freed and cleaned up; the driver's own count, where
//     Options.DriverObjects reports it, too.
//   - bytes: Write and Read round trips of patterned data at sizes from 1
//     byte to several MiB and at the offsets inside pages their neighbours
//     leave, partial writes, and a freed buffer that never reads (or
//     writes) the bytes of the allocation that took its room.
//   - order: ops run in enqueue order on a stream; Synchronize waits for
//     them; fences advance; Writes apply in order; a failed op leaves what
//     it writes unwritten (ErrUnwritten) without failing Synchronize.
//   - cross-stream: a use on another stream runs after the owner's earlier
//     work (X1) and before the owner's later work (X2); a Read waits for
//     other streams' writes.
//   - capture (where the queues record graphs): Cleanup and Defragment are
//     refused while a stream records and nothing moves; a sealed graph's
//     pages stay put through growth and Cleanup, its launches see the
//     bytes there, and its pages move again once it is closed.
//   - out-of-memory: past WithCapacity an Alloc fails with an error
//     matching gpumem.ErrOutOfMemory, nothing already allocated is lost,
//     and freed room serves allocations again.
//   - relocation: live buffers on pages an arena growth outdated are
//     copied by Cleanup, while another stream has work queued, byte for
//     byte, and ops after the move use the new places.
//
// A check that needs what a backend cannot do says so in Options, never by
// silence: NoBytes (sim storage holds none), NoCapture, a nil Copy.
//
// # Owns
//
// The suite and its options; nothing a non-test build imports.
//
// # Does not know
//
// Any backend: the callers pass an opener and, for device-side checks, a
// copy op written with their backend's API.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// Opener opens a fresh device on the backend under test with the options
// the check needs (gpumem.WithCapacity for out-of-memory). It may register
// its own cleanups on t (closing the backend, checking a validation layer):
// the suite closes the device before they run. A backend that is absent
// here skips t (as its other tests do) instead of returning an error.
type Opener func(t *testing.T, opts ...gpumem.Option) (*gpumem.Device, error)

// Options states what the backend under test does not do, and gives the
// suite what it cannot write without the backend's API.
type Options struct {
	// Name labels the messages (default: the backend's Name()).
	Name string

	// NoBytes says the backend's storage holds no bytes (sim): every Read
	// must return ErrNotSupported, so the checks compare no bytes and a
	// failed op's marks (read through Read) are not checked; every other
	// rule is.
	NoBytes bool

	// NoCapture says the backend's queues cannot record graphs: the suite
	// checks that a capture is refused with gpumem.ErrNotSupported instead
	// of the capture rules.
	NoCapture bool

	// Copy enqueues on s an op that copies src's bytes into dst (equal
	// sizes) on the device, declaring dst Write and src Read: the device's
	// cross-stream order and graph launches are then checked on bytes the
	// device itself moved. nil skips those checks, saying so. HostCopy is
	// the one for backends whose resources carry host bytes.
	Copy func(s *gpumem.Stream, dst, src gpumem.Buffer) error

	// CachedBytes, when set, returns what Stats.BytesAllocated may still
	// count once every buffer is freed and the device cleaned up: memory
	// the backend keeps on purpose and accounts through the device's
	// storage. nil: nothing, BytesAllocated must come back to 0.
	CachedBytes func(d *gpumem.Device) uint64

	// DriverObjects, when set, counts the memory objects the backend holds
	// from its driver now (allocations, reservations, physical handles),
	// and DriverCached those of them it keeps on purpose outside the
	// device's accounting (vulkan's pooled staging buffers). Once every
	// buffer is freed and the device cleaned up, DriverObjects() −
	// DriverCached() must be 0: the backend gave back what it allocated.
	DriverObjects func() int
	DriverCached  func() int
}

// HostCopy is Options.Copy for backends whose resources carry host bytes
// (the host backend): an op that copies them on the stream's executor.
func HostCopy(s *gpumem.Stream, dst, src gpumem.Buffer) error {
	uses := []gpumem.Use{{Buffer: dst, Access: gpumem.Write}, {Buffer: src, Access: gpumem.Read}}
	return s.Enqueue("backendtest.copy", uses, func(res []storage.Resource) error {
		if len(res[0].Bytes) != len(res[1].Bytes) {
			return fmt.Errorf("backendtest: copy of %d bytes into %d", len(res[1].Bytes), len(res[0].Bytes))
		}
		copy(res[0].Bytes, res[1].Bytes)
		return nil
	})
}

// TestBackend runs the conformance suite on the backend open opens.
func TestBackend(t *testing.T, open Opener, o Options) {
	t.Helper()
	checks := []struct {
		name string
		run  func(c *checker)
	}{
		{"accounting", checkAccounting},
		{"bytes", checkBytes},
		{"order", checkOrder},
		{"cross-stream", checkCrossStream},
		{"capture", checkCapture},
		{"out-of-memory", checkOutOfMemory},
		{"relocation", checkRelocation},
	}
	for _, ch := range checks {
		t.Run(ch.name, func(t *testing.T) {
			ch.run(&checker{t: t, open: open, o: o})
		})
	}
}

// checker is one check's state: its test, the options and the device it
// opened last.
type checker struct {
	t    *testing.T
	open Opener
	o    Options
	name string
	d    *gpumem.Device
}

// device opens a fresh device and closes it when the check ends, failing
// the check if Close fails.
func (c *checker) device(opts ...gpumem.Option) *gpumem.Device {
	c.t.Helper()
	d, err := c.open(c.t, opts...)
	if err != nil {
		c.t.Fatalf("%sopening a device: %v", c.prefix(), err)
	}
	if d == nil {
		c.t.Fatalf("%sthe opener returned a nil device and no error", c.prefix())
	}
	c.d = d
	c.name = c.o.Name
	if c.name == "" {
		c.name = d.Backend().Name()
	}
	c.t.Cleanup(func() {
		if err := d.Close(); err != nil {
			c.t.Errorf("%s: Device.Close: %v", c.name, err)
		}
	})
	return d
}

func (c *checker) prefix() string {
	if c.name != "" {
		return c.name + ": "
	}
	if c.o.Name != "" {
		return c.o.Name + ": "
	}
	return ""
}

func (c *checker) fatalf(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf(c.prefix()+format, args...)
}

func (c *checker) errorf(format string, args ...any) {
	c.t.Helper()
	c.t.Errorf(c.prefix()+format, args...)
}

// skipf skips the rest of a check for a reason Options stated.
func (c *checker) skipf(format string, args ...any) {
	c.t.Helper()
	c.t.Skipf(c.prefix()+format, args...)
}

func (c *checker) ok(what string, err error) {
	c.t.Helper()
	if err != nil {
		c.fatalf("%s: %v", what, err)
	}
}

func (c *checker) stream() *gpumem.Stream {
	c.t.Helper()
	s, err := c.d.NewStream()
	c.ok("NewStream", err)
	return s
}

func (c *checker) alloc(s *gpumem.Stream, size uint64) gpumem.Buffer {
	c.t.Helper()
	b, err := s.Alloc(context.Background(), size)
	if err != nil {
		c.fatalf("Alloc(%d) on %s: %v", size, s.Name(), err)
	}
	return b
}

func (c *checker) free(bufs ...gpumem.Buffer) {
	c.t.Helper()
	for _, b := range bufs {
		if err := b.Free(); err != nil {
			c.fatalf("Free of buffer %d (%d bytes): %v", b.ID(), b.Size(), err)
		}
	}
}

func (c *checker) write(b gpumem.Buffer, p []byte) {
	c.t.Helper()
	if err := b.Write(context.Background(), p); err != nil {
		c.fatalf("Write of %d bytes into buffer %d: %v", len(p), b.ID(), err)
	}
}

// want reads b and compares it with p; with NoBytes the Read must say
// ErrNotSupported.
func (c *checker) want(what string, b gpumem.Buffer, p []byte) {
	c.t.Helper()
	got, err := b.Read(context.Background())
	if c.o.NoBytes {
		if !isErr(err, gpumem.ErrNotSupported) {
			c.fatalf("%s: Options.NoBytes, yet Read of buffer %d = %d bytes, %v; want ErrNotSupported", what, b.ID(), len(got), err)
		}
		return
	}
	if err != nil {
		c.fatalf("%s: Read of buffer %d: %v", what, b.ID(), err)
	}
	if len(got) != len(p) {
		c.fatalf("%s: Read of buffer %d returned %d bytes, want %d", what, b.ID(), len(got), len(p))
	}
	for i := range p {
		if got[i] != p[i] {
			c.fatalf("%s: buffer %d (%d bytes) differs first at byte %d: %#02x, want %#02x", what, b.ID(), len(p), i, got[i], p[i])
		}
	}
}

func (c *checker) sync(streams ...*gpumem.Stream) {
	c.t.Helper()
	for _, s := range streams {
		if err := s.Synchronize(context.Background()); err != nil {
			c.fatalf("Synchronize %s: %v", s.Name(), err)
		}
	}
}

func (c *checker) cleanup() {
	c.t.Helper()
	if err := c.d.Cleanup(context.Background()); err != nil {
		c.fatalf("Device.Cleanup: %v", err)
	}
}

// copyOp enqueues the backend's device copy, failing the check on error.
func (c *checker) copyOp(s *gpumem.Stream, dst, src gpumem.Buffer) {
	c.t.Helper()
	if err := c.o.Copy(s, dst, src); err != nil {
		c.fatalf("Options.Copy on %s (buffer %d into %d): %v", s.Name(), src.ID(), dst.ID(), err)
	}
}

// stall enqueues on s an op that sleeps for d with no uses: on backends
// whose executors run the ops (host), it holds back everything enqueued on
// s after it, so work that ignored an ordering would overtake it and be
// seen; done reports whether it ran.
func (c *checker) stall(s *gpumem.Stream, d time.Duration) (done func() bool) {
	c.t.Helper()
	ch := make(chan struct{})
	err := s.Enqueue("backendtest.stall", nil, func([]storage.Resource) error {
		time.Sleep(d)
		close(ch)
		return nil
	})
	c.ok("Enqueue of a stalling op", err)
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// pattern returns n bytes of a xorshift sequence seeded by seed: no period
// a misplaced window could match.
func pattern(n uint64, seed uint32) []byte {
	p := make([]byte, n)
	x := seed*2654435761 + 0x9e3779b9
	if x == 0 {
		x = 1
	}
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		p[i] = byte(x)
	}
	return p
}

// outdatedPages counts the pages arena growths outdated that the device
// still holds, on every stream.
func outdatedPages(d *gpumem.Device) uint64 {
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

// outdate grows s's arena until its pages are outdated: it allocates
// buffers of doubling sizes until a growth happened, then frees them
// (leaving their room on the current page for the relocation). Exactly one
// arena pool is current (design §5.4), so every arena buffer allocated
// before the call, any buffer over the small pool's 64 KiB (arenaMin),
// then lies on an outdated page. It fails the check if 64 MiB did not grow
// the arena.
func (c *checker) outdate(s *gpumem.Stream) {
	c.t.Helper()
	growths := c.d.Stats().Growths
	var large []gpumem.Buffer
	for size := uint64(1 << 20); ; size *= 2 {
		if size > 64<<20 {
			c.fatalf("allocations up to 64 MiB on %s grew no arena over its live buffers (growths %d, outdated pages %d): the suite cannot force a relocation",
				s.Name(), c.d.Stats().Growths-growths, outdatedPages(c.d))
		}
		large = append(large, c.alloc(s, size))
		if c.d.Stats().Growths > growths && outdatedPages(c.d) > 0 {
			break
		}
	}
	c.free(large...)
}

// roomOnCurrentPage gives s's current arena pool an empty page to take
// relocated buffers: a relocation by Cleanup moves them into room current
// pages hold, and never takes a new page for them.
func (c *checker) roomOnCurrentPage(s *gpumem.Stream) {
	c.t.Helper()
	var page uint64
	for _, st := range c.d.Report().Streams {
		if st.Name != s.Name() {
			continue
		}
		for _, p := range st.Dynamic {
			if p.Kind == "adaptive" {
				page = p.PageSize
			}
		}
	}
	if page == 0 {
		c.fatalf("%s has no arena pool", s.Name())
	}
	c.free(c.alloc(s, page))
}

// arenaMin is the least size the adaptive memory's arena takes: smaller
// buffers go to the small pool, whose pages are never outdated (design
// §5.2). The relocation and capture checks use larger buffers.
const arenaMin = 64<<10 + 1

func isErr(err, target error) bool { return err != nil && errors.Is(err, target) }
