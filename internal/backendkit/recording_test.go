package backendkit

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/stream"
)

// A recording keeps its first invalidation (DK2): every later refusal and
// its end report that cause, not the later ones.
func TestRecordingKeepsItsFirstInvalidation(t *testing.T) {
	r := &Recording{Owner: 7}
	if r.Invalid() != nil || r.Refuse("b", "replay") != nil {
		t.Fatal("a fresh recording is invalid")
	}
	first := r.RefuseWait("b", "host wait on the recording queue")
	if !errors.Is(first, stream.ErrCaptureUnsupported) || !errors.Is(first, stream.ErrCaptureInvalidated) {
		t.Fatalf("RefuseWait = %v, want ErrCaptureUnsupported and ErrCaptureInvalidated", first)
	}
	cross := r.RefuseCrossStream("b", "wait on incomplete step 3 of stream 1")
	if !errors.Is(cross, stream.ErrCaptureCrossStream) || !strings.Contains(cross.Error(), "host wait on the recording queue") {
		t.Fatalf("RefuseCrossStream = %v, want ErrCaptureCrossStream naming the first cause", cross)
	}
	if err := r.Refuse("b", `enqueue "x"`); !errors.Is(err, stream.ErrCaptureInvalidated) || !strings.Contains(err.Error(), "host wait") {
		t.Fatalf("Refuse = %v, want the first invalidation", err)
	}
	errs := r.Refusals("b", 7, nil)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "host wait on the recording queue") {
		t.Fatalf("Refusals by the owner of an invalidated recording = %v, want the first cause alone", errs)
	}
}

// A nil recording (none open) refuses nothing and invalidates nothing.
func TestNoRecordingRefusesNothing(t *testing.T) {
	var r *Recording
	if r.Invalid() != nil || r.Refuse("b", "replay") != nil || r.RefuseWait("b", "wait") != nil || r.Busy("b", 0, 1) != nil {
		t.Fatal("a nil recording refused a call")
	}
}

// An op recorded counts; a failed one invalidates the recording and says
// which op failed and why.
func TestRecordedCountsOpsAndAFailedOneInvalidates(t *testing.T) {
	r := &Recording{Owner: 1}
	for range 3 {
		if err := r.Recorded("b", "ok", nil); err != nil {
			t.Fatal(err)
		}
	}
	if r.Ops != 3 {
		t.Fatalf("Ops = %d after 3 recorded ops", r.Ops)
	}
	err := r.Recorded("b", "boom", errors.New("kernel refused"))
	if !errors.Is(err, stream.ErrCaptureInvalidated) || !strings.Contains(err.Error(), `op "boom" failed: kernel refused`) {
		t.Fatalf("Recorded(failed) = %v", err)
	}
	if r.Ops != 3 || r.Invalid() == nil {
		t.Fatalf("after a failed op: Ops %d, Invalid %v; want 3 and the invalidation", r.Ops, r.Invalid())
	}
}

// EndCapture's refusals: another owner, an invalidation and the device's
// doom each add their error; the owner of a clean recording gets none.
func TestRefusalsNameEachReasonForNoGraph(t *testing.T) {
	r := &Recording{Owner: 2}
	if errs := r.Refusals("b", 2, nil); len(errs) != 0 {
		t.Fatalf("Refusals of a clean recording by its owner = %v", errs)
	}
	doom := errors.New("doomed by a failed free")
	errs := r.Refusals("b", 3, doom)
	if len(errs) != 2 || !errors.Is(errs[0], stream.ErrWrongOwner) || !errors.Is(errs[1], doom) {
		t.Fatalf("Refusals(other owner, doomed) = %v", errs)
	}
	if err := NotRecording("b", 4, 2, doom); !errors.Is(err, stream.ErrCaptureState) || !errors.Is(err, doom) {
		t.Fatalf("NotRecording = %v, want ErrCaptureState joined with the doom", err)
	}
}

func TestBeginRefusesOwnerZeroAndASecondCapture(t *testing.T) {
	if err := BeginOwner("b", 0); !errors.Is(err, stream.ErrInvalid) {
		t.Fatalf("BeginOwner(0) = %v, want ErrInvalid", err)
	}
	if err := BeginOwner("b", 1); err != nil {
		t.Fatal(err)
	}
	r := &Recording{Owner: 1}
	if err := r.Busy("b", 0, 2); !errors.Is(err, stream.ErrCaptureState) {
		t.Fatalf("Busy = %v, want ErrCaptureState", err)
	}
	if err := CopyWhileRecording("b", 0); !errors.Is(err, stream.ErrCaptureState) {
		t.Fatalf("CopyWhileRecording = %v, want ErrCaptureState", err)
	}
}
