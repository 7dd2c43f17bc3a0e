package vulkan_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan"
)

// A seeded model test on device memory, in the spirit of the root
// package's shadow model (which lives inside package gpumem and drives
// host storage): random allocations of many sizes on three streams,
// writes, dispatches on any stream (cross-stream use), frees, growth and
// cleanups that relocate, against a host shadow of every buffer; every
// read must return the shadow's bytes exactly. Short: 6 seeds of 150
// operations, the staging path on every other seed.
func TestRandomWorkloadMatchesAHostShadow(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) { modelRun(t, seed, 150) })
	}
}

func modelRun(t *testing.T, seed uint64, ops int) {
	ctx := context.Background()
	d, b := openDevice(t, vulkan.Options{Staging: seed%2 == 0})
	add := mustKernel(t, b, vulkan.KernelAddU32)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	streams := []*gpumem.Stream{d.DefaultStream()}
	for range 2 {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	type live struct {
		buf  gpumem.Buffer
		want []byte
	}
	var bufs []*live
	sizes := []uint64{4, 256, 4 * kib, 60 * kib, 256 * kib, mib, 3 * mib}
	reads := 0
	for i := range ops {
		switch op := rng.IntN(10); {
		case op < 3 || len(bufs) == 0: // allocate and write
			n := sizes[rng.IntN(len(sizes))] + 4*uint64(rng.IntN(16))
			s := streams[rng.IntN(len(streams))]
			buf := mustAlloc(t, s, n)
			p := pattern(int(n), byte(i))
			mustWrite(t, buf, p)
			bufs = append(bufs, &live{buf, p})
		case op < 6: // a dispatch on any stream
			l := bufs[rng.IntN(len(bufs))]
			k := uint32(rng.IntN(1000))
			addOnDevice(t, add, streams[rng.IntN(len(streams))], l.buf, k)
			l.want = plusU32(l.want, k)
		case op < 7: // free
			j := rng.IntN(len(bufs))
			if err := bufs[j].buf.Free(); err != nil {
				t.Fatal(err)
			}
			bufs = append(bufs[:j], bufs[j+1:]...)
		case op < 8: // grow past the current pages, then relocate
			big := mustAlloc(t, streams[rng.IntN(len(streams))], uint64(8+rng.IntN(24))*mib)
			if err := errors.Join(big.Free(), d.Cleanup(ctx)); err != nil {
				t.Fatal(err)
			}
		default: // read back
			l := bufs[rng.IntN(len(bufs))]
			wantBytes(t, l.buf, l.want)
			reads++
		}
	}
	for _, l := range bufs {
		wantBytes(t, l.buf, l.want)
	}
	st := d.Stats()
	t.Logf("seed %d: %d reads, %d buffers at the end, %d growths, %d moves (%d bytes)", seed, reads+len(bufs), len(bufs), st.Growths, st.Relocation.Moves, st.Relocation.BytesMoved)
}

// Goroutines on their own streams (sharing lavapipe's one VkQueue) write,
// dispatch and read concurrently; each checks its own buffers. Run under
// -race, it checks the queues' and the backend's locking.
func TestConcurrentStreamsKeepTheirOwnBytes(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	add := mustKernel(t, b, vulkan.KernelAddU32)
	const workers, rounds = 3, 15
	streams := make([]*gpumem.Stream, workers)
	for i := range streams {
		s, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				ctx := context.Background()
				s := streams[w]
				for r := range rounds {
					n := uint64(4*kib) << (r % 6)
					buf, err := s.Alloc(ctx, n)
					if err != nil {
						return err
					}
					p := pattern(int(n), byte(w*rounds+r))
					if err := buf.Write(ctx, p); err != nil {
						return err
					}
					k := uint32(w + r)
					err = vulkan.Enqueue(s, "add", []gpumem.Use{{Buffer: buf, Access: gpumem.ReadWrite}}, func(op *vulkan.Op) error {
						return op.Dispatch(add, vulkan.GroupsFor(n/4, 64), []vulkan.Binding{vulkan.Use(0)}, vulkan.Push(uint32(n/4), k))
					})
					if err != nil {
						return err
					}
					got, err := buf.Read(ctx)
					if err != nil {
						return err
					}
					if string(got) != string(plusU32(p, k)) {
						return fmt.Errorf("worker %d round %d: bytes differ", w, r)
					}
					if r%3 == 0 {
						if err := buf.Free(); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
