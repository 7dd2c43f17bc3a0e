package gpumem

import (
	"context"
	"testing"
)

func TestPanicInCaptureFunctionClosesTheWindow(t *testing.T) {
	d, _ := Open()
	s := d.DefaultStream()
	n := 0
	func() {
		defer func() { recover() }()
		_, _ = s.Capture(bg, func(ctx context.Context, s *Stream) error {
			n++
			if n == 2 {
				panic("user bug")
			}
			return nil
		})
	}()
	if err := d.Close(); err != nil {
		t.Fatalf("after a recovered panic in the recorded fn, Close = %v", err)
	}
}
