package capture_test

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/capture"
	"github.com/gpumem/gpumem/stream"
)

// captureIn returns a Capture driven to phase p for owner 1.
func captureIn(t *testing.T, p capture.Phase) *capture.State {
	t.Helper()
	c := &capture.State{}
	if p >= capture.Prepared {
		if err := c.Prepare(1); err != nil {
			t.Fatalf("Prepare(1): %v", err)
		}
	}
	if p >= capture.Recording {
		if err := c.Begin(1); err != nil {
			t.Fatalf("Begin(1): %v", err)
		}
	}
	return c
}

// design §12.6 #49: out-of-order calls return ErrCaptureState and change
// nothing; abort returns Prepared to NoCapture; end by another owner closes
// the window with ErrWrongOwner.
func TestCaptureRefusesOutOfOrderCallsAndEndByAnotherOwnerClosesWindow(t *testing.T) {
	type result struct {
		phase capture.Phase
		owner stream.Owner
	}
	cases := []struct {
		name  string
		from  capture.Phase
		call  func(c *capture.State) error
		want  error // nil: success
		after result
	}{
		{"begin without prepare is out of order", capture.NoCapture,
			func(c *capture.State) error { return c.Begin(1) },
			stream.ErrCaptureState, result{capture.NoCapture, 0}},
		{"second prepare while prepared is out of order", capture.Prepared,
			func(c *capture.State) error { return c.Prepare(2) },
			stream.ErrCaptureState, result{capture.Prepared, 1}},
		{"prepare while recording is out of order", capture.Recording,
			func(c *capture.State) error { return c.Prepare(1) },
			stream.ErrCaptureState, result{capture.Recording, 1}},
		{"second begin while recording is out of order", capture.Recording,
			func(c *capture.State) error { return c.Begin(1) },
			stream.ErrCaptureState, result{capture.Recording, 1}},
		{"end without a window is out of order", capture.NoCapture,
			func(c *capture.State) error { _, err := c.End(1); return err },
			stream.ErrCaptureState, result{capture.NoCapture, 0}},
		{"abort without a window is out of order", capture.NoCapture,
			func(c *capture.State) error { return c.Abort(1) },
			stream.ErrCaptureState, result{capture.NoCapture, 0}},
		{"abort of a recording window is out of order", capture.Recording,
			func(c *capture.State) error { return c.Abort(1) },
			stream.ErrCaptureState, result{capture.Recording, 1}},
		{"abort returns prepared to no capture", capture.Prepared,
			func(c *capture.State) error { return c.Abort(1) },
			nil, result{capture.NoCapture, 0}},
		{"begin moves prepared to recording", capture.Prepared,
			func(c *capture.State) error { return c.Begin(1) },
			nil, result{capture.Recording, 1}},
		{"end by the owner closes the window", capture.Recording,
			func(c *capture.State) error { _, err := c.End(1); return err },
			nil, result{capture.NoCapture, 0}},
		{"end by another owner closes the window with wrong owner", capture.Recording,
			func(c *capture.State) error { _, err := c.End(2); return err },
			stream.ErrWrongOwner, result{capture.NoCapture, 0}},
		{"end of a prepared window aborts it", capture.Prepared,
			func(c *capture.State) error { _, err := c.End(1); return err },
			stream.ErrCaptureState, result{capture.NoCapture, 0}},
		{"begin by another owner changes nothing", capture.Prepared,
			func(c *capture.State) error { return c.Begin(2) },
			stream.ErrWrongOwner, result{capture.Prepared, 1}},
		{"abort by another owner changes nothing", capture.Prepared,
			func(c *capture.State) error { return c.Abort(2) },
			stream.ErrWrongOwner, result{capture.Prepared, 1}},
		{"prepare for owner zero is invalid", capture.NoCapture,
			func(c *capture.State) error { return c.Prepare(0) },
			stream.ErrInvalid, result{capture.NoCapture, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := captureIn(t, tc.from)
			err := tc.call(c)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("got %v, want success", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if got := (result{c.Phase(), c.Owner()}); got != tc.after {
				t.Fatalf("after the call: phase %v owner %d, want phase %v owner %d",
					got.phase, got.owner, tc.after.phase, tc.after.owner)
			}
			if c.Recording() != (tc.after.phase == capture.Recording) {
				t.Fatalf("Recording() = %v in phase %v", c.Recording(), c.Phase())
			}
		})
	}
}

func TestCaptureEndReturnsTheWindowOwnerEvenToAnotherCaller(t *testing.T) {
	c := captureIn(t, capture.Recording)
	owner, err := c.End(9)
	if owner != 1 {
		t.Fatalf("End(9) owner = %d, want 1: the caller needs it to tear the queue's recording down", owner)
	}
	if !errors.Is(err, stream.ErrWrongOwner) {
		t.Fatalf("End(9) = %v, want ErrWrongOwner", err)
	}
}

func TestCaptureFailKeepsOnlyTheFirstFailureOfAWindow(t *testing.T) {
	first, second := errors.New("first"), errors.New("second")
	c := captureIn(t, capture.Recording)
	c.Fail(nil)
	c.Fail(first)
	c.Fail(second)
	if _, err := c.End(1); err != nil {
		t.Fatalf("End by owner: %v", err)
	}
	if got := c.TakeFailure(); got != first {
		t.Fatalf("TakeFailure after End = %v, want the first failure", got)
	}
	if got := c.TakeFailure(); got != nil {
		t.Fatalf("second TakeFailure = %v, want nil: taking forgets", got)
	}
}

func TestCaptureFailOutsideAWindowIsIgnored(t *testing.T) {
	c := &capture.State{}
	c.Fail(errors.New("outside"))
	if got := c.TakeFailure(); got != nil {
		t.Fatalf("TakeFailure = %v, want nil", got)
	}
}

func TestCapturePrepareClearsTheFailureOfAnEarlierWindow(t *testing.T) {
	c := captureIn(t, capture.Prepared)
	c.Fail(errors.New("warmup failure"))
	if err := c.Abort(1); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := c.Prepare(2); err != nil {
		t.Fatalf("Prepare(2): %v", err)
	}
	if got := c.TakeFailure(); got != nil {
		t.Fatalf("TakeFailure after a new Prepare = %v, want nil", got)
	}
}

func TestCaptureEndByAnotherOwnerJoinsTheRecordingFailure(t *testing.T) {
	doom := errors.New("page update forbidden")
	c := captureIn(t, capture.Recording)
	c.Fail(doom)
	_, err := c.End(2)
	if !errors.Is(err, stream.ErrWrongOwner) || !errors.Is(err, doom) {
		t.Fatalf("End(2) = %v, want ErrWrongOwner joined with the failure", err)
	}
	if got := c.TakeFailure(); got != doom {
		t.Fatalf("TakeFailure = %v, want the failure kept for the queue's EndCapture", got)
	}
}

func TestPhaseStringNamesEachPhase(t *testing.T) {
	for p, want := range map[capture.Phase]string{
		capture.NoCapture: "NoCapture",
		capture.Prepared:  "Prepared",
		capture.Recording: "Recording",
		7:                 "Phase(7)",
	} {
		if got := p.String(); got != want {
			t.Errorf("Phase(%d).String() = %q, want %q", uint8(p), got, want)
		}
	}
}
