package backendkit

import (
	"context"
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/stream"
)

var errEnded = errors.New("ended")

// An op sees its name and uses while its run function runs, and every
// check fails once it has returned.
func TestOpIsLiveOnlyWhileItsRunFunctionRuns(t *testing.T) {
	d, err := gpumem.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	s := d.DefaultStream()
	b, err := s.Alloc(context.Background(), 64)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	var kept *Op[stream.Queue]
	err = Enqueue("fake", s, "look", []gpumem.Use{{Buffer: b, Access: gpumem.Write}}, func(op *Op[stream.Queue]) error {
		kept = op
		if op.Name != "look" || len(op.Res) != 1 || op.Res[0].Size != 64 {
			t.Errorf("op %q with uses %v, want look with one of 64 bytes", op.Name, op.Res)
		}
		if _, err := op.Use("fake", 1); !errors.Is(err, stream.ErrInvalid) {
			t.Errorf("Use(1) of an op with one use = %v, want ErrInvalid", err)
		}
		if err := op.Live("fake", "call", false, errEnded, ""); !errors.Is(err, stream.ErrInvalid) {
			t.Errorf("Live from another goroutine = %v, want ErrInvalid", err)
		}
		return op.Live("fake", "call", true, errEnded, "")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := kept.Live("fake", "call", true, errEnded, ""); !errors.Is(err, errEnded) {
		t.Fatalf("Live after the run function returned = %v, want the ended sentinel", err)
	}
}

func TestEnqueueRefusesANilRunFunction(t *testing.T) {
	d, err := gpumem.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := Enqueue[stream.Queue]("fake", d.DefaultStream(), "nil", nil, nil); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Enqueue(nil run) = %v, want ErrInvalid", err)
	}
	// A stream whose queue is not the backend's: the host's is no *fakeQueue.
	if err := Enqueue("fake", d.DefaultStream(), "x", nil, func(*Op[*fakeQueue]) error { return nil }); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("Enqueue on another backend's stream = %v, want ErrInvalid", err)
	}
}

func TestOpenDevicePassesTheBackendsErrorOn(t *testing.T) {
	want := errors.New("no driver")
	if d, err := OpenDevice(nil, want, nil); d != nil || err != want {
		t.Fatalf("OpenDevice(nil, err) = %v, %v", d, err)
	}
}
