package gpumem

import (
	"context"
	"math/rand/v2"
	"testing"
)

// A recording places every buffer where its rehearsal did, whatever the
// warmup: on a device with room to spare, a capture of a random sequence of
// allocations and frees seals, with no reservation the recording could not
// serve from the room its rehearsal held. The arena carves from the
// tightest page (pool PL33), so a page the rehearsal adds late is a
// candidate for its early reservations on the next run; the rehearsal
// repeats until a run adds no page (rehearseSettledLocked), and with a
// single run some of these sequences fail with ErrPageUpdateForbidden.
func TestRecordingRepeatsItsRehearsalOnRandomWarmups(t *testing.T) {
	cases := 2000
	if testing.Short() {
		cases = 200
	}
	for seed := range uint64(cases) {
		steps := randomCaptureSteps(rand.New(rand.NewPCG(seed, 23)))
		d, err := Open(append(capacityOptions(1<<30), WithSim())...)
		if err != nil {
			t.Fatal(err)
		}
		g, err := d.DefaultStream().Capture(bg, steps.run)
		if err != nil {
			d.Close()
			t.Fatalf("seed %d (%d steps): capture: %v", seed, len(steps), err)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// captureSteps is a sequence of allocations (size > 0) and frees (size 0:
// the free of the live buffer at index victim % live).
type captureSteps []struct {
	size   uint64
	victim int
}

// randomCaptureSteps draws 4 to 24 steps, sizes from 256 KiB to 40 MiB in
// 256 KiB steps (several to a page and more than a page, so the arena
// grows), a free a third of the time.
func randomCaptureSteps(r *rand.Rand) captureSteps {
	steps := make(captureSteps, 4+r.IntN(21))
	for i := range steps {
		if i > 0 && r.IntN(3) == 0 {
			steps[i].victim = r.IntN(1 << 20)
			continue
		}
		steps[i].size = uint64(1+r.IntN(160)) * mib / 4
	}
	return steps
}

// run applies the steps on s and frees what is left, in order.
func (steps captureSteps) run(ctx context.Context, s *Stream) error {
	var live []Buffer
	for _, st := range steps {
		if st.size == 0 {
			if len(live) == 0 {
				continue
			}
			i := st.victim % len(live)
			if err := live[i].Free(); err != nil {
				return err
			}
			live = append(live[:i], live[i+1:]...)
			continue
		}
		b, err := s.Alloc(ctx, st.size)
		if err != nil {
			return err
		}
		live = append(live, b)
	}
	for _, b := range live {
		if err := b.Free(); err != nil {
			return err
		}
	}
	return nil
}
