package vulkan

import (
	"bytes"
	"context"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// A copy needs a barrier before it when it reads what an earlier copy of
// the segment writes, or writes what one reads or writes; independent
// copies share one, up to maxBarrierFreeCopies.
func TestCopiesShareABarrierOnlyWhenIndependent(t *testing.T) {
	r := func(buf, off, size uint64, write bool) copyRange {
		return copyRange{buf: buf, off: off, size: size, write: write}
	}
	bt := &batch{cb: 1, copies: []copyRange{r(1, 0, 100, false), r(2, 0, 100, true)}} // 1[0,100) -> 2[0,100)
	for _, c := range []struct {
		name     string
		src, dst copyRange
		want     bool
	}{
		{"independent", r(1, 100, 50, false), r(3, 0, 50, true), false},
		{"reads the same source", r(1, 0, 50, false), r(3, 0, 50, true), false},
		{"reads what was written", r(2, 50, 10, false), r(3, 0, 10, true), true},
		{"writes what was read", r(3, 0, 10, false), r(1, 90, 10, true), true},
		{"writes what was written", r(3, 0, 10, false), r(2, 99, 10, true), true},
		{"adjacent to what was written", r(2, 100, 10, false), r(3, 0, 10, true), false},
	} {
		if got := bt.copyNeedsBarrier(c.src, c.dst); got != c.want {
			t.Errorf("%s: needs a barrier = %v, want %v", c.name, got, c.want)
		}
	}
	if !(&batch{}).copyNeedsBarrier(r(1, 0, 1, false), r(2, 0, 1, true)) {
		t.Error("the first command of a batch recorded no barrier")
	}
	full := &batch{cb: 1}
	for i := range maxBarrierFreeCopies {
		full.copies = append(full.copies, r(10, uint64(i), 1, false), r(11, uint64(i), 1, true))
	}
	if !full.copyNeedsBarrier(r(12, 0, 1, false), r(13, 0, 1, true)) {
		t.Errorf("%d copies without a barrier and no bound", maxBarrierFreeCopies+1)
	}
}

// Chained and independent copies in one batch: A -> B, B -> C (ordered by a
// barrier) and A -> D (none) leave C and D equal to A.
func TestChainedDeviceCopiesInOneBatchKeepTheirOrder(t *testing.T) {
	b := testBackend(t)
	st, err := b.NewStorage(storage.NewBudget(0))
	if err != nil {
		t.Fatal(err)
	}
	q := testQueue(t, b, 0)
	const n = 1 << 20
	var rs [4]storage.Resource
	for i := range rs {
		r, err := st.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = storage.Resource{Region: r}
	}
	a, err := b.lookup(rs[0], "test")
	if err != nil || a.mapped == nil {
		t.Skip("pages are not host-visible here")
	}
	want := bytes.Repeat([]byte("relocate"), n/8)
	copy(a.bytes(), want)
	for _, c := range [][2]int{{0, 1}, {1, 2}, {0, 3}} {
		if err := b.CopyOnDevice(q, rs[c[0]], rs[c[1]]); err != nil {
			t.Fatal(err)
		}
	}
	f, err := q.Fence()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Wait(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2, 3} {
		x, _ := b.lookup(rs[i], "test")
		if !bytes.Equal(x.bytes(), want) {
			t.Fatalf("allocation %d differs from the source after the copies", i)
		}
	}
}
