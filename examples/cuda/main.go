// Command cuda runs kernels of its own on gpumem buffers through the cuda
// backend (the driver is loaded at run time, no cgo) and checks every result
// on the host:
//
//  1. loads kernels.ptx, hand-written PTX with saxpy (y = a·x + y) and a
//     reduction (sum_f32, shared memory and one atomic add per block);
//  2. runs the step — saxpy, then the sum of y — over buffers that grow
//     round by round past the arena's page size, keeping each round's y
//     alive, and calls Device.Cleanup between rounds, so relocations move
//     the kept buffers while kernels keep running on the new addresses;
//  3. captures the step once as a graph and launches it many times, with a
//     relocation half-way, then checks y, the accumulated sum and every
//     kept buffer.
//
// Without a CUDA driver it says so and exits with status 1. Set
// GPUMEM_LIBCUDA to load another driver library, -device to pick a GPU.
package main

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/cuda"
)

//go:embed kernels.ptx
var kernelsPTX []byte

// wholePages backs the arena's pages whole (cuMemAlloc), so that it grows
// as the rounds' buffers grow and leaves outdated pages for relocation to
// move the kept buffers off. On granular pages (the backend's default where
// the driver has virtual memory) the first growth takes the largest page,
// a page being address space there, and nothing is ever outdated.
var wholePages = gpumem.WithPageGranular(false)

func main() {
	device := flag.Int("device", 0, "CUDA device ordinal")
	launches := flag.Int("launches", 50, "graph launches of the captured step")
	flag.Parse()
	dev, err := cuda.OpenDevice(cuda.Options{Device: *device}, wholePages)
	if err != nil {
		if errors.Is(err, gpumem.ErrNotSupported) {
			fmt.Fprintln(os.Stderr, "no CUDA driver found:", err)
			fmt.Fprintln(os.Stderr, "(gpumem.Open runs buffers on the host backend: go run ./examples/basic)")
		} else {
			fmt.Fprintln(os.Stderr, "cuda:", err)
		}
		os.Exit(1)
	}
	if err := run(dev, os.Stdout, *launches); err != nil {
		dev.Close()
		fmt.Fprintln(os.Stderr, "cuda:", err)
		os.Exit(1)
	}
	if err := dev.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "cuda: close:", err)
		os.Exit(1)
	}
}

// a is saxpy's scale. With x below 1000 and y small integers, every y
// stays an integer below 2^24 for thousands of steps: exact in float32, so
// the device's fma and the host's a·x + y agree bit for bit.
const a = 2

// blockSize is both kernels' block; sum_f32 needs a power of two.
const blockSize = 256

// kernels are the example's functions.
type kernels struct{ saxpy, sum *cuda.Function }

// kept is a buffer of an earlier round and the floats it must still hold.
type kept struct {
	b    gpumem.Buffer
	want []float32
}

func run(dev *gpumem.Device, w io.Writer, launches int) error {
	ctx := context.Background()
	be, ok := dev.Backend().(*cuda.Backend)
	if !ok {
		return fmt.Errorf("device runs on the %s backend, not cuda", dev.Backend().Name())
	}
	info := be.Info()
	fmt.Fprintf(w, "device %d: %s, CUDA driver %d.%d\n", info.Ordinal, info.Name, info.DriverVersion/1000, info.DriverVersion%1000/10)
	m, err := be.LoadModule(kernelsPTX)
	if err != nil {
		return err // a *cuda.JITError carries ptxas's log
	}
	defer m.Unload() // last: after the graph is closed and the work done
	var k kernels
	if k.saxpy, err = m.Function("saxpy"); err != nil {
		return err
	}
	if k.sum, err = m.Function("sum_f32"); err != nil {
		return err
	}

	s := dev.DefaultStream()
	var history []kept
	n := uint64(1 << 16) // floats: 256 KiB, then 4x a round, to 16 MiB
	for round := range 4 {
		x, y := inputs(n, round)
		xb, yb, out, err := upload(ctx, s, x, y)
		if err != nil {
			return err
		}
		if err := step(s, k, xb, yb, out); err != nil {
			return err
		}
		y1 := saxpyHost(x, y, 1)
		if err := check(ctx, fmt.Sprintf("round %d", round), yb, out, y1, sumHost(y1)); err != nil {
			return err
		}
		history = append(history, kept{yb, y1})
		if err := errors.Join(xb.Free(), out.Free()); err != nil {
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

	// The step captured once, launched many times, with a relocation of
	// the kept buffers half-way (the graph's own pages stay in place
	// while it lives: they are guarded).
	x, y := inputs(n, 7)
	xb, yb, out, err := upload(ctx, s, x, y)
	if err != nil {
		return err
	}
	graph, err := s.Capture(ctx, func(_ context.Context, s *gpumem.Stream) error { return step(s, k, xb, yb, out) })
	if err != nil {
		return err
	}
	moved := dev.Stats().Relocation.Moves
	for i := range launches {
		if i == launches/2 {
			// Growth past the current page, then Cleanup: the kept
			// buffers' pages are outdated and move.
			big, err := s.Alloc(ctx, 8*n*4)
			if err != nil {
				return err
			}
			if err := errors.Join(big.Free(), dev.Cleanup(ctx)); err != nil {
				return err
			}
		}
		if err := graph.Launch(ctx); err != nil {
			return err
		}
	}
	// The warmup ran the step once, then each launch once more: y after
	// k steps is y + k·a·x, and out holds the sum of y after each step.
	total := 0.0
	for i := 1; i <= launches+1; i++ {
		total += sumHost(saxpyHost(x, y, i))
	}
	if err := check(ctx, "graph", yb, out, saxpyHost(x, y, launches+1), total); err != nil {
		return err
	}
	if err := checkKept(ctx, history); err != nil {
		return err
	}
	if err := graph.Close(); err != nil {
		return err
	}
	st := dev.Stats()
	if st.Relocation.Moves == 0 || st.Relocation.Moves == moved {
		return fmt.Errorf("no relocation happened between steps (%d moves in all, %d before the graph's launches): the check is void", st.Relocation.Moves, moved)
	}
	for _, h := range append(history, kept{b: xb}, kept{b: yb}, kept{b: out}) {
		if err := h.b.Free(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "saxpy and sum_f32 over up to %d floats (%s per buffer): 4 growing rounds, then the step captured once and launched %d times\n",
		n, mibString(n*4), launches)
	fmt.Fprintf(w, "growths %d; relocations moved %d allocations (%s) between steps\n",
		st.Growths, st.Relocation.Moves, mibString(st.Relocation.BytesMoved))
	fmt.Fprintln(w, "example check: every result checked on the host: ok")
	return nil
}

// step enqueues saxpy over (x, y), then the sum of y added to out, each
// an op whose kernel gets the uses' current addresses.
func step(s *gpumem.Stream, k kernels, x, y, out gpumem.Buffer) error {
	n := y.Size() / 4
	cfg, err := cuda.Linear(n, blockSize)
	if err != nil {
		return err
	}
	saxpyUses := []gpumem.Use{{Buffer: x, Access: gpumem.Read}, {Buffer: y, Access: gpumem.ReadWrite}}
	err = cuda.Enqueue(s, "saxpy", saxpyUses, func(op *cuda.Op) error {
		return op.Launch(k.saxpy, cfg, cuda.Val(n), cuda.Val(float32(a)), cuda.Use(0), cuda.Use(1))
	})
	if err != nil {
		return err
	}
	// A grid of at most 1024 blocks: the loop strides over the rest.
	sumCfg := cuda.LaunchConfig{
		Grid:      cuda.Dim3{X: uint32(min(cfg.Grid.X, 1024))},
		Block:     cuda.Dim3{X: blockSize},
		SharedMem: blockSize * 4,
	}
	sumUses := []gpumem.Use{{Buffer: y, Access: gpumem.Read}, {Buffer: out, Access: gpumem.ReadWrite}}
	return cuda.Enqueue(s, "sum", sumUses, func(op *cuda.Op) error {
		return op.Launch(k.sum, sumCfg, cuda.Use(0), cuda.Use(1), cuda.Val(n))
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

// upload allocates x, y and a zeroed one-float out on s and writes them.
func upload(ctx context.Context, s *gpumem.Stream, x, y []float32) (xb, yb, out gpumem.Buffer, err error) {
	var bufs [3]gpumem.Buffer
	for i, data := range [][]byte{floatBytes(x), floatBytes(y), make([]byte, 4)} {
		if bufs[i], err = s.Alloc(ctx, uint64(len(data))); err != nil {
			return gpumem.Buffer{}, gpumem.Buffer{}, gpumem.Buffer{}, err
		}
		if err = bufs[i].Write(ctx, data); err != nil {
			return gpumem.Buffer{}, gpumem.Buffer{}, gpumem.Buffer{}, err
		}
	}
	return bufs[0], bufs[1], bufs[2], nil
}

// check reads y and out back and compares them with the host's: y exactly,
// the sum within float32 rounding of a sum that large (relative 1e-4).
func check(ctx context.Context, what string, yb, out gpumem.Buffer, wantY []float32, wantSum float64) error {
	got, err := yb.Read(ctx)
	if err != nil {
		return err
	}
	for i, v := range bytesFloats(got) {
		if v != wantY[i] {
			return fmt.Errorf("%s: saxpy y[%d] = %g, the host computes %g", what, i, v, wantY[i])
		}
	}
	o, err := out.Read(ctx)
	if err != nil {
		return err
	}
	sum := float64(bytesFloats(o)[0])
	if rel := math.Abs(sum-wantSum) / math.Max(1, math.Abs(wantSum)); rel > 1e-4 {
		return fmt.Errorf("%s: sum_f32 = %g, the host computes %g (relative error %.2g, more than 1e-4)", what, sum, wantSum, rel)
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

func sumHost(v []float32) float64 {
	s := 0.0
	for _, f := range v {
		s += float64(f)
	}
	return s
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

func mibString(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
