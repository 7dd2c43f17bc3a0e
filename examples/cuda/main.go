// Command cuda opens the first NVIDIA GPU through the cuda backend (the
// driver is loaded at run time, no cgo), runs a few streams of work on real
// device memory whose allocations grow past the arena's page size, launches
// kernels and a captured graph over it, relocates what the outdated pages
// hold, checks every byte, and prints the memory report.
//
// Without a CUDA driver it says so and exits with status 1. Set
// GPUMEM_LIBCUDA to load another driver library, -device to pick a GPU.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/cuda"
	"github.com/gpumem/gpumem/storage"
)

func main() {
	device := flag.Int("device", 0, "CUDA device ordinal")
	flag.Parse()
	dev, err := cuda.OpenDevice(cuda.Options{Device: *device})
	if err != nil {
		if errors.Is(err, gpumem.ErrNotSupported) {
			fmt.Fprintln(os.Stderr, "no CUDA driver found:", err)
			fmt.Fprintln(os.Stderr, "(gpumem.Open runs the same workload on the host backend: go run ./examples/basic)")
		} else {
			fmt.Fprintln(os.Stderr, "cuda:", err)
		}
		os.Exit(1)
	}
	if err := run(dev); err != nil {
		dev.Close()
		fmt.Fprintln(os.Stderr, "cuda:", err)
		os.Exit(1)
	}
	if err := dev.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "cuda: close:", err)
		os.Exit(1)
	}
}

// kept is a long-lived buffer and the bytes it must hold.
type kept struct {
	b    *gpumem.Buffer
	want []byte
}

func run(dev *gpumem.Device) error {
	ctx := context.Background()
	be := dev.Backend().(*cuda.Backend)
	c := be.Context()
	fmt.Printf("device %d: %s, %s of memory, CUDA driver %d.%d\n", c.Ordinal(), c.Name(),
		bytesString(c.TotalMem()), c.DriverVersion()/1000, c.DriverVersion()%1000/10)
	p := dev.Properties()
	fmt.Printf("page sizes up to %s, alignment %d B\n\n", bytesString(p.MaxPageSize), p.Alignment)

	streams := []*gpumem.Stream{dev.DefaultStream()}
	for range 2 {
		s, err := dev.NewStream()
		if err != nil {
			return err
		}
		streams = append(streams, s)
	}

	// Long-lived buffers made early, on the first small pages; a kernel
	// adds one to every byte after the write.
	var live []kept
	for i, s := range streams {
		for j := range 4 {
			data := bytes.Repeat([]byte{byte(16*i + j + 1)}, 300<<10)
			b, err := s.Alloc(ctx, uint64(len(data)))
			if err != nil {
				return err
			}
			if err := b.Write(ctx, data); err != nil {
				return err
			}
			if err := launch(be, s, b, cuda.KernelAddOne); err != nil {
				return err
			}
			live = append(live, kept{b, bytes.Repeat([]byte{byte(16*i + j + 2)}, len(data))})
		}
	}

	// Work whose allocations grow: each step needs a larger scratch buffer,
	// filled on the device, so the arena grows and the early pages become
	// outdated.
	for step := range 6 {
		size := uint64(1+step*3) << 20
		for _, s := range streams {
			scratch, err := s.Alloc(ctx, size)
			if err != nil {
				return err
			}
			if err := launch(be, s, scratch, cuda.KernelFillU8, uint32(step)); err != nil {
				return err
			}
			if err := scratch.Free(); err != nil {
				return err
			}
		}
	}

	before := dev.Stats()

	// A graph captured on the first stream, over its first buffer (a
	// capture relocates every stream's outdated pages first).
	s0, g0 := streams[0], live[0]
	graph, err := s0.Capture(ctx, func(ctx context.Context, s *gpumem.Stream) error {
		return launch(be, s, g0.b, cuda.KernelAddOne)
	})
	if err != nil {
		return err
	}
	live[0].want = plus(live[0].want, 1) // the capture's warmup ran once

	// Give memory back: relocate survivors off outdated pages (the graph's
	// page stays where it is), release every empty page.
	if err := dev.Cleanup(ctx); err != nil {
		return err
	}
	for range 3 {
		if err := graph.Launch(ctx); err != nil {
			return err
		}
	}
	live[0].want = plus(live[0].want, 3)
	for _, k := range live {
		got, err := k.b.Read(ctx)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, k.want) {
			return fmt.Errorf("buffer %d lost its bytes across relocation", k.b.ID())
		}
	}
	if err := graph.Close(); err != nil {
		return err
	}
	after := dev.Stats()
	fmt.Print(dev.Report())
	fmt.Printf("\ngrowths %d; relocations moved %d allocations (%s) and released %d pages (%s); device bytes %s → %s; graph replayed 3 times; every byte checked\n",
		after.Growths, after.Relocation.Moves, bytesString(after.Relocation.BytesMoved), after.Relocation.PagesReleased,
		bytesString(after.Relocation.BytesReleased), bytesString(before.BytesAllocated), bytesString(after.BytesAllocated))
	for _, k := range live {
		if err := k.b.Free(); err != nil {
			return err
		}
	}
	return nil
}

// launch enqueues one kernel of cuda.KernelsPTX over the whole buffer.
func launch(be *cuda.Backend, s *gpumem.Stream, b *gpumem.Buffer, kernel string, extra ...any) error {
	access := gpumem.ReadWrite
	if kernel == cuda.KernelFillU8 {
		access = gpumem.Write
	}
	return s.Enqueue(kernel, []gpumem.Use{{Buffer: b, Access: access}}, func(res []storage.Resource) error {
		return be.Launch(s.Queue(), kernel, res[0].Ptr, res[0].Size, extra...)
	})
}

func plus(p []byte, k byte) []byte {
	out := make([]byte, len(p))
	for i, v := range p {
		out[i] = v + k
	}
	return out
}

func bytesString(n uint64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
