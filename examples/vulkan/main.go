// Command vulkan runs compute shaders on gpumem buffers through the vulkan
// backend (the loader is opened at run time, no cgo) and checks every
// result on the host:
//
//  1. loads the vulkan package's shipped kernels: saxpy (y = a·x + y over
//     float32), add_u32 and reduce_u32 (a shared-memory reduction, one
//     partial sum per workgroup);
//  2. runs the step — saxpy, then one added to every count and the counts
//     reduced — over buffers that grow round by round past the arena's
//     page size, keeping each round's y alive, and calls Device.Cleanup
//     between rounds, so relocations move the kept buffers while the
//     shaders keep running on the new places;
//  3. captures the step once (a recorded command buffer) and launches it
//     many times, with a relocation half-way, on a second stream too, then
//     checks y, the sums and every kept buffer.
//
// Without a Vulkan device it says so and exits with status 1 (Mesa's
// lavapipe, in mesa-vulkan-drivers, runs on the CPU). GPUMEM_VULKAN_DEVICE
// or -device picks a device by index or name.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan"
)

func main() {
	device := flag.String("device", "", "Vulkan device: index or name (default $GPUMEM_VULKAN_DEVICE, else the first usable)")
	launches := flag.Int("launches", 50, "launches of the captured step")
	flag.Parse()
	dev, err := vulkan.OpenDevice(vulkan.Options{Device: *device})
	if err != nil {
		if errors.Is(err, gpumem.ErrNotSupported) {
			fmt.Fprintln(os.Stderr, "no usable Vulkan device:", err)
			fmt.Fprintln(os.Stderr, "(gpumem.Open runs buffers on the host backend: go run ./examples/basic)")
		} else {
			fmt.Fprintln(os.Stderr, "vulkan:", err)
		}
		os.Exit(1)
	}
	if err := run(dev, os.Stdout, *launches); err != nil {
		dev.Close()
		fmt.Fprintln(os.Stderr, "vulkan:", err)
		os.Exit(1)
	}
	if err := dev.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "vulkan: close:", err)
		os.Exit(1)
	}
}

// a is saxpy's scale. With x below 1000 and y small integers, every y
// stays an integer below 2^24 for thousands of steps: exact in float32, so
// the device and the host agree bit for bit.
const a = 2

// reduceGroup is reduce_u32's workgroup size.
const reduceGroup = 256

// kernels are the example's shaders.
type kernels struct{ saxpy, add, reduce *vulkan.Kernel }

// work is one step's buffers: saxpy's x and y, the counts and their
// partial sums.
type work struct{ x, y, counts, sums gpumem.Buffer }

// kept is a buffer of an earlier round and the floats it must still hold.
type kept struct {
	b    gpumem.Buffer
	want []float32
}

func run(dev *gpumem.Device, w io.Writer, launches int) error {
	ctx := context.Background()
	be, ok := dev.Backend().(*vulkan.Backend)
	if !ok {
		return fmt.Errorf("device runs on the %s backend, not vulkan", dev.Backend().Name())
	}
	info := be.Info()
	fmt.Fprintf(w, "device %d: %s, Vulkan %s\n", info.Index, info.Name, info.APIVersionString())
	var k kernels
	var err error
	for _, l := range []struct {
		k    **vulkan.Kernel
		name string
	}{{&k.saxpy, vulkan.KernelSaxpy}, {&k.add, vulkan.KernelAddU32}, {&k.reduce, vulkan.KernelReduceU32}} {
		if *l.k, err = be.LoadShipped(l.name); err != nil {
			return err
		}
		defer (*l.k).Close()
	}

	s := dev.DefaultStream()
	var history []kept
	n := uint64(1 << 14) // floats: 64 KiB, then 4x a round, to 4 MiB
	for round := range 4 {
		x, y := inputs(n, round)
		wk, err := upload(ctx, s, x, y)
		if err != nil {
			return err
		}
		if err := step(s, k, wk); err != nil {
			return err
		}
		y1 := saxpyHost(x, y, 1)
		if err := check(ctx, fmt.Sprintf("round %d", round), wk, y1, 1); err != nil {
			return err
		}
		history = append(history, kept{wk.y, y1})
		if err := errors.Join(wk.x.Free(), wk.counts.Free(), wk.sums.Free()); err != nil {
			return err
		}
		// The next round's larger buffers outgrow these pages; Cleanup
		// moves the kept y's off the outdated ones.
		if err := dev.Cleanup(ctx); err != nil {
			return err
		}
		if round < 3 {
			n *= 4
		}
	}
	if err := checkKept(ctx, history); err != nil {
		return err
	}

	// The step captured once on each of two streams, launched many times,
	// with a relocation of the kept buffers half-way (the graphs' own
	// pages stay in place while they live: they are guarded).
	s2, err := dev.NewStream()
	if err != nil {
		return err
	}
	type captured struct {
		s     *gpumem.Stream
		x, y  []float32
		wk    work
		graph *gpumem.Graph
	}
	var cs []captured
	for i, st := range []*gpumem.Stream{s, s2} {
		x, y := inputs(n/4, 7+i)
		wk, err := upload(ctx, st, x, y)
		if err != nil {
			return err
		}
		g, err := st.Capture(ctx, func(_ context.Context, st *gpumem.Stream) error { return step(st, k, wk) })
		if err != nil {
			return err
		}
		cs = append(cs, captured{st, x, y, wk, g})
	}
	moved := dev.Stats().Relocation.Moves
	for i := range launches {
		if i == launches/2 {
			// Growth past the current page, then Cleanup: the kept
			// buffers' pages are outdated and move.
			big, err := s.Alloc(ctx, 16*n*4)
			if err != nil {
				return err
			}
			if err := errors.Join(big.Free(), dev.Cleanup(ctx)); err != nil {
				return err
			}
		}
		for _, c := range cs {
			if err := c.graph.Launch(ctx); err != nil {
				return err
			}
		}
	}
	// The warmup ran the step once, then each launch once more.
	for i, c := range cs {
		if err := check(ctx, fmt.Sprintf("graph on stream %d", i), c.wk, saxpyHost(c.x, c.y, launches+1), launches+1); err != nil {
			return err
		}
	}
	if err := checkKept(ctx, history); err != nil {
		return err
	}
	for _, c := range cs {
		if err := c.graph.Close(); err != nil {
			return err
		}
	}
	st := dev.Stats()
	if st.Relocation.Moves == 0 || st.Relocation.Moves == moved {
		return fmt.Errorf("no relocation happened between steps (%d moves in all, %d before the graphs' launches): the check is void", st.Relocation.Moves, moved)
	}
	for _, h := range history {
		if err := h.b.Free(); err != nil {
			return err
		}
	}
	for _, c := range cs {
		if err := errors.Join(c.wk.x.Free(), c.wk.y.Free(), c.wk.counts.Free(), c.wk.sums.Free()); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "saxpy, add_u32 and reduce_u32 over up to %d elements (%s per buffer): 4 growing rounds, then the step captured on 2 streams and launched %d times each\n",
		n, mibString(n*4), launches)
	fmt.Fprintf(w, "growths %d; relocations moved %d allocations (%s) between steps\n",
		st.Growths, st.Relocation.Moves, mibString(st.Relocation.BytesMoved))
	fmt.Fprintln(w, "example check: every result checked on the host: ok")
	return nil
}

// step enqueues saxpy over (x, y), then one added to every count and the
// counts reduced into sums, each an op whose shaders bind the uses at
// their current places.
func step(s *gpumem.Stream, k kernels, wk work) error {
	n := wk.y.Size() / 4
	saxpyUses := []gpumem.Use{{Buffer: wk.x, Access: gpumem.Read}, {Buffer: wk.y, Access: gpumem.ReadWrite}}
	err := vulkan.Enqueue(s, "saxpy", saxpyUses, func(op *vulkan.Op) error {
		return op.Dispatch(k.saxpy, vulkan.GroupsFor(n, 64), []vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n), float32(a)))
	})
	if err != nil {
		return err
	}
	uses := []gpumem.Use{{Buffer: wk.counts, Access: gpumem.ReadWrite}, {Buffer: wk.sums, Access: gpumem.Write}}
	return vulkan.Enqueue(s, "count and reduce", uses, func(op *vulkan.Op) error {
		if err := op.Dispatch(k.add, vulkan.GroupsFor(n, 64), []vulkan.Binding{vulkan.Use(0)}, vulkan.Push(uint32(n), uint32(1))); err != nil {
			return err
		}
		return op.Dispatch(k.reduce, vulkan.GroupsFor(n, reduceGroup), []vulkan.Binding{vulkan.Use(0), vulkan.Use(1)}, vulkan.Push(uint32(n)))
	})
}

// inputs returns x (below 1000) and y (small integers) of n floats.
func inputs(n uint64, seed int) (x, y []float32) {
	x, y = make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32((i*7 + seed) % 1000)
		y[i] = float32((i + seed) % 13)
	}
	return x, y
}

// upload allocates x, y, zeroed counts and the partial sums on s and
// writes them.
func upload(ctx context.Context, s *gpumem.Stream, x, y []float32) (work, error) {
	n := uint64(len(y))
	groups := vulkan.GroupsFor(n, reduceGroup).X
	var bufs [4]gpumem.Buffer
	for i, data := range [][]byte{floatBytes(x), floatBytes(y), make([]byte, 4*n), make([]byte, 4*groups)} {
		var err error
		if bufs[i], err = s.Alloc(ctx, uint64(len(data))); err != nil {
			return work{}, err
		}
		if err = bufs[i].Write(ctx, data); err != nil {
			return work{}, err
		}
	}
	return work{bufs[0], bufs[1], bufs[2], bufs[3]}, nil
}

// check reads y and the sums back and compares them with the host's: y
// exactly, each partial sum exactly (every count is steps).
func check(ctx context.Context, what string, wk work, wantY []float32, steps int) error {
	got, err := wk.y.Read(ctx)
	if err != nil {
		return err
	}
	for i, v := range bytesFloats(got) {
		if v != wantY[i] {
			return fmt.Errorf("%s: saxpy y[%d] = %g, the host computes %g", what, i, v, wantY[i])
		}
	}
	sums, err := wk.sums.Read(ctx)
	if err != nil {
		return err
	}
	n := uint64(len(wantY))
	for g := uint64(0); g < uint64(len(sums)/4); g++ {
		items := min(reduceGroup, n-g*reduceGroup)
		want := uint32(items) * uint32(steps)
		if v := binary.LittleEndian.Uint32(sums[4*g:]); v != want {
			return fmt.Errorf("%s: reduce_u32 sum %d = %d, the host computes %d", what, g, v, want)
		}
	}
	return nil
}

// checkKept reads every kept buffer back (they were relocated).
func checkKept(ctx context.Context, history []kept) error {
	for i, h := range history {
		got, err := h.b.Read(ctx)
		if err != nil {
			return err
		}
		for j, v := range bytesFloats(got) {
			if v != h.want[j] {
				return fmt.Errorf("kept buffer of round %d lost float %d across relocation: %g, want %g", i, j, v, h.want[j])
			}
		}
	}
	return nil
}

func saxpyHost(x, y []float32, steps int) []float32 {
	out := make([]float32, len(y))
	for i := range y {
		out[i] = y[i] + float32(steps)*a*x[i]
	}
	return out
}

func floatBytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

func bytesFloats(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func mibString(n uint64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }
