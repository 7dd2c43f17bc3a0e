package hoststorage_test

import (
	"errors"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

const mib = 1 << 20

func base(t *testing.T, s storage.Storage, r storage.Region) uintptr {
	t.Helper()
	res, err := s.Resolve(r)
	if err != nil {
		t.Fatalf("Resolve(%+v): %v", r, err)
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(res.Bytes)))
}

// design §12.1 scenario 1: alloc then dealloc.
func TestHostDeallocReturnsBytesAndForgetsTheID(t *testing.T) {
	h := hoststorage.NewHost(0, nil)
	if h.Alignment() != storage.DefaultAlignment || storage.DefaultAlignment != 32 {
		t.Fatalf("default alignment %d, want 32", h.Alignment())
	}
	r, err := h.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset != 0 || r.Size != 1000 || r.ID == 0 {
		t.Fatalf("Alloc(1000) = %+v", r)
	}
	if h.BytesAllocated() != 1000 {
		t.Fatalf("BytesAllocated = %d, want 1000", h.BytesAllocated())
	}
	h.Dealloc(r.ID)
	if h.BytesAllocated() != 0 {
		t.Fatalf("BytesAllocated after dealloc = %d, want 0", h.BytesAllocated())
	}
	if _, err := h.Resolve(r); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatalf("Resolve of a deallocated region: %v, want ErrUnknownRegion", err)
	}
	h.Dealloc(r.ID) // an unknown ID is ignored
	if h.BytesAllocated() != 0 {
		t.Fatal("a second Dealloc changed the count")
	}
	h.Flush()
	again, err := h.Alloc(1000)
	if err != nil {
		t.Fatalf("realloc: %v", err)
	}
	if again.ID == r.ID {
		t.Fatal("a realloc reused the old ID")
	}
	if _, err := h.Resolve(again); err != nil {
		t.Fatalf("Resolve after realloc: %v", err)
	}
}

// design §12.1 scenario 1: placement of live allocations.
func TestHostLiveAllocationsNeverOverlapAndBasesAreAligned(t *testing.T) {
	for _, align := range []uint64{32, 256, 50} {
		h := hoststorage.NewHost(align, nil)
		type span struct{ lo, hi uintptr }
		var live []span
		var regions []storage.Region
		for i, size := range []uint64{1, 31, 32, 33, 100, 255, 256, 257, 4096, 50, 7} {
			r, err := h.Alloc(size)
			if err != nil {
				t.Fatal(err)
			}
			p := base(t, h, r)
			if uint64(p)%align != 0 {
				t.Fatalf("alignment %d: allocation %d of %d bytes at %#x", align, i, size, p)
			}
			s := span{p, p + uintptr(size)}
			for _, o := range live {
				if s.lo < o.hi && o.lo < s.hi {
					t.Fatalf("alignment %d: [%#x, %#x) overlaps [%#x, %#x)", align, s.lo, s.hi, o.lo, o.hi)
				}
			}
			live = append(live, s)
			regions = append(regions, r)
			// Every live allocation keeps its bytes: write a tag, check later.
			res, _ := h.Resolve(r)
			res.Bytes[0] = byte(i + 1)
		}
		for i, r := range regions {
			res, _ := h.Resolve(r)
			if res.Bytes[0] != byte(i+1) {
				t.Fatalf("alignment %d: allocation %d lost its byte", align, i)
			}
		}
	}
}

// design §12.1 scenario 2.
func TestHostWindowAtOffset24Size8ReadsExactlyBytes24To31(t *testing.T) {
	h := hoststorage.NewHost(32, nil)
	r, err := h.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := h.Resolve(r)
	if !slices.Equal(whole.Bytes, make([]byte, 64)) {
		t.Fatal("memory read before any write is not zero")
	}
	for i := range whole.Bytes {
		whole.Bytes[i] = byte(i)
	}
	win, err := h.Resolve(r.Sub(24, 8))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(win.Bytes, []byte{24, 25, 26, 27, 28, 29, 30, 31}) {
		t.Fatalf("window bytes %v", win.Bytes)
	}
	if cap(win.Bytes) != 8 {
		t.Fatalf("window capacity %d lets an append spill past it", cap(win.Bytes))
	}
	if win.Offset != 24 || win.Size != 8 || win.ID != r.ID {
		t.Fatalf("window region %+v", win.Region)
	}
	for _, out := range []storage.Region{r.Sub(60, 8), r.Sub(65, 0), {ID: r.ID, Offset: math.MaxUint64, Size: 2}} {
		if _, err := h.Resolve(out); !errors.Is(err, storage.ErrUnknownRegion) {
			t.Fatalf("window %+v outside the allocation: %v, want ErrUnknownRegion", out, err)
		}
	}
}

// design §12.1 scenario 2: zero-size allocations.
func TestHostZeroSizeAllocationTakesNoBudgetAndResolvesToEmptySlice(t *testing.T) {
	b := storage.NewBudget(1024)
	h := hoststorage.NewHost(32, b)
	r, err := h.Alloc(0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Used() != 0 || h.BytesAllocated() != 0 {
		t.Fatalf("zero-size alloc took budget %d, bytes %d", b.Used(), h.BytesAllocated())
	}
	res, err := h.Resolve(r)
	if err != nil || res.Bytes == nil || len(res.Bytes) != 0 {
		t.Fatalf("Resolve of a zero-size allocation: %v, nil %v, len %d", err, res.Bytes == nil, len(res.Bytes))
	}
	h.Dealloc(r.ID)
	if b.Used() != 0 || h.BytesAllocated() != 0 {
		t.Fatal("zero-size dealloc changed the accounting")
	}
	if _, err := h.Resolve(r); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatal("a deallocated zero-size allocation still resolves")
	}
}

// design §12.1 scenario 3: the budget refuses and changes nothing.
func TestBudgetRefusesA9MiBAllocationOn8MiBChangingNothing(t *testing.T) {
	b := storage.NewBudget(8 * mib)
	h := hoststorage.NewHost(32, b)
	small, err := h.Alloc(mib)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.Alloc(9 * mib)
	if !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("9 MiB on an 8 MiB budget: %v, want ErrOutOfMemory", err)
	}
	var oom *storage.OutOfMemoryError
	if !errors.As(err, &oom) || oom.Requested != 9*mib || oom.Capacity != 8*mib || oom.Allocated != mib {
		t.Fatalf("OutOfMemoryError = %+v", oom)
	}
	if b.Used() != mib || h.BytesAllocated() != mib {
		t.Fatalf("the refusal changed accounting: budget %d, bytes %d", b.Used(), h.BytesAllocated())
	}
	if _, err := h.Resolve(small); err != nil {
		t.Fatalf("the refusal disturbed a live allocation: %v", err)
	}
	if _, err := h.Alloc(7 * mib); err != nil {
		t.Fatalf("7 MiB on the remaining 7 MiB: %v", err)
	}
}

// design §12.1 scenario 3: storages on one budget share it.
func TestStoragesOnOneBudgetShareIt(t *testing.T) {
	b := storage.NewBudget(8 * mib)
	h := hoststorage.NewHost(32, b)
	s := hoststorage.NewSim(32, b)
	if _, err := h.Alloc(5 * mib); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Alloc(4 * mib); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("second storage took 4 MiB of the 3 MiB left: %v", err)
	}
	r, err := s.Alloc(3 * mib)
	if err != nil {
		t.Fatal(err)
	}
	if b.Used() != 8*mib || h.BytesAllocated() != 5*mib || s.BytesAllocated() != 3*mib {
		t.Fatalf("budget %d host %d sim %d", b.Used(), h.BytesAllocated(), s.BytesAllocated())
	}
	s.Dealloc(r.ID)
	if _, err := h.Alloc(3 * mib); err != nil {
		t.Fatalf("bytes freed by one storage are not available to the other: %v", err)
	}
}

// design §12.1 scenario 3: Sim is accounting only.
func TestSimHolds100000AllocationsOf1MiBWithNoBytes(t *testing.T) {
	s := hoststorage.NewSim(0, nil)
	regions := make([]storage.Region, 100_000)
	for i := range regions {
		r, err := s.Alloc(mib)
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		regions[i] = r
	}
	if s.BytesAllocated() != 100_000*mib {
		t.Fatalf("BytesAllocated = %d, want %d", s.BytesAllocated(), uint64(100_000*mib))
	}
	res, err := s.Resolve(regions[99_999].Sub(mib/2, 16))
	if err != nil || res.Bytes != nil || res.Ptr != 0 {
		t.Fatalf("Sim resolve: %v, bytes %v, ptr %d", err, res.Bytes != nil, res.Ptr)
	}
	for _, r := range regions {
		s.Dealloc(r.ID)
	}
	if s.BytesAllocated() != 0 {
		t.Fatalf("BytesAllocated after freeing all = %d", s.BytesAllocated())
	}
	if _, err := s.Resolve(regions[0]); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatal("a freed Sim allocation still resolves")
	}
}

func TestHostRefusesAnAllocationTooBigToAddressWithoutPanicking(t *testing.T) {
	b := storage.NewBudget(0)
	h := hoststorage.NewHost(32, b)
	for _, size := range []uint64{math.MaxUint64, math.MaxUint64 - 31, 1 << 63} {
		if _, err := h.Alloc(size); !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("Alloc(%d): %v, want ErrOutOfMemory", size, err)
		}
	}
	if b.Used() != 0 || h.BytesAllocated() != 0 {
		t.Fatal("a refused huge allocation changed accounting")
	}
}

func TestObserverIsToldOfEveryAllocAndDealloc(t *testing.T) {
	for _, s := range []interface {
		storage.Storage
		hoststorage.Observable
	}{hoststorage.NewHost(32, nil), hoststorage.NewSim(32, nil)} {
		var ops []string
		s.SetObserver(func(op string) { ops = append(ops, op) })
		r, _ := s.Alloc(64)
		s.Dealloc(r.ID)
		s.Dealloc(r.ID) // unknown now: nothing happens, nothing told
		s.SetObserver(nil)
		r, _ = s.Alloc(64)
		s.Dealloc(r.ID)
		if !slices.Equal(ops, []string{"alloc", "dealloc"}) {
			t.Fatalf("%T observer saw %v", s, ops)
		}
	}
}

func TestDevicePoisonedIsRecognisedThroughWrapping(t *testing.T) {
	err := errors.Join(errors.New("launch"), storage.ErrDevicePoisoned)
	if !storage.IsDevicePoisoned(err) || storage.IsDevicePoisoned(storage.ErrOutOfMemory) {
		t.Fatal("IsDevicePoisoned misclassifies")
	}
}

// Reliability 2026-12 §8: a size the Go runtime cannot give (makeslice
// panics at 2^48; a mapping beyond the machine's memory is a fatal runtime
// error) is refused with ErrOutOfMemory before make is tried.
func TestHostRefusesAllocationsBeyondTheMachineWithErrOutOfMemory(t *testing.T) {
	machine := hoststorage.MachineMemory()
	b := storage.NewBudget(0)
	h := hoststorage.NewHost(32, b)
	sizes := []uint64{1 << 62, 1 << 50, 1 << 48, 1<<48 - 1, 1 << 47, 1 << 46}
	if machine != 0 {
		sizes = append(sizes, machine, machine+1, 2*machine, storage.SatSub(machine, 32))
	}
	for _, size := range sizes {
		_, err := h.Alloc(size)
		if !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("Alloc(%d) on a machine of %d bytes: %v, want ErrOutOfMemory", size, machine, err)
		}
		var oom *storage.OutOfMemoryError
		if !errors.As(err, &oom) || oom.Requested != size || oom.Limit == 0 || oom.Limit >= size || oom.Machine != machine {
			t.Fatalf("Alloc(%d): OutOfMemoryError = %+v, want Requested %d, Limit below it, Machine %d", size, oom, size, machine)
		}
		if machine != 0 && (!strings.Contains(err.Error(), "machine") || !strings.Contains(err.Error(), "WithCapacity")) {
			t.Fatalf("Alloc(%d): %q names neither the machine's memory nor the fix", size, err)
		}
	}
	if b.Used() != 0 || h.BytesAllocated() != 0 {
		t.Fatal("a refused huge allocation changed accounting")
	}
	if _, err := h.Alloc(mib); err != nil {
		t.Fatalf("a small allocation after the refusals: %v", err)
	}
}

func TestMachineMemoryIsPhysicalPlusSwapOnLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("MachineMemory reads /proc only on linux")
	}
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Skip(err)
	}
	var want uint64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && (f[0] == "MemTotal:" || f[0] == "SwapTotal:") && f[2] == "kB" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			want += n << 10
		}
	}
	// A cgroup limit below RAM+swap is the figure instead (cgroup_test.go).
	if l := hoststorage.MachineMemoryLimit(); l.From == "RAM+swap" && l.Bytes != want || l.Bytes > want {
		t.Fatalf("MachineMemoryLimit = %+v, /proc/meminfo MemTotal+SwapTotal = %d", l, want)
	}
}
