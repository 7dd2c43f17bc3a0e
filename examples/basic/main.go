// Command basic opens the default (host) device, runs a few streams of work
// whose allocations grow past the arena's page size, relocates what the
// outdated pages hold, checks every byte, and prints the memory report.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "basic:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	dev, err := gpumem.Open(gpumem.WithCapacity(512 << 20))
	if err != nil {
		return err
	}
	defer dev.Close()

	streams := []*gpumem.Stream{dev.DefaultStream()}
	for range 2 {
		s, err := dev.NewStream()
		if err != nil {
			return err
		}
		streams = append(streams, s)
	}

	// Long-lived buffers made early: small, on the first 2 MiB pages.
	type kept struct {
		b    gpumem.Buffer
		want []byte
	}
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
			live = append(live, kept{b, data})
		}
	}

	// Work whose allocations grow: each step needs a larger scratch buffer,
	// so the arena grows and the early pages become outdated.
	for step := range 6 {
		size := uint64(1+step*3) << 20
		for _, s := range streams {
			scratch, err := s.Alloc(ctx, size)
			if err != nil {
				return err
			}
			err = s.Enqueue("scale", []gpumem.Use{{Buffer: scratch, Access: gpumem.Write}}, func(res []storage.Resource) error {
				clear(res[0].Bytes)
				return nil
			})
			if err != nil {
				return err
			}
			if err := scratch.Free(); err != nil {
				return err
			}
		}
	}
	before := dev.Stats()

	// Give memory back: relocate survivors off outdated pages, release
	// every empty page.
	if err := dev.Cleanup(ctx); err != nil {
		return err
	}
	for _, k := range live {
		got, err := k.b.Read(ctx)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, k.want) {
			return fmt.Errorf("buffer %d lost its bytes across relocation", k.b.ID())
		}
	}
	after := dev.Stats()
	fmt.Print(dev.Report())
	fmt.Printf("\ngrowths %d; relocations moved %d allocations (%s) and released %d pages (%s); device bytes %s → %s; every byte checked\n",
		after.Growths, after.Relocation.Moves, bytesString(after.Relocation.BytesMoved), after.Relocation.PagesReleased,
		bytesString(after.Relocation.BytesReleased), bytesString(before.BytesAllocated), bytesString(after.BytesAllocated))
	for _, k := range live {
		if err := k.b.Free(); err != nil {
			return err
		}
	}
	return nil
}

func bytesString(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
