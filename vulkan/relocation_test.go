package vulkan_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan"
)

// addOnDevice adds k to every uint32 of buf on its stream.
func addOnDevice(t testing.TB, add *vulkan.Kernel, s *gpumem.Stream, buf gpumem.Buffer, k uint32) {
	t.Helper()
	n := buf.Size() / 4
	err := vulkan.Enqueue(s, "add", []gpumem.Use{{Buffer: buf, Access: gpumem.ReadWrite}}, func(op *vulkan.Op) error {
		return op.Dispatch(add, vulkan.GroupsFor(n, 64), []vulkan.Binding{vulkan.Use(0)}, vulkan.Push(uint32(n), k))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func plusU32(p []byte, k uint32) []byte {
	out := make([]byte, len(p))
	for i := 0; i+4 <= len(p); i += 4 {
		binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(p[i:])+k)
	}
	return out
}

// Byte-exact relocation on device memory: buffers on two streams, some
// larger than a page, kernels running on both, one buffer handed across
// streams; the arena grows, Cleanup relocates, and every byte reads back
// as the host model says. Run with the staging path too.
func TestRelocationAcrossTwoStreamsIsByteExact(t *testing.T) {
	for _, staging := range []bool{false, true} {
		name := map[bool]string{false: "mapped", true: "staging"}[staging]
		t.Run(name, func(t *testing.T) {
			d, b := openDevice(t, vulkan.Options{Staging: staging})
			add := mustKernel(t, b, vulkan.KernelAddU32)
			s0 := d.DefaultStream()
			s1, err := d.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			type held struct {
				buf  gpumem.Buffer
				want []byte
			}
			var live []held
			sizes := []uint64{64 * kib, 3 * mib, 1 * mib, 256 * kib, 2*mib + 4096, 512 * kib}
			for i, n := range sizes {
				s := []*gpumem.Stream{s0, s1}[i%2]
				buf := mustAlloc(t, s, n)
				p := pattern(int(n), byte(i+1))
				mustWrite(t, buf, p)
				addOnDevice(t, add, s, buf, uint32(i+1))
				live = append(live, held{buf, plusU32(p, uint32(i+1))})
			}
			// Handed across: written on s0, added to on s1.
			addOnDevice(t, add, s1, live[0].buf, 100)
			live[0].want = plusU32(live[0].want, 100)
			if err := live[1].buf.Free(); err != nil {
				t.Fatal(err)
			}
			live = append(live[:1], live[2:]...)
			// Grow past the page size on both streams, with kernels
			// queued: the small pages are outdated.
			for i, s := range []*gpumem.Stream{s0, s1} {
				large := mustAlloc(t, s, 40*mib)
				addOnDevice(t, add, s, large, uint32(i))
				if err := large.Free(); err != nil {
					t.Fatal(err)
				}
			}
			before := d.Stats()
			if before.Growths == 0 {
				t.Fatal("no arena growth")
			}
			if err := d.Cleanup(context.Background()); err != nil {
				t.Fatalf("Cleanup: %v", err)
			}
			st := d.Stats()
			if st.Relocation.Moves == 0 || st.Relocation.BytesMoved == 0 {
				t.Fatalf("Cleanup moved nothing (stats %+v)", st.Relocation)
			}
			// Kernels after the move run on the new places.
			for i := range live {
				s := live[i].buf.Stream()
				addOnDevice(t, add, s, live[i].buf, 7)
				live[i].want = plusU32(live[i].want, 7)
			}
			for i, h := range live {
				got, err := h.buf.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(h.want) {
					for j := range got {
						if got[j] != h.want[j] {
							t.Fatalf("buffer %d (%d bytes): byte %d is %#x, want %#x", i, len(got), j, got[j], h.want[j])
						}
					}
				}
			}
		})
	}
}
