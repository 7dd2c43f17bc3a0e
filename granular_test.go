package gpumem_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

const granuleMiB = 1 << 20

// A granular device pays for the granules its buffers cover, not for whole
// pages; WithPageGranular(false) and the default host backend pay pages.
func TestWithPageGranularMapsOnlyWhatBuffersCover(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opts []gpumem.Option
		want uint64
	}{
		{"granular", []gpumem.Option{gpumem.WithSim(), gpumem.WithPageGranular(true)}, 22 * granuleMiB},
		{"whole pages", []gpumem.Option{gpumem.WithSim(), gpumem.WithPageGranular(false)}, 40 * granuleMiB},
		{"default", []gpumem.Option{gpumem.WithSim()}, 40 * granuleMiB},
		{"granular host", []gpumem.Option{gpumem.WithPageGranular(true)}, 22 * granuleMiB},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := gpumem.Open(c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			// An arena page of 20 MiB, full, then a 1 MiB buffer on a
			// second 20 MiB page: whole pages pay 40 MiB, granules pay the
			// 20 MiB buffer and the one 2 MiB granule of the 1 MiB one.
			var bufs []gpumem.Buffer
			for _, size := range []uint64{20 * granuleMiB, granuleMiB} {
				buf, err := d.DefaultStream().Alloc(ctx, size)
				if err != nil {
					t.Fatal(err)
				}
				bufs = append(bufs, buf)
			}
			if got := d.BytesAllocated(); got != c.want {
				t.Fatalf("BytesAllocated %d, want %d", got, c.want)
			}
			for _, buf := range bufs {
				if err := buf.Free(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// The user's storage wrapper wraps the granular storage whichever option
// comes first, so a Faulty refuses its mappings: the allocation is then
// served by storage of its own size (the fallback after every make-room
// stage), and with plain allocations refused too, it fails.
func TestStorageWrapperWrapsTheGranularStorageInEitherOrder(t *testing.T) {
	ctx := context.Background()
	for _, first := range []bool{true, false} {
		var faulty *hoststorage.Faulty
		wrap := gpumem.WithStorageWrapper(func(st storage.Storage) storage.Storage {
			faulty = hoststorage.NewFaulty(st)
			return faulty
		})
		opts := []gpumem.Option{gpumem.WithSim(), wrap, gpumem.WithPageGranular(true)}
		if first {
			opts = []gpumem.Option{gpumem.WithSim(), gpumem.WithPageGranular(true), wrap}
		}
		d, err := gpumem.Open(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if faulty.Granule() != hoststorage.DefaultGranule {
			t.Fatalf("granular option first=%v: the wrapper sees granule %d", first, faulty.Granule())
		}
		faulty.RefuseNextMaps(1 << 10)
		b, err := d.DefaultStream().Alloc(ctx, 3*granuleMiB)
		if err != nil || faulty.Refusals() == 0 || d.Stats().DedicatedFallbacks != 1 {
			t.Fatalf("allocation with every mapping refused: %v after %d refusals, %d fallbacks; want one served by the fallback", err, faulty.Refusals(), d.Stats().DedicatedFallbacks)
		}
		if err := b.Free(); err != nil {
			t.Fatal(err)
		}
		faulty.RefuseNextAllocs(1 << 10)
		if _, err := d.DefaultStream().Alloc(ctx, 5*granuleMiB); !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("allocation with every mapping and allocation refused: %v", err)
		}
		d.Close()
	}
}

// pat8 returns n bytes that depend on their index and seed.
func pat8(n uint64, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*131+i>>7) ^ seed
	}
	return p
}

// A granule emptied by a free is unmapped only after every op enqueued
// before the free has run: an explicit cleanup in between must not discard
// the bytes a pending op still reads (defect §2), on the device's and on the
// stream's cleanup. Once the op has run, the granules go back.
func TestGranularCleanupDiscardsBytesAPendingOpStillReads(t *testing.T) {
	bgc := context.Background()
	for _, viaStream := range []bool{false, true} {
		d, err := gpumem.Open(gpumem.WithPageGranular(true))
		if err != nil {
			t.Fatal(err)
		}
		s := d.DefaultStream()
		const n = 6 << 20 // spans whole granules of its own
		big, _ := s.Alloc(bgc, 16<<20)
		_ = big.Free()
		_ = d.Cleanup(bgc) // nothing outdated afterwards: the next Cleanup does not wait
		in, _ := s.Alloc(bgc, n)
		out, _ := s.Alloc(bgc, n)
		_ = in.Write(bgc, pat8(n, 42))
		_ = s.Synchronize(bgc)
		mapped := d.Stats().BytesAllocated
		gate := make(chan struct{})
		_ = s.Enqueue("gate", nil, func([]storage.Resource) error { <-gate; return nil })
		_ = s.Enqueue("copy", []gpumem.Use{{Buffer: in, Access: gpumem.Read}, {Buffer: out, Access: gpumem.Write}},
			func(r []storage.Resource) error { copy(r[1].Bytes, r[0].Bytes); return nil })
		_ = in.Free() // the input is no longer needed once the op is enqueued
		cleaned := make(chan error, 1)
		go func() {
			if viaStream {
				cleaned <- s.Cleanup(bgc)
			} else {
				cleaned <- d.Cleanup(bgc)
			}
		}()
		time.Sleep(20 * time.Millisecond) // let the cleanup run while the op waits (either order must hold)
		close(gate)
		if err := <-cleaned; err != nil {
			t.Fatal(err)
		}
		got, err := out.Read(bgc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, pat8(n, 42)) {
			t.Fatalf("stream cleanup=%v: the op read %d zero bytes of its input; its live output is wrong", viaStream, bytes.Count(got, []byte{0}))
		}
		if err := s.Cleanup(bgc); err != nil {
			t.Fatal(err)
		}
		if after := d.Stats().BytesAllocated; after+n/2 > mapped {
			t.Fatalf("stream cleanup=%v: mapped bytes %d → %d after the freed input's granules passed: they were not given back", viaStream, mapped, after)
		}
		_ = d.Close()
	}
}
