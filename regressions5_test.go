package gpumem

import (
	"math"
	"testing"

	"github.com/gpumem/gpumem/memory"
	"github.com/gpumem/gpumem/storage"
)

func TestImpossibleDedicatedSizesFailWithAnErrorNotAPanic(t *testing.T) {
	try := func(name string, f func()) {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panicked: %v", name, r)
			}
		}()
		f()
	}
	d := openHost(t)
	s := d.DefaultStream()
	for _, m := range []memory.Mode{memory.Dedicated, memory.Persistent} {
		for _, sz := range []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 31, 1 << 62} {
			try(m.String(), func() {
				done := s.Window(m)
				defer done()
				b, err := s.Alloc(bg, sz)
				t.Logf("%v Alloc(%d): %v", m, sz, err)
				if b != nil {
					t.Logf(" enqueue: %v", s.Enqueue("x", []Use{{Buffer: b, Access: Write}}, func([]storage.Resource) error { return nil }))
					_ = b.Free()
				}
			})
		}
	}
	try("Window(99)", func() { done := s.Window(memory.Mode(99)); done() })
	try("capacity 1", func() {
		d, err := Open(WithCapacity(1))
		t.Logf("Open cap 1: %v", err)
		if d != nil {
			_, err = d.DefaultStream().Alloc(bg, 64)
			t.Logf("alloc: %v", err)
			d.Close()
		}
	})
	try("zero props", func() {
		d, err := Open(WithProperties(memory.Properties{}))
		t.Logf("Open zero props: %v", err)
		if d != nil {
			d.Close()
		}
	})
	try("sim huge", func() {
		d, err := Open(WithSim())
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		b, err := d.DefaultStream().Alloc(bg, 1<<29)
		t.Logf("sim alloc: %v", err)
		_, err = b.Read(bg)
		t.Logf("sim read: %v", err)
		_, err = b.Map(bg)
		t.Logf("sim map: %v", err)
	})
	try("closed device", func() {
		d, _ := Open()
		s := d.DefaultStream()
		b, _ := s.Alloc(bg, 64)
		tok, _ := s.PrepareCapture()
		d.Close()
		t.Logf("write: %v", b.Write(bg, []byte{1}))
		_, err := b.Read(bg)
		t.Logf("read: %v", err)
		t.Logf("sync: %v", s.Synchronize(bg))
		t.Logf("begin: %v", s.BeginCapture(tok))
		_, err = s.EndCapture(tok)
		t.Logf("end: %v", err)
		t.Logf("free: %v", b.Free())
		t.Logf("cleanup: %v", s.Cleanup(bg))
		_ = d.Report()
		_ = d.Stats()
	})
	try("Open(nil)", func() {
		d, err := Open(nil)
		t.Log(err)
		if d != nil {
			d.Close()
		}
	})
}
