// Command oomcheck runs a real out-of-memory through a backend on its
// device, for the GPU kit (scripts/gpu-kit.sh builds it; the kit's
// gpu-check.sh runs it once per backend):
//
//   - fill: a device opened as a user would open it is filled with buffers
//     until an Alloc is refused. The refusal must be gpumem.ErrOutOfMemory;
//     it says whether the budget (the device's capacity as gpumem counts
//     it) or the driver refused first.
//   - driver: the same after another holder (a second device on the same
//     GPU, whose buffers the first device's budget does not see, for cuda; a
//     second Vulkan backend's buffers, allocated after this one read its
//     heap budget, for vulkan) took a quarter of the free memory, so the
//     budget still has room when the memory runs out: the refusal must be
//     the driver's own (CUDA_ERROR_OUT_OF_MEMORY,
//     VK_ERROR_OUT_OF_DEVICE_MEMORY) reaching the user as ErrOutOfMemory.
//     Skipped on a CPU Vulkan device: lavapipe hands out past its heap
//     (vulkan.TestLavapipeRefusesOnlyWhatTheHostCannotGive).
//
// After each refusal every buffer is freed, Device.Cleanup must give every
// byte back, and a buffer of 64 MiB must take a write and read it back
// intact: the device recovers.
//
// Output: "figure: NAME VALUE" lines for the kit's results, then
// "result: pass", "result: fail: WHY" or "result: skip: WHY". Exit status
// 0 pass, 1 fail, 2 skip (no such device here).
//
//	oomcheck -backend cuda|vulkan
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/cuda"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/vulkan"
)

func main() {
	backend := flag.String("backend", "", "cuda or vulkan")
	flag.Parse()
	var err error
	switch *backend {
	case "cuda":
		err = checkCUDA()
	case "vulkan":
		err = checkVulkan()
	default:
		fmt.Fprintln(os.Stderr, "usage: oomcheck -backend cuda|vulkan")
		os.Exit(2)
	}
	var sk skip
	switch {
	case errors.As(err, &sk):
		fmt.Printf("result: skip: %s\n", sk.why)
		os.Exit(2)
	case err != nil:
		fmt.Printf("result: fail: %s\n", oneLine(err.Error()))
		os.Exit(1)
	}
	fmt.Println("result: pass")
}

// skip is the answer where the check cannot run here.
type skip struct{ why string }

func (s skip) Error() string { return s.why }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func figure(name string, v any) { fmt.Printf("figure: %s %v\n", name, v) }

// refusal says who refused an Alloc: "driver", "budget" or "" (neither
// error is in the chain).
type classify func(error) (who, detail string)

func classifyCUDA(err error) (string, string) {
	var de *cuda.DriverError
	if errors.As(err, &de) {
		return "driver", fmt.Sprintf("%s %s (%d)", de.Op, de.Name, de.Code)
	}
	var be *storage.OutOfMemoryError
	if errors.As(err, &be) {
		return "budget", be.Error()
	}
	return "", ""
}

func classifyVulkan(err error) (string, string) {
	var ve *vulkan.Error
	if errors.As(err, &ve) {
		return "driver", ve.Error()
	}
	var be *storage.OutOfMemoryError
	if errors.As(err, &be) {
		return "budget", be.Error()
	}
	return "", ""
}

// fill allocates chunk-sized buffers on d until one is refused (at most
// limit bytes), then frees them all, cleans up and checks the device
// recovers. It returns who refused ("" when nothing was refused within
// limit) and prints the figures under prefix.
func fill(d *gpumem.Device, chunk, limit uint64, prefix string, cls classify) (string, error) {
	ctx := context.Background()
	s := d.DefaultStream()
	var held []gpumem.Buffer
	var total uint64
	var refusal error
	retries := d.Stats().ReserveRetries
	t0 := time.Now()
	for total+chunk <= limit {
		b, err := s.Alloc(ctx, chunk)
		if err != nil {
			refusal = err
			break
		}
		held = append(held, b)
		total += chunk
	}
	el := time.Since(t0)
	st := d.Stats()
	figure(prefix+"_buffers", len(held))
	figure(prefix+"_bytes_held", total)
	figure(prefix+"_bytes_allocated", st.BytesAllocated)
	figure(prefix+"_seconds", fmt.Sprintf("%.3f", el.Seconds()))
	figure(prefix+"_reserve_retries", st.ReserveRetries-retries)
	who := ""
	if refusal != nil {
		var detail string
		who, detail = cls(refusal)
		figure(prefix+"_refused_by", who)
		fmt.Printf("%s: Alloc of %d bytes after %d buffers (%d bytes) refused by the %s: %s\n", prefix, chunk, len(held), total, who, oneLine(refusal.Error()))
		if detail != "" {
			fmt.Printf("%s: the refusal: %s\n", prefix, detail)
		}
	} else {
		fmt.Printf("%s: %d bytes allocated in %d buffers without a refusal (the limit)\n", prefix, total, len(held))
	}
	for _, b := range held {
		if err := b.Free(); err != nil {
			return who, fmt.Errorf("%s: Free: %w", prefix, err)
		}
	}
	if err := d.Cleanup(ctx); err != nil {
		return who, fmt.Errorf("%s: Cleanup after the refusal: %w", prefix, err)
	}
	if a := d.Stats().BytesAllocated; a != 0 {
		return who, fmt.Errorf("%s: %d bytes still allocated after freeing every buffer and a cleanup", prefix, a)
	}
	if err := roundTrip(d, 64<<20); err != nil {
		return who, fmt.Errorf("%s: after the refusal: %w", prefix, err)
	}
	fmt.Printf("%s: every byte given back, then 64 MiB written and read back intact\n", prefix)
	if refusal == nil {
		return "", nil
	}
	if !errors.Is(refusal, gpumem.ErrOutOfMemory) {
		return who, fmt.Errorf("%s: the refusal %v is not gpumem.ErrOutOfMemory", prefix, refusal)
	}
	if who == "" {
		return who, fmt.Errorf("%s: the refusal %v names neither the driver nor the budget", prefix, refusal)
	}
	return who, nil
}

// roundTrip writes size bytes of a pattern into a new buffer and reads
// them back.
func roundTrip(d *gpumem.Device, size uint64) error {
	ctx := context.Background()
	b, err := d.DefaultStream().Alloc(ctx, size)
	if err != nil {
		return fmt.Errorf("Alloc(%d): %w", size, err)
	}
	defer b.Free()
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	if err := b.Write(ctx, want); err != nil {
		return fmt.Errorf("Write: %w", err)
	}
	got, err := b.Read(ctx)
	if err != nil {
		return fmt.Errorf("Read: %w", err)
	}
	if !bytes.Equal(got, want) {
		return errors.New("the bytes read back differ from those written")
	}
	return nil
}

// fillLimit is where a fill stops when nothing refused: a tenth past the
// capacity, no further, so a driver that hands out past its memory (host
// memory behind it, say) is caught without exhausting the machine.
func fillLimit(capacity uint64) uint64 { return capacity + capacity/10 }

// chunkFor is the fill's buffer size: a 64th of the memory, between
// 64 MiB and 1 GiB, in whole MiB.
func chunkFor(capacity uint64) uint64 {
	return min(max(capacity/64, 64<<20), 1<<30) >> 20 << 20
}

func checkCUDA() error {
	d, err := cuda.OpenDevice(cuda.Options{})
	if err != nil {
		if errors.Is(err, cuda.ErrNoDriver) {
			return skip{oneLine(err.Error())}
		}
		return err
	}
	defer d.Close()
	b := d.Backend().(*cuda.Backend)
	info := b.Info()
	capacity := b.Properties().MaxMemory
	freeMem, total, err := b.MemInfo()
	if err != nil {
		return err
	}
	fmt.Printf("device: %s, %d bytes, %d free, driver %d\n", info.Name, total, freeMem, info.DriverVersion)
	figure("device_bytes", total)
	figure("free_bytes", freeMem)
	chunk := chunkFor(capacity)
	who, err := fill(d, chunk, fillLimit(capacity), "fill", classifyCUDA)
	if err != nil {
		return err
	}
	if who == "" {
		return fmt.Errorf("fill: %d bytes on a device of %d without a refusal", fillLimit(capacity), capacity)
	}

	// The driver's own refusal: a second device on the same GPU (the same
	// primary context) holds a quarter of the free memory in whole pages,
	// which the first device's budget does not see, so the driver runs
	// out first.
	if freeMem, _, err = b.MemInfo(); err != nil {
		return err
	}
	d2, err := cuda.OpenDevice(cuda.Options{Device: info.Ordinal}, gpumem.WithPageGranular(false))
	if err != nil {
		return fmt.Errorf("driver: a second device on the GPU: %w", err)
	}
	var squat uint64
	var held2 []gpumem.Buffer
	for squat+chunk <= freeMem/4 {
		buf, err := d2.DefaultStream().Alloc(context.Background(), chunk)
		if err != nil {
			d2.Close()
			return fmt.Errorf("driver: the second device's buffer after %d bytes: %w", squat, err)
		}
		held2 = append(held2, buf)
		squat += chunk
	}
	figure("driver_squatter_bytes", squat)
	who, err = fill(d, chunk, fillLimit(capacity), "driver", classifyCUDA)
	for _, buf := range held2 {
		buf.Free()
	}
	if cerr := d2.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if who != "driver" {
		return fmt.Errorf("driver: with %d bytes held by a second device the refusal came from the %q, want the driver's", squat, who)
	}
	return nil
}

func checkVulkan() error {
	b, err := vulkan.NewBackend(vulkan.Options{})
	if err != nil {
		if errors.Is(err, vulkan.ErrNoLoader) || errors.Is(err, vulkan.ErrNoDevice) {
			return skip{oneLine(err.Error())}
		}
		return err
	}
	d, err := gpumem.OpenBackend(b)
	if err != nil {
		b.Close()
		return err
	}
	defer d.Close()
	info := b.Info()
	capacity := b.Properties().MaxMemory
	fmt.Printf("device: %s (%s), budget %d bytes, max page %d, memory budget extension %v\n",
		info.Name, info.Type, capacity, b.Properties().MaxPageSize, info.MemoryBudget)
	figure("heap_budget_bytes", capacity)
	chunk := min(chunkFor(capacity), b.Properties().MaxPageSize)
	who, err := fill(d, chunk, fillLimit(capacity), "fill", classifyVulkan)
	if err != nil {
		return err
	}
	if who == "" {
		return fmt.Errorf("fill: %d bytes on a heap budget of %d without a refusal (the driver hands out past its heap)", fillLimit(capacity), capacity)
	}
	if info.Type == "CPU" {
		fmt.Printf("driver: skipped: %s is a CPU device, which hands out past its heap (host memory, untouched); the budget refuses there\n", info.Name)
		figure("driver_skipped", "cpu-device")
		return nil
	}

	// The driver's own refusal: a second backend on the same device, opened
	// after this one read its heap budget, holds a quarter of it.
	b2, err := vulkan.NewBackend(vulkan.Options{Device: fmt.Sprint(info.Index)})
	if err != nil {
		return fmt.Errorf("driver: a second backend on the device: %w", err)
	}
	d2, err := gpumem.OpenBackend(b2)
	if err != nil {
		b2.Close()
		return err
	}
	var squat uint64
	var held2 []gpumem.Buffer
	for squat+chunk <= capacity/4 {
		buf, err := d2.DefaultStream().Alloc(context.Background(), chunk)
		if err != nil {
			d2.Close()
			return fmt.Errorf("driver: the second backend's buffer after %d bytes: %w", squat, err)
		}
		held2 = append(held2, buf)
		squat += chunk
	}
	figure("driver_squatter_bytes", squat)
	who, err = fill(d, chunk, fillLimit(capacity), "driver", classifyVulkan)
	for _, buf := range held2 {
		buf.Free()
	}
	if cerr := d2.Close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if who != "driver" {
		return fmt.Errorf("driver: with %d bytes held by a second backend the refusal came from the %q, want the driver's", squat, who)
	}
	return nil
}
