package trace

import (
	"math/rand/v2"
	"testing"
)

// The layer template frees only what it allocated before, once each, and
// keeps what the snapshot's layer keeps: ten activations, the five MLP
// intermediates, two score buffers and the dropout mask among them.
func TestForwardLayerFreesOnlyWhatItAllocated(t *testing.T) {
	freed := map[int]bool{}
	kept := map[byte]int{}
	for i, op := range forwardLayer {
		if op[0] >= '0' && op[0] <= '9' {
			j := atoi(op)
			if j >= i || forwardLayer[j][0] >= '0' && forwardLayer[j][0] <= '9' {
				t.Fatalf("op %d frees op %d (%q), not an earlier allocation", i, j, forwardLayer[j])
			}
			if freed[j] {
				t.Fatalf("op %d frees op %d a second time", i, j)
			}
			freed[j] = true
		}
	}
	for i, op := range forwardLayer {
		if !(op[0] >= '0' && op[0] <= '9') && !freed[i] {
			kept[op[0]]++
		}
	}
	if kept['A'] != 10 || kept['M'] != 5 || kept['S'] != 2 || kept['B'] != 1 {
		t.Fatalf("a layer keeps %v, want 10 activations, 5 MLP intermediates, 2 scores, 1 dropout mask", kept)
	}
}

// A pass's live bytes climb layer by layer to the weights plus every
// layer's kept bytes, and the attention scores grow with the context's
// square: the shapes the workload exists for.
func TestSynthForwardKeepsEveryLayerToTheEndOfThePass(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		s := drawForwardShape(&gen{rng: rand.New(rand.NewPCG(seed, 0))})
		if s.size('S') != s.batch*(s.hidden/s.headDim)*s.ctx*s.ctx*s.elem {
			t.Fatalf("seed %d: scores of %d bytes for %+v", seed, s.size('S'), s)
		}
		data := encodeWorkload(t, "forward", seed, SynthParams{})
		_, peak, _ := checkBalanced(t, data)
		if floor := s.weights() + s.layers*s.kept(); peak < floor {
			t.Fatalf("seed %d: peak live %d below the weights and the layers' kept bytes %d (%+v)", seed, peak, floor, s)
		}
	}
}
