package relocation

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

func TestHostCopiesCopiesExactlyTheRequestedWindowAndNothingBeyond(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	const size = 4*mib + 3 // requested, never padded
	srcPage, _ := st.Alloc(8 * mib)
	dstPage, _ := st.Alloc(8 * mib)
	srcAll, _ := st.Resolve(srcPage)
	for i := range srcAll.Bytes {
		srcAll.Bytes[i] = byte(i%253 + 1) // never zero
	}
	c := StorageCopy{Source: srcPage.Sub(64, size), Target: dstPage.Sub(4096, size)}

	if err := (HostCopies{}).Copy(st, c); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	dstAll, _ := st.Resolve(dstPage)
	if !bytes.Equal(dstAll.Bytes[4096:4096+size], srcAll.Bytes[64:64+size]) {
		t.Fatal("target window does not hold the source window's bytes")
	}
	if bytes.ContainsFunc(dstAll.Bytes[:4096], func(r rune) bool { return r != 0 }) {
		t.Fatal("bytes before the target window were written")
	}
	for i, b := range dstAll.Bytes[4096+size:] {
		if b != 0 {
			t.Fatalf("byte %d past the target window was written", i)
		}
	}
	if err := (HostCopies{}).WaitDevice(); err != nil {
		t.Fatalf("WaitDevice: %v", err)
	}
	if err := (HostCopies{}).WaitCopies(); err != nil {
		t.Fatalf("WaitCopies: %v", err)
	}
}

func TestHostCopiesOnSimStorageChecksRegionsWithoutBytes(t *testing.T) {
	st := hoststorage.NewSim(32, nil)
	a, _ := st.Alloc(1 << 30) // no bytes behind it: Sim costs a map entry
	b, _ := st.Alloc(1 << 30)
	if err := (HostCopies{}).Copy(st, StorageCopy{Source: a, Target: b}); err != nil {
		t.Fatalf("Copy on Sim: %v", err)
	}
	if err := (HostCopies{}).Copy(st, StorageCopy{Source: a, Target: b.Sub(0, 1<<29)}); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("unequal sizes: err = %v, want ErrSizeMismatch", err)
	}
	st.Dealloc(b.ID)
	if err := (HostCopies{}).Copy(st, StorageCopy{Source: a, Target: b}); !errors.Is(err, storage.ErrUnknownRegion) {
		t.Fatalf("copy into a freed page: err = %v, want ErrUnknownRegion", err)
	}
}

func TestHostCopiesRefusesUnequalSizesWithoutWriting(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	a, _ := st.Alloc(64)
	b, _ := st.Alloc(64)
	ra, _ := st.Resolve(a)
	for i := range ra.Bytes {
		ra.Bytes[i] = 0xAB
	}
	err := (HostCopies{}).Copy(st, StorageCopy{Source: a, Target: b.Sub(0, 32)})
	if !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("err = %v, want ErrSizeMismatch", err)
	}
	rb, _ := st.Resolve(b)
	if !bytes.Equal(rb.Bytes, make([]byte, 64)) {
		t.Fatal("a refused copy wrote bytes")
	}
}

func TestHostCopiesHonoursFaultyRefusals(t *testing.T) {
	f := hoststorage.NewFaulty(hoststorage.NewHost(32, nil))
	a, _ := f.Alloc(64)
	b, _ := f.Alloc(64)
	c := StorageCopy{Source: a, Target: b}

	t.Run("the storage passed to Copy refuses the n-th copy", func(t *testing.T) {
		f.RefuseCopies(func(n int) bool { return n == 2 })
		defer f.RefuseCopies(nil)
		q := HostCopies{}
		if err := q.Copy(f, c); err != nil {
			t.Fatalf("copy 1: %v", err)
		}
		if err := q.Copy(f, c); !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("copy 2: err = %v, want the refusal", err)
		}
		if err := q.Copy(f, c); err != nil {
			t.Fatalf("copy 3: %v", err)
		}
	})
	t.Run("Faults refuses the n-th wait, WaitDevice and WaitCopies alike", func(t *testing.T) {
		f.FailWith(errWait)
		defer f.FailWith(nil)
		f.RefuseWaits(func(n int) bool { return n == 2 || n == 3 })
		defer f.RefuseWaits(nil)
		q := HostCopies{Faults: f}
		if err := q.WaitDevice(); err != nil {
			t.Fatalf("wait 1: %v", err)
		}
		if err := q.WaitCopies(); !errors.Is(err, errWait) {
			t.Fatalf("wait 2 (WaitCopies): err = %v, want the refusal", err)
		}
		if err := q.WaitDevice(); !errors.Is(err, errWait) {
			t.Fatalf("wait 3 (WaitDevice): err = %v, want the refusal", err)
		}
	})
	t.Run("Faults refuses copies whatever storage Copy is given", func(t *testing.T) {
		f.RefuseCopies(func(int) bool { return true })
		defer f.RefuseCopies(nil)
		if err := (HostCopies{Faults: f}).Copy(f.Inner(), c); !errors.Is(err, storage.ErrOutOfMemory) {
			t.Fatalf("err = %v, want the refusal", err)
		}
	})
	t.Run("a refused resolve fails the copy", func(t *testing.T) {
		f.RefuseResolve(true)
		defer f.RefuseResolve(false)
		if err := (HostCopies{}).Copy(f, c); !errors.Is(err, storage.ErrUnknownRegion) {
			t.Fatalf("err = %v, want ErrUnknownRegion", err)
		}
	})
	if got := f.Refusals(); got != 5 {
		t.Fatalf("Faulty counted %d refusals, want 5", got)
	}
}
