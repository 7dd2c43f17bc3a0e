package gpumem_test

// Examples the guide (docs/guide) quotes: the guide's Go blocks are cut
// from this file, and cmd/gpumem's docs test checks that they still are.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// Pages that small buffers share, freed in another order than they were
// allocated, stay partly used: no cleanup gives them back. Defragment
// packs the survivors into fewer pages and gives the emptied ones back,
// at a moment you choose (between steps, after loading weights).
func ExampleDevice_Defragment() {
	ctx := context.Background()
	const mib = 1 << 20
	dev, err := gpumem.Open(gpumem.WithCapacity(64 * mib))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	s := dev.DefaultStream()

	// Sixteen 1 MiB buffers, two to a 2 MiB page; then every other one freed.
	var kept []gpumem.Buffer
	for i := range 16 {
		b, err := s.Alloc(ctx, 1*mib)
		if err != nil {
			fmt.Println(err)
			return
		}
		_ = b.Write(ctx, bytes.Repeat([]byte{byte(i)}, 1*mib))
		kept = append(kept, b)
	}
	for i := 1; i < len(kept); i++ { // buffers 1, 3, 5, …: leaves each page half used
		_ = kept[i].Free()
		kept = append(kept[:i], kept[i+1:]...)
	}
	st := dev.Stats()
	fmt.Printf("%d MiB in use, %d MiB held from the device\n", st.BytesInUse/mib, st.BytesAllocated/mib)

	_ = dev.Cleanup(ctx) // gives back empty pages: there are none
	fmt.Printf("after Cleanup: %d MiB held\n", dev.Stats().BytesAllocated/mib)

	res, err := dev.Defragment(ctx, gpumem.DefragOptions{MaxBytes: 64 * mib})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("Defragment moved %d buffers (%d MiB) and gave back %d pages, %d MiB\n",
		res.Moves, res.BytesMoved/mib, res.PagesReleased, res.BytesReleased/mib)
	fmt.Printf("after Defragment: %d MiB held\n", dev.Stats().BytesAllocated/mib)

	for i, b := range kept { // every buffer still reads its own bytes
		got, err := b.Read(ctx)
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(2 * i)}, 1*mib)) {
			fmt.Println("buffer", i, "lost its bytes:", err)
		}
	}
	// Output:
	// 8 MiB in use, 16 MiB held from the device
	// after Cleanup: 16 MiB held
	// Defragment moved 4 buffers (4 MiB) and gave back 4 pages, 8 MiB
	// after Defragment: 8 MiB held
}

// Two streams run their work side by side; where one stream's op uses a
// buffer another stream wrote, the device orders the two: the consumer's op
// runs after the producer's, with no fence for the caller to manage.
func ExampleStream_Enqueue() {
	ctx := context.Background()
	dev, err := gpumem.Open()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	producer := dev.DefaultStream()
	consumer, err := dev.NewStream()
	if err != nil {
		fmt.Println(err)
		return
	}
	x, _ := producer.Alloc(ctx, 4)
	y, _ := consumer.Alloc(ctx, 4)
	defer x.Free()
	defer y.Free()

	_ = producer.Enqueue("fill", []gpumem.Use{{Buffer: x, Access: gpumem.Write}},
		func(res []storage.Resource) error {
			copy(res[0].Bytes, []byte{1, 2, 3, 4})
			return nil
		})
	_ = consumer.Enqueue("double", []gpumem.Use{{Buffer: x, Access: gpumem.Read}, {Buffer: y, Access: gpumem.Write}},
		func(res []storage.Resource) error { // runs once "fill" is done
			for i, v := range res[0].Bytes {
				res[1].Bytes[i] = 2 * v
			}
			return nil
		})
	got, err := y.Read(ctx) // waits for the consumer's work, and so for the producer's
	fmt.Println(got, err)
	// Output: [2 4 6 8] <nil>
}

// An op that fails leaves what it declared it writes unwritten: reading
// those bytes reports the failure, and an op that reads them is skipped
// rather than run on garbage.
func ExampleStream_Enqueue_failure() {
	ctx := context.Background()
	dev, err := gpumem.Open()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	s := dev.DefaultStream()
	a, _ := s.Alloc(ctx, 64)
	b, _ := s.Alloc(ctx, 64)
	defer a.Free()
	defer b.Free()

	_ = s.Enqueue("fill", []gpumem.Use{{Buffer: a, Access: gpumem.Write}},
		func(res []storage.Resource) error { return errors.New("kernel failed") })
	_ = s.Enqueue("copy", []gpumem.Use{{Buffer: a, Access: gpumem.Read}, {Buffer: b, Access: gpumem.Write}},
		func(res []storage.Resource) error { copy(res[1].Bytes, res[0].Bytes); return nil })

	_, err = b.Read(ctx) // waits for both ops
	fmt.Println(errors.Is(err, gpumem.ErrUnwritten), strings.Contains(err.Error(), `op "copy" skipped`))
	_, err = a.Read(ctx)
	fmt.Println(errors.Is(err, gpumem.ErrUnwritten), strings.Contains(err.Error(), "kernel failed"))
	// Output:
	// true true
	// true true
}

// An allocation the device cannot serve, after every stage of making room
// failed, returns an error wrapping ErrOutOfMemory; storage's
// OutOfMemoryError carries the numbers, and FailureKind names the kind for
// counters.
func ExampleStream_Alloc_outOfMemory() {
	ctx := context.Background()
	const mib = 1 << 20
	dev, err := gpumem.Open(gpumem.WithSim(), gpumem.WithCapacity(64*mib))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	s := dev.DefaultStream()
	a, _ := s.Alloc(ctx, 40*mib)
	defer a.Free()

	_, err = s.Alloc(ctx, 40*mib)
	fmt.Println(errors.Is(err, gpumem.ErrOutOfMemory), gpumem.FailureKind(err))
	var oom *storage.OutOfMemoryError
	if errors.As(err, &oom) {
		fmt.Printf("asked %d MiB with %d of %d MiB taken\n", oom.Requested/mib, oom.Allocated/mib, oom.Capacity/mib)
	}
	fmt.Println(err)
	// Output:
	// true out_of_memory
	// asked 40 MiB with 40 of 64 MiB taken
	// gpumem: stream-0: allocating 41943040 bytes: storage: out of memory: 41943040 bytes requested, 41943040 of 67108864 bytes already allocated (raise the capacity or free memory)
}

// Capture records a step once and replays it with Launch: fn runs once as
// a warmup, then once recorded. The pages the recording touched stay where
// they are until Close.
func ExampleStream_Capture() {
	ctx := context.Background()
	dev, err := gpumem.Open()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	s := dev.DefaultStream()
	x, _ := s.Alloc(ctx, 4) // a graph input: allocated before the capture
	defer x.Free()
	_ = x.Write(ctx, []byte{0, 0, 0, 0})

	step := func(ctx context.Context, s *gpumem.Stream) error {
		return s.Enqueue("add-one", []gpumem.Use{{Buffer: x, Access: gpumem.ReadWrite}},
			func(res []storage.Resource) error {
				for i := range res[0].Bytes {
					res[0].Bytes[i]++
				}
				return nil
			})
	}
	g, err := s.Capture(ctx, step) // the warmup adds one; the recording does not run
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		_ = g.Launch(ctx)
	}
	got, _ := x.Read(ctx)
	fmt.Println(got, g.Ops(), dev.Stats().GuardedPages)
	_ = g.Close() // the guards go: the pages may move and go back again
	fmt.Println(dev.Stats().GuardedPages)
	// Output:
	// [4 4 4 4] 1 1
	// 0
}

// A device records its history when asked, as PyTorch's
// _record_memory_history does; WriteTrace writes it as a gpumem trace
// that `gpumem replay` replays under every policy and capacity.
func ExampleDevice_WriteTrace() {
	ctx := context.Background()
	dev, err := gpumem.Open(gpumem.WithSim(), gpumem.WithHistory(gpumem.HistoryOptions{}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	s := dev.DefaultStream()
	a, _ := s.Alloc(ctx, 1<<20)
	b, _ := s.Alloc(ctx, 3<<20)
	_ = a.Free()
	_ = b.Free()
	var trace bytes.Buffer
	if err := dev.WriteTrace(&trace); err != nil {
		fmt.Println(err)
		return
	}
	// A header line, then one JSON object per event (times and IDs vary).
	sc := bufio.NewScanner(&trace)
	for sc.Scan() {
		var e struct {
			Format string `json:"format"`
			Op     string `json:"op"`
			Size   uint64 `json:"size"`
		}
		_ = json.Unmarshal(sc.Bytes(), &e)
		switch {
		case e.Format != "":
			fmt.Println("header:", e.Format)
		case e.Size > 0:
			fmt.Println(e.Op, e.Size)
		default:
			fmt.Println(e.Op)
		}
	}
	// Output:
	// header: gpumem-trace
	// alloc 1048576
	// alloc 3145728
	// free
	// free
}

// Stats are the device's counters; Metrics names each one as expvar, slog
// and a Prometheus exporter would.
func ExampleStats_Metrics() {
	ctx := context.Background()
	dev, err := gpumem.Open()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	b, _ := dev.DefaultStream().Alloc(ctx, 1000)
	defer b.Free()
	for _, m := range dev.Stats().Metrics()[:6] {
		fmt.Printf("%-24s %-32s %d\n", m.Name, m.Prometheus, m.Value)
	}
	// Output:
	// bytes_allocated          gpumem_bytes_allocated           2097152
	// bytes_reserved           gpumem_bytes_reserved            2097152
	// bytes_in_use             gpumem_bytes_in_use              1000
	// bytes_pending_free       gpumem_bytes_pending_free        0
	// guarded_pages            gpumem_guarded_pages             0
	// allocs                   gpumem_allocs_total              1
}
