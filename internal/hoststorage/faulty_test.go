package hoststorage_test

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// design §12.1 scenario 3: Faulty refuses exactly on cue and forwards
// otherwise. Each subtest checks the refusal, the count, and that a refusal
// changed nothing in the inner storage.
func TestFaultyRefusesExactlyOnCueAndForwardsOtherwise(t *testing.T) {
	t.Run("forwards when no cue is set", func(t *testing.T) {
		inner := hoststorage.NewHost(256, nil)
		f := hoststorage.NewFaulty(inner)
		if f.Inner() != inner || f.Alignment() != 256 {
			t.Fatal("Faulty does not forward to its inner storage")
		}
		r, err := f.Alloc(100)
		if err != nil {
			t.Fatal(err)
		}
		if inner.BytesAllocated() != 100 || f.BytesAllocated() != 100 {
			t.Fatal("Alloc was not forwarded")
		}
		if _, err := f.Resolve(r); err != nil {
			t.Fatal(err)
		}
		if f.CheckCopy() != nil || f.CheckWait() != nil {
			t.Fatal("copies or waits refused with no cue")
		}
		f.Dealloc(r.ID)
		f.Flush()
		if inner.BytesAllocated() != 0 || f.Refusals() != 0 {
			t.Fatalf("after dealloc: bytes %d refusals %d", inner.BytesAllocated(), f.Refusals())
		}
	})
	t.Run("RefuseAllocAbove", func(t *testing.T) {
		inner := hoststorage.NewSim(32, nil)
		f := hoststorage.NewFaulty(inner)
		f.RefuseAllocAbove(1000)
		if _, err := f.Alloc(600); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Alloc(400); err != nil {
			t.Fatalf("an allocation up to the limit was refused: %v", err)
		}
		_, err := f.Alloc(1)
		if !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("above the limit: %v, want ErrOutOfMemory", err)
		}
		var oom *storage.OutOfMemoryError
		if !errors.As(err, &oom) || oom.Requested != 1 || oom.Allocated != 1000 {
			t.Fatalf("refusal carries %+v", oom)
		}
		if inner.BytesAllocated() != 1000 || f.Refusals() != 1 {
			t.Fatalf("bytes %d refusals %d", inner.BytesAllocated(), f.Refusals())
		}
		f.RefuseAllocAbove(0)
		if _, err := f.Alloc(1); err != nil {
			t.Fatalf("RefuseAllocAbove(0) did not turn it off: %v", err)
		}
	})
	t.Run("RefuseNextAllocs", func(t *testing.T) {
		inner := hoststorage.NewSim(32, nil)
		f := hoststorage.NewFaulty(inner)
		f.RefuseNextAllocs(2)
		for i := range 2 {
			if _, err := f.Alloc(10); !errors.Is(err, storage.ErrOutOfMemory) {
				t.Fatalf("allocation %d: %v, want a refusal", i, err)
			}
		}
		if _, err := f.Alloc(10); err != nil {
			t.Fatalf("third allocation refused: %v", err)
		}
		if f.Refusals() != 2 || inner.BytesAllocated() != 10 {
			t.Fatalf("refusals %d bytes %d", f.Refusals(), inner.BytesAllocated())
		}
	})
	t.Run("RefuseAllocIf", func(t *testing.T) {
		inner := hoststorage.NewSim(32, nil)
		f := hoststorage.NewFaulty(inner)
		f.RefuseAllocIf(func(size uint64) bool { return size%2 == 1 })
		if _, err := f.Alloc(3); !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("odd size: %v", err)
		}
		if _, err := f.Alloc(4); err != nil {
			t.Fatalf("even size: %v", err)
		}
		f.RefuseAllocIf(nil)
		if _, err := f.Alloc(3); err != nil {
			t.Fatalf("RefuseAllocIf(nil) did not turn it off: %v", err)
		}
		if f.Refusals() != 1 || inner.BytesAllocated() != 7 {
			t.Fatalf("refusals %d bytes %d", f.Refusals(), inner.BytesAllocated())
		}
	})
	t.Run("RefuseResolve", func(t *testing.T) {
		f := hoststorage.NewFaulty(hoststorage.NewHost(32, nil))
		r, _ := f.Alloc(64)
		f.RefuseResolve(true)
		if _, err := f.Resolve(r); !errors.Is(err, storage.ErrUnknownRegion) {
			t.Fatalf("refused resolve: %v, want ErrUnknownRegion", err)
		}
		f.RefuseResolve(false)
		if _, err := f.Resolve(r); err != nil {
			t.Fatalf("resolve after turning it off: %v", err)
		}
		if f.Refusals() != 1 {
			t.Fatalf("refusals %d", f.Refusals())
		}
	})
	t.Run("RefuseCopies and RefuseWaits count from the call", func(t *testing.T) {
		f := hoststorage.NewFaulty(hoststorage.NewSim(32, nil))
		var inj hoststorage.FaultInjector = f
		_ = inj.CheckCopy() // counted before the cue: must not shift it
		f.RefuseCopies(func(n int) bool { return n == 2 })
		got := []bool{inj.CheckCopy() != nil, inj.CheckCopy() != nil, inj.CheckCopy() != nil}
		if got[0] || !got[1] || got[2] {
			t.Fatalf("copy refusals %v, want only the second", got)
		}
		f.RefuseWaits(func(n int) bool { return n == 1 })
		if err := inj.CheckWait(); !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("first wait: %v, want a refusal", err)
		}
		if inj.CheckWait() != nil {
			t.Fatal("second wait refused")
		}
		f.RefuseCopies(nil)
		f.RefuseWaits(nil)
		if inj.CheckCopy() != nil || inj.CheckWait() != nil {
			t.Fatal("nil predicates did not turn refusals off")
		}
		if f.Refusals() != 2 {
			t.Fatalf("refusals %d, want 2", f.Refusals())
		}
	})
	t.Run("FailWith sets the error refusals return", func(t *testing.T) {
		inner := hoststorage.NewSim(32, nil)
		f := hoststorage.NewFaulty(inner)
		lost := errors.Join(errors.New("device lost"), storage.ErrDevicePoisoned)
		f.FailWith(lost)
		f.RefuseNextAllocs(1)
		f.RefuseResolve(true)
		f.RefuseCopies(func(int) bool { return true })
		if _, err := f.Alloc(8); !storage.IsDevicePoisoned(err) {
			t.Fatalf("alloc refusal: %v", err)
		}
		if _, err := f.Resolve(storage.Region{ID: 1}); !storage.IsDevicePoisoned(err) {
			t.Fatalf("resolve refusal: %v", err)
		}
		if err := f.CheckCopy(); !storage.IsDevicePoisoned(err) {
			t.Fatalf("copy refusal: %v", err)
		}
		f.FailWith(nil)
		f.RefuseNextAllocs(1)
		if _, err := f.Alloc(8); !errors.Is(err, storage.ErrOutOfMemory) || storage.IsDevicePoisoned(err) {
			t.Fatalf("FailWith(nil) did not restore ErrOutOfMemory: %v", err)
		}
		if _, err := f.Resolve(storage.Region{ID: 1}); !errors.Is(err, storage.ErrUnknownRegion) {
			t.Fatalf("FailWith(nil) did not restore ErrUnknownRegion: %v", err)
		}
		if f.Refusals() != 5 || inner.BytesAllocated() != 0 {
			t.Fatalf("refusals %d bytes %d", f.Refusals(), inner.BytesAllocated())
		}
	})
	t.Run("SetObserver reaches the inner storage", func(t *testing.T) {
		f := hoststorage.NewFaulty(hoststorage.NewHost(32, nil))
		var ops []string
		f.SetObserver(func(op string) { ops = append(ops, op) })
		r, _ := f.Alloc(1)
		f.Dealloc(r.ID)
		if len(ops) != 2 {
			t.Fatalf("observer saw %v", ops)
		}
	})
}
