package storage_test

import (
	"errors"
	"math"
	"sync"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

func TestBudgetTakeAndGiveAccountExactly(t *testing.T) {
	b := storage.NewBudget(100)
	if err := b.Take(60); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(41); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Take beyond capacity: %v", err)
	}
	if err := b.Take(40); err != nil {
		t.Fatalf("Take up to capacity: %v", err)
	}
	if b.Used() != 100 || b.Capacity() != 100 {
		t.Fatalf("used %d capacity %d", b.Used(), b.Capacity())
	}
	b.Give(100)
	if b.Used() != 0 {
		t.Fatalf("used %d after giving everything back", b.Used())
	}
}

func TestNilAndZeroCapacityBudgetsAreUnlimited(t *testing.T) {
	var nilBudget *storage.Budget
	if err := nilBudget.Take(math.MaxUint64); err != nil || nilBudget.Used() != 0 || nilBudget.Capacity() != 0 {
		t.Fatalf("nil budget: %v", err)
	}
	nilBudget.Give(5)
	b := storage.NewBudget(0)
	if err := b.Take(1 << 60); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(1 << 60); err != nil {
		t.Fatal(err)
	}
	if b.Used() != 1<<61 {
		t.Fatalf("used %d", b.Used())
	}
}

func TestUnlimitedBudgetRefusesATakeThatWouldOverflow(t *testing.T) {
	b := storage.NewBudget(0)
	if err := b.Take(math.MaxUint64 - 10); err != nil {
		t.Fatal(err)
	}
	if err := b.Take(100); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("overflowing Take: %v, want ErrOutOfMemory", err)
	}
	if b.Used() != math.MaxUint64-10 {
		t.Fatalf("refused Take changed used to %d", b.Used())
	}
}

func TestBudgetGivingBackMoreThanLentPanics(t *testing.T) {
	b := storage.NewBudget(10)
	_ = b.Take(5)
	defer func() {
		if recover() == nil {
			t.Fatal("Give(6) after Take(5) did not panic")
		}
		if b.Used() != 5 {
			t.Fatalf("the panicking Give changed used to %d", b.Used())
		}
	}()
	b.Give(6)
}

func TestBudgetNeverExceedsCapacityUnderConcurrentTakes(t *testing.T) {
	const capacity, workers, rounds = 1000, 8, 2000
	b := storage.NewBudget(capacity)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			size := uint64(w*37%300 + 1)
			for range rounds {
				if b.Take(size) == nil {
					if u := b.Used(); u > capacity {
						t.Errorf("used %d > capacity %d", u, capacity)
					}
					b.Give(size)
				}
			}
		})
	}
	wg.Wait()
	if b.Used() != 0 {
		t.Fatalf("used %d after balanced takes and gives", b.Used())
	}
}
