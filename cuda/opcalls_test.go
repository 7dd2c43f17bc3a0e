package cuda

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// A cuda op runs inside Enqueue on the stream's executor while the caller
// holds the device: it borrows the device for what never waits (Free,
// Clone, Window, Stats, Report) and gets ErrCalledFromOp for the rest, at
// once, instead of a deadlock (gpumem defect §7).
func TestOpCallingTheDeviceBorrowsOrIsRefused(t *testing.T) {
	forEachTarget(t, func(t *testing.T, d *gpumem.Device, b *Backend, f *fakeDriver) {
		ctx := context.Background()
		s := d.DefaultStream()
		other, err := d.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		buf := mustAlloc(t, other, 4096)
		spare := mustAlloc(t, other, 4096)
		var allocErr, enqueueErr, syncErr, freeErr error
		var cloned gpumem.Buffer
		done := make(chan error, 1)
		go func() {
			done <- s.Enqueue("calls", nil, func([]storage.Resource) error {
				_ = d.Stats()
				_ = d.Report()
				closeWindow := other.Window(0)
				closeWindow()
				cloned = buf.Clone()
				freeErr = spare.Free()
				_, allocErr = other.Alloc(ctx, 100)
				enqueueErr = other.Enqueue("inner", nil, func([]storage.Resource) error { return nil })
				syncErr = other.Synchronize(ctx)
				return nil
			})
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Enqueue of an op that calls the device did not return (deadlock)")
		}
		for name, err := range map[string]error{"Alloc": allocErr, "Enqueue": enqueueErr, "Synchronize": syncErr} {
			if !errors.Is(err, gpumem.ErrCalledFromOp) {
				t.Errorf("%s from inside a cuda op = %v, want ErrCalledFromOp", name, err)
			}
		}
		if freeErr != nil || cloned.IsZero() {
			t.Fatalf("borrowed calls: Free = %v, Clone = %v", freeErr, cloned)
		}
		if err := cloned.Free(); err != nil {
			t.Fatal(err)
		}
		// Outside an op everything works again.
		if err := s.Synchronize(ctx); err != nil {
			t.Fatal(err)
		}
		x := mustAlloc(t, other, 100)
		if err := x.Free(); err != nil {
			t.Fatal(err)
		}
		_ = buf.Free()
	})
}
