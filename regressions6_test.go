package gpumem

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

func TestRecordedWriteLeavesFailureMarksUntilItRuns(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	x := mustAlloc(t, s, 64)
	_ = s.Enqueue("fail", []Use{{Buffer: x, Access: Write}}, func([]storage.Resource) error { return errors.New("boom") })
	_ = s.Synchronize(bg)
	if _, err := x.Read(bg); !errors.Is(err, ErrUnwritten) {
		t.Fatalf("precondition: %v", err)
	}
	tok, _ := s.PrepareCapture()
	_ = s.BeginCapture(tok)
	_ = s.Enqueue("w", []Use{{Buffer: x, Access: Write}}, func(r []storage.Resource) error { r[0].Bytes[0] = 1; return nil })
	g, err := s.EndCapture(tok)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	// never launched
	if _, err := x.Read(bg); !errors.Is(err, ErrUnwritten) {
		t.Fatalf("recorded (never run) write cleared the failure marks: Read err = %v", err)
	}
}
