package gpumem

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// Write on a freed buffer returns ErrAlreadyFreed whatever the data's
// length: empty, too long, or on a freed 0-byte buffer (defect §10).
func TestWriteOfNothingOnAFreedBuffer(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	b := mustAlloc(t, s, 64)
	mustFree(t, b)
	z := mustAlloc(t, s, 0)
	mustFree(t, z)
	for name, err := range map[string]error{
		"nil data":           b.Write(bg, nil),
		"more than the size": b.Write(bg, make([]byte, 65)),
		"0-byte buffer":      z.Write(bg, nil),
	} {
		if !errors.Is(err, ErrAlreadyFreed) {
			t.Errorf("Write (%s) on a freed buffer = %v, want ErrAlreadyFreed", name, err)
		}
	}
	live := mustAlloc(t, s, 8)
	if err := live.Write(bg, make([]byte, 9)); !errors.Is(err, ErrInvalidUse) {
		t.Errorf("Write of 9 bytes into a live 8-byte buffer = %v, want ErrInvalidUse", err)
	}
	if err := live.Write(bg, nil); err != nil {
		t.Errorf("Write of nothing into a live buffer = %v, want nil", err)
	}
	_ = d.Close()
	if err := live.Write(bg, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Write of nothing after Close = %v, want ErrClosed", err)
	}
}

// Zero values never panic: their methods return ErrInvalidUse or a zero
// result (defect §11).
func TestZeroValuesDoNotPanic(t *testing.T) {
	var zb Buffer
	if id := zb.ID(); id != 0 {
		t.Errorf("zero Buffer ID = %d", id)
	}
	if zb.CanMut() {
		t.Error("zero Buffer CanMut = true")
	}
	if zb.Size() != 0 || zb.Stream() != nil || !zb.Clone().IsZero() || !zb.IsZero() {
		t.Error("the zero Buffer's accessors returned non-zero results")
	}
	for name, err := range map[string]error{
		"Buffer.Free":  zb.Free(),
		"Buffer.Write": zb.Write(bg, []byte{1}),
	} {
		if !errors.Is(err, ErrInvalidUse) {
			t.Errorf("%s on a zero value = %v, want ErrInvalidUse", name, err)
		}
	}
	var zg Graph
	if err := zg.Launch(bg); !errors.Is(err, ErrInvalidUse) {
		t.Errorf("zero Graph Launch = %v, want ErrInvalidUse", err)
	}
	if err := zg.Close(); !errors.Is(err, ErrInvalidUse) {
		t.Errorf("zero Graph Close = %v, want ErrInvalidUse", err)
	}
	if n := zg.Ops(); n != 0 {
		t.Errorf("zero Graph Ops = %d", n)
	}
	var ng *Graph
	if err := ng.Launch(bg); !errors.Is(err, ErrInvalidUse) {
		t.Errorf("nil Graph Launch = %v, want ErrInvalidUse", err)
	}
	(&Mapping{}).Release()
	var nm *Mapping
	nm.Release()
	if nm.Bytes() != nil {
		t.Error("nil Mapping has bytes")
	}
}

// A freed buffer is no longer mutable in place, even by its last holder.
func TestCanMutIsFalseOnceFreed(t *testing.T) {
	d := openHost(t)
	b := mustAlloc(t, d.DefaultStream(), 64)
	if !b.CanMut() {
		t.Fatal("a fresh buffer with one reference is not mutable")
	}
	mustFree(t, b)
	if b.CanMut() {
		t.Fatal("a freed buffer reports CanMut")
	}
}

// A storage wrapper returning nil makes Open fail with ErrInvalidUse, not
// the first Alloc panic (defect §11).
func TestNilStorageWrapperFailsOpen(t *testing.T) {
	d, err := Open(WithStorageWrapper(func(storage.Storage) storage.Storage { return nil }))
	if err == nil {
		_ = d.Close()
		t.Fatal("Open with a wrapper returning nil succeeded")
	}
	if !errors.Is(err, ErrInvalidUse) {
		t.Fatalf("Open with a wrapper returning nil = %v, want ErrInvalidUse", err)
	}
}
