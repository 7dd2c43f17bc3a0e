package backendkit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpumem/gpumem/storage"
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
