package gpumem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
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
		{"granular", []gpumem.Option{gpumem.WithSim(), gpumem.WithPageGranular(true)}, 20 * granuleMiB},
		{"whole pages", []gpumem.Option{gpumem.WithSim(), gpumem.WithPageGranular(false)}, 21 * granuleMiB},
		{"default", []gpumem.Option{gpumem.WithSim()}, 21 * granuleMiB},
		{"granular host", []gpumem.Option{gpumem.WithPageGranular(true)}, 20 * granuleMiB},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := gpumem.Open(c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			buf, err := d.DefaultStream().Alloc(ctx, 20*granuleMiB) // an arena page of 21 MiB
			if err != nil {
				t.Fatal(err)
			}
			if got := d.BytesAllocated(); got != c.want {
				t.Fatalf("BytesAllocated %d, want %d", got, c.want)
			}
			if err := buf.Free(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The user's storage wrapper wraps the granular storage whichever option
// comes first, so a Faulty refuses its mappings.
func TestStorageWrapperWrapsTheGranularStorageInEitherOrder(t *testing.T) {
	ctx := context.Background()
	for _, first := range []bool{true, false} {
		var faulty *storage.Faulty
		wrap := gpumem.WithStorageWrapper(func(st storage.Storage) storage.Storage {
			faulty = storage.NewFaulty(st)
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
		if faulty.Granule() != storage.DefaultGranule {
			t.Fatalf("granular option first=%v: the wrapper sees granule %d", first, faulty.Granule())
		}
		faulty.RefuseNextMaps(1 << 10)
		if _, err := d.DefaultStream().Alloc(ctx, 3*granuleMiB); !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("allocation with every mapping refused: %v", err)
		}
		d.Close()
	}
}
