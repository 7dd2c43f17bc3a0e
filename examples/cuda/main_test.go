package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/cuda"
	"github.com/gpumem/gpumem/internal/fakecuda"
)

// The example runs against the fake driver: its kernels run, relocations
// happen between steps, the captured step replays, and every result
// checks out on the host (run fails otherwise).
func TestExampleChecksItsResultsOnTheFakeDriver(t *testing.T) {
	dev, err := cuda.OpenDevice(cuda.Options{Library: fakecuda.Build(t)}, wholePages)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(dev, &out, 20); err != nil {
		dev.Close()
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "every result checked on the host: ok") {
		t.Fatalf("output:\n%s", out.String())
	}
	t.Log(out.String())
}
