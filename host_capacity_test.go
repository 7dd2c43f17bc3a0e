package gpumem

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// hugeAllocEnv names the §8 case a child process of
// TestHostHugeAllocReturnsErrOutOfMemory runs.
const hugeAllocEnv = "GPUMEM_TEST_HOST_HUGE_ALLOC_CASE"

// hugeAllocCases are the reproducers of reliability 2026-12 §8: each used to
// panic (makeslice: len out of range) or kill the process (fatal error:
// runtime: out of memory) on a 23 GiB machine.
var hugeAllocCases = map[string]struct {
	opts func() []Option
	size uint64
}{
	"capacity200GiB-alloc40GiB": {func() []Option { return []Option{WithCapacity(200 << 30)} }, 40 << 30},
	"maxPage2^62-alloc2^50":     {hugeMaxPage, 1 << 50},
	"maxPage2^62-alloc2^46":     {hugeMaxPage, 1 << 46},
	"maxPage2^62-alloc64GiB":    {hugeMaxPage, 64 << 30},
	// With a capacity past the machine the budget lets them through: the
	// host's own single-allocation bound must refuse.
	"capacity2^62-maxPage2^62-alloc2^50":  {hugeCapacityAndMaxPage, 1 << 50},
	"capacity2^62-maxPage2^62-alloc2^46":  {hugeCapacityAndMaxPage, 1 << 46},
	"capacity2^62-maxPage2^62-alloc64GiB": {hugeCapacityAndMaxPage, 64 << 30},
}

func hugeMaxPage() []Option {
	return []Option{WithProperties(Properties{MaxPageSize: 1 << 62, Alignment: 32})}
}

func hugeCapacityAndMaxPage() []Option { return append(hugeMaxPage(), WithCapacity(1<<62)) }

// Reliability 2026-12 §8: a host allocation the process cannot get returns
// ErrOutOfMemory, never a panic or a fatal runtime error. Each case runs in
// a child process, so a crash fails the case instead of killing the suite.
func TestHostHugeAllocReturnsErrOutOfMemory(t *testing.T) {
	if name := os.Getenv(hugeAllocEnv); name != "" {
		runHugeAllocCase(t, name)
		return
	}
	for name, c := range hugeAllocCases {
		if m := hoststorage.MachineMemory(); m != 0 && c.size+(64<<20) < m {
			// Not beyond this machine: the allocation would be real.
			t.Logf("%s: skipped, %d bytes fit in this machine's %d", name, c.size, m)
			continue
		}
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHostHugeAllocReturnsErrOutOfMemory$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), hugeAllocEnv+"="+name)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child for %s failed (%v): a crash or a wrong error:\n%s", name, err, out)
			}
			if !strings.Contains(string(out), "huge-alloc-ok "+name) {
				t.Fatalf("child for %s exited 0 without running the case:\n%s", name, out)
			}
		})
	}
}

func runHugeAllocCase(t *testing.T, name string) {
	c, ok := hugeAllocCases[name]
	if !ok {
		t.Fatalf("unknown case %q", name)
	}
	d, err := Open(c.opts()...)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b, err := d.DefaultStream().Alloc(context.Background(), c.size)
	if err == nil {
		b.Free()
		t.Fatalf("Alloc(%d) succeeded, want ErrOutOfMemory", c.size)
	}
	if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Alloc(%d): %v, want ErrOutOfMemory", c.size, err)
	}
	fmt.Printf("huge-alloc-ok %s: %v\n", name, err)
}

// The host backend without WithCapacity takes its capacity from the
// machine's memory, one budget for every stream; a set capacity is used as
// given; Sim stays unlimited.
func TestHostBackendDefaultCapacityIsTheMachinesMemory(t *testing.T) {
	h := &hostBackend{props: hostProperties(0)}
	s1, err := h.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := h.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	if h.machine == nil || h.machine.Capacity() != hoststorage.MachineMemory() {
		t.Fatalf("default host budget %v, want capacity %d", h.machine, hoststorage.MachineMemory())
	}
	r1, err := s1.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := s2.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if h.machine.Used() != 2<<20 {
		t.Fatalf("the streams' storages do not share the machine budget: used %d, want %d", h.machine.Used(), 2<<20)
	}
	s1.Dealloc(r1.ID)
	s2.Dealloc(r2.ID)

	set := storage.NewBudget(1 << 20)
	s3, err := h.NewStorage(set)
	if err != nil {
		t.Fatal(err)
	}
	var oom *storage.OutOfMemoryError
	if _, err := s3.Alloc(2 << 20); !errors.As(err, &oom) || oom.Capacity != 1<<20 {
		t.Fatalf("Alloc(2 MiB) on a set 1 MiB capacity: %v, want the set budget's refusal", err)
	}

	sim := &hostBackend{sim: true, props: hostProperties(0)}
	st, err := sim.NewStorage(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Alloc(1 << 62); err != nil || sim.machine != nil {
		t.Fatalf("Sim Alloc(2^62): %v (machine budget %v), want unlimited", err, sim.machine)
	}
}
