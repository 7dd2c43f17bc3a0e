package drvkit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

func TestPoisonKeepsTheFirstDeviceFaultOnly(t *testing.T) {
	var p Poison
	p.Note(nil)
	p.Note(errors.New("a refusal"))
	p.Note(storage.ErrOutOfMemory)
	if p.Err() != nil {
		t.Fatalf("Err = %v after errors that are no device fault", p.Err())
	}
	first := fmt.Errorf("lost: %w", storage.ErrDevicePoisoned)
	p.Note(first)
	p.Note(fmt.Errorf("lost again: %w", storage.ErrDevicePoisoned))
	if p.Err() != first {
		t.Fatalf("Err = %v, want the first fault %v", p.Err(), first)
	}
}

type fakeQueue struct{ stream.Queue }

func TestNilQueueSeesTypedNils(t *testing.T) {
	var typed *fakeQueue
	if !NilQueue(nil) || !NilQueue(typed) {
		t.Fatal("a nil or typed-nil queue is not nil")
	}
	if NilQueue(&fakeQueue{}) {
		t.Fatal("a queue is nil")
	}
}
