// The forward workload: a decoder-only transformer's forward pass with
// autograd on, as PyTorch runs it, at a context and shape drawn from the
// seed.
//
// Each layer repeats the allocations and frees of the shared snapshot
// transformer-ctx128-forward.pickle, one period of its trace (a 2.7B-class
// model at 128 tokens): layer-norm statistics, q, k and v, the rotary
// halves made and dropped, the masks, the attention scores made and dropped
// (batch × heads × context², the buffers that grow with the square of the
// context), the probabilities and dropout mask kept, then the MLP's five
// intermediates kept. What a layer keeps for the backward pass stays live to
// the end of the pass, so the live set climbs layer by layer while the
// scores and temporaries of each layer come and go above it; sizes are the
// shape's, not the snapshot's. The weights are allocated first, as the
// snapshot's prelude holds them.

package trace

// forwardShape is one model and input: batch, context (tokens), width,
// head dimension, MLP width, vocabulary, layers and bytes per element.
type forwardShape struct {
	batch, ctx, hidden, headDim, mlp, vocab, layers, elem uint64
	interleaved                                           bool
	embedAt                                               uint64
}

// forwardLayer is one layer of the snapshot's trace: a letter allocates a
// buffer of that class (forwardShape.size), a number frees the buffer the
// op at that index of the layer allocated. Buffers no op frees are what
// the layer keeps for the backward pass.
var forwardLayer = []string{
	"L", "L", "L", "1", "L", "2", "L", "4", "A", "A", "A", "A", "A", "P", "C", "C", "A",
	"H", "H", "H", "17", "18", "19", "H", "H", "H", "23", "24", "25", "C", "C", "A",
	"H", "H", "H", "32", "33", "34", "H", "H", "H", "38", "39", "40",
	"F", "F", "44", "m", "45", "m", "47", "A", "A", "S", "S", "53", "B", "S", "54",
	"F", "G", "S", "S", "61", "F", "S", "59", "A", "A", "57", "A", "68", "A",
	"10", "11", "16", "31", "12", "13", "49",
	"A", "L", "L", "L", "82", "L", "83", "L", "85", "A", "A", "72",
	"M", "M", "M", "M", "M", "A", "A", "97",
}

// size returns the bytes of a buffer of class c.
func (s forwardShape) size(c byte) uint64 {
	tokens := s.batch * s.ctx
	heads := s.hidden / s.headDim
	switch c {
	case 'A': // an activation: batch × context × width
		return tokens * s.hidden * s.elem
	case 'H': // half of one (rotate_half)
		return tokens * s.hidden * s.elem / 2
	case 'M': // an MLP intermediate
		return tokens * s.mlp * s.elem
	case 'S': // attention scores: batch × heads × context²
		return s.batch * heads * s.ctx * s.ctx * s.elem
	case 'B': // the dropout mask over them, one byte each
		return s.batch * heads * s.ctx * s.ctx
	case 'C': // rotary cosines or sines
		return s.ctx * 2 * s.headDim * s.elem
	case 'P': // position ids
		return s.ctx * 8
	case 'F': // the causal mask, in the element type
		return s.ctx * s.ctx * s.elem
	case 'G': // the causal mask as 64-bit integers
		return s.ctx * s.ctx * 8
	case 'm': // the causal mask as booleans
		return s.ctx * s.ctx
	case 'L': // layer-norm statistics, float32
		return tokens * 4
	}
	panic("trace: unknown forward buffer class " + string(c))
}

// drawForwardShape draws a shape whose weights and activations stay within
// 96 GiB: contexts from 128 to 2,048 tokens, widths of 1,024 to 4,096, 12
// to 40 layers, fp16 or fp32.
func drawForwardShape(g *gen) forwardShape {
	for {
		s := forwardShape{
			batch:   []uint64{1, 2, 4, 8}[g.rng.IntN(4)],
			ctx:     []uint64{128, 256, 384, 512, 768, 1024, 1536, 2048}[g.rng.IntN(8)],
			hidden:  []uint64{1024, 2048, 2560, 3072, 4096}[g.rng.IntN(5)],
			headDim: []uint64{64, 80, 128}[g.rng.IntN(3)],
			vocab:   []uint64{10000, 32000, 50257}[g.rng.IntN(3)],
			layers:  12 + uint64(g.rng.IntN(29)),
			elem:    []uint64{2, 4}[g.rng.IntN(2)],
		}
		if s.hidden%s.headDim != 0 {
			continue
		}
		s.interleaved = g.rng.IntN(2) == 0
		s.embedAt = uint64(g.rng.IntN(1000))
		s.mlp = 4 * s.hidden
		if g.rng.IntN(2) == 0 {
			s.mlp = (8*s.hidden/3 + 255) / 256 * 256 // a gated MLP's width
		}
		if s.weights()+s.layers*s.kept() <= 96<<30 {
			return s
		}
	}
}

// weightSizes lists the weights in the order the model's loading allocates
// them. By layer (interleaved false): the embedding, each layer's norms,
// attention and MLP matrices and bias, the final norm, the output
// projection, as a model built module by module allocates them. Interleaved:
// the order of the shared snapshot's prelude: the MLP and attention
// matrices of all layers alternating, the embedding among them at
// position embedAt (a fraction of the way, in thousandths), the output
// projection after them, the norms and biases last.
func (s forwardShape) weightSizes() []uint64 {
	attn, mlpW, norm, bias, emb := s.hidden*s.hidden*s.elem, s.hidden*s.mlp*s.elem, s.hidden*s.elem, s.mlp*s.elem, s.vocab*s.hidden*s.elem
	if !s.interleaved {
		sizes := []uint64{emb}
		for range s.layers {
			sizes = append(sizes, norm, attn, attn, attn, attn, norm, mlpW, mlpW, bias, mlpW)
		}
		return append(sizes, norm, emb)
	}
	var mats []uint64
	na, nm := 4*s.layers, 3*s.layers
	for i := uint64(0); i < max(na, nm); i++ {
		if i < nm {
			mats = append(mats, mlpW)
		}
		if i < na {
			mats = append(mats, attn)
		}
	}
	at := uint64(len(mats)) * s.embedAt / 1000
	sizes := append(append(append([]uint64{}, mats[:at]...), emb), mats[at:]...)
	sizes = append(sizes, emb)
	for range s.layers {
		sizes = append(sizes, norm, norm, bias)
	}
	return append(sizes, norm)
}

func (s forwardShape) weights() uint64 {
	var n uint64
	for _, b := range s.weightSizes() {
		n += b
	}
	return n
}

// kept is the bytes one layer keeps for the backward pass.
func (s forwardShape) kept() uint64 {
	freed := map[int]bool{}
	for _, op := range forwardLayer {
		if op[0] >= '0' && op[0] <= '9' {
			freed[atoi(op)] = true
		}
	}
	var n uint64
	for i, op := range forwardLayer {
		if !(op[0] >= '0' && op[0] <= '9') && !freed[i] {
			n += s.size(op[0])
		}
	}
	return n
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

func synthForward(g *gen, p SynthParams) {
	s := drawForwardShape(g)
	for _, b := range s.weightSizes() {
		g.alloc(b, 0)
	}
	for g.allocs < p.Allocs && !g.stopped {
		// One pass: the embedding's output, the layers, the logits.
		var pass []uint64
		pass = append(pass, g.alloc(s.size('A'), 0))
		for range s.layers {
			ids := make([]uint64, len(forwardLayer))
			for i, op := range forwardLayer {
				if op[0] >= '0' && op[0] <= '9' {
					g.free(ids[atoi(op)])
					continue
				}
				ids[i] = g.alloc(s.size(op[0]), 0)
				pass = append(pass, ids[i])
			}
		}
		logits := g.alloc(s.batch*s.ctx*s.vocab*s.elem, 0)
		loss := g.alloc(4, 0)
		g.free(logits)
		// The backward pass frees what the forward kept, last layer first.
		g.free(loss)
		for i := len(pass) - 1; i >= 0; i-- {
			g.free(pass[i])
		}
	}
}
