package pool

import (
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/hoststorage"
)

// A slice whose last handle besides the slice's own is released while a
// binding still holds it is pending free: out of the allocations and the
// bytes in use, counted by its effective size in BytesPendingFree, and
// still occupied; releasing the binding frees it. Sliced pages and slots
// count alike.
func TestUsageCountsABoundSliceWithoutAUserHandleAsPendingFree(t *testing.T) {
	for _, tc := range []struct {
		name string
		pool Pool
	}{
		{"sliced", NewSliced(1024, 1024, false, 32, 1, Limits{})},
		{"persistent", NewPersistent(1<<20, 32, Limits{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := hoststorage.NewHost(32, nil)
			a := singleReserve(t, tc.pool, st, 40)  // 40 + 24 padding
			b := singleReserve(t, tc.pool, st, 100) // 100 + 28
			bind := a.Binding()
			a.Release()
			u := tc.pool.Report().Usage
			if u.Allocations != 1 || u.BytesInUse != 100 || u.BytesPadding != 28 || u.BytesPendingFree != 64 {
				t.Fatalf("usage with a's slice bound but released %+v; want 1 allocation, 100 in use, 28 padding, 64 pending free", u)
			}
			if u.BytesOccupied() != 100+28+64 {
				t.Fatalf("BytesOccupied = %d, want %d", u.BytesOccupied(), 100+28+64)
			}
			if s := u.String(); !strings.Contains(s, "64 B pending free") {
				t.Fatalf("usage text %q does not name the pending-free bytes", s)
			}
			bind.Release()
			if u := tc.pool.Report().Usage; u.Allocations != 1 || u.BytesInUse != 100 || u.BytesPendingFree != 0 || u.BytesOccupied() != 128 {
				t.Fatalf("usage after the binding went %+v; want 1 allocation, 100 in use, nothing pending", u)
			}
			b.Release()
		})
	}
}
