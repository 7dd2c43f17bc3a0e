//go:build linux

package hoststorage_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// residentBytes reads the process's resident set from /proc/self/statm.
func residentBytes(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * uint64(os.Getpagesize())
}

func TestHostUnmapGivesResidentMemoryBackAndRemappedGranulesReadZero(t *testing.T) {
	const size = 64 * mib
	h := hoststorage.NewGranularHost(32, granule, nil)
	if h.Granule() != granule {
		t.Fatalf("granule %d on linux, want %d", h.Granule(), granule)
	}
	r, err := h.Reserve(size)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Dealloc(r.ID)
	if err := h.Map(r.ID, 0, size/granule); err != nil {
		t.Fatal(err)
	}
	res, err := h.Resolve(r)
	if err != nil {
		t.Fatal(err)
	}
	before := residentBytes(t)
	for i := 0; i < len(res.Bytes); i += 4096 {
		res.Bytes[i] = 0xAB
	}
	touched := residentBytes(t)
	if touched < before+size*3/4 {
		t.Fatalf("writing 64 MiB raised resident memory from %d to %d only", before, touched)
	}
	h.Unmap(r.ID, 1, size/granule-1) // keep granule 0
	after := residentBytes(t)
	if after+size*3/4 > touched {
		t.Fatalf("unmapping 62 MiB took resident memory from %d to %d only", touched, after)
	}
	if res.Bytes[0] != 0xAB {
		t.Fatal("the granule still mapped lost its bytes")
	}
	if err := h.Map(r.ID, 1, 1); err != nil {
		t.Fatal(err)
	}
	again, err := h.Resolve(r.Sub(granule, granule))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range again.Bytes {
		if b != 0 {
			t.Fatalf("byte %d of a remapped granule reads %#x, want 0 (G3)", i, b)
		}
	}
}

func TestHostWithAlignmentTheMappingCannotHonourIsPlain(t *testing.T) {
	h := hoststorage.NewGranularHost(50, granule, nil)
	if h.Granule() != 0 || storage.GranuleOf(h) != 0 {
		t.Fatalf("alignment 50: granule %d, want 0 (plain)", h.Granule())
	}
	r, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := h.Resolve(r); err != nil || len(res.Bytes) != 100 {
		t.Fatalf("plain allocation on a non-granular host: %v", err)
	}
	if _, err := h.Reserve(mib); err == nil {
		t.Fatal("Reserve on a non-granular host succeeded")
	}
}
