// Synthetic workloads (design §13.3): deterministic generators of native
// events for tests, benchmarks and the CLI.
//
// Every workload draws from one math/rand/v2 PCG seeded with (seed, 0), so a
// (name, seed, params) triple always yields the same events, and each
// iteration of the returned sequence starts over from the seed. Times start
// at 0 and advance 1–8 µs per event. Every allocation a workload makes is
// freed before it ends, except in capture, where nothing is left either.

package trace

import (
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
)

// SynthParams scales a synthetic workload. Zero fields take the workload's
// defaults.
type SynthParams struct {
	// Allocs is the approximate number of alloc events (default 2000, at
	// most MaxSynthAllocs).
	Allocs int
	// Streams is the number of streams of multistream (default 2; at least
	// 2, at most MaxStreams). Other workloads use stream 0.
	Streams int
	// LiveBytes bounds the live set of churn and multistream (default 1 GiB).
	LiveBytes uint64
}

// MaxSynthAllocs bounds SynthParams.Allocs: ten million allocations are
// about 1.3 GB of JSONL and 20 million events in a replay's memory, more
// than any workload needs to show its shape, and a typo such as
// 2000000000000 would otherwise write until the disk is full.
const MaxSynthAllocs = 10_000_000

// Workloads lists the names Synth accepts.
func Workloads() []string {
	return []string{"growth", "churn", "metadata", "multistream", "capture", "transformer", "llm-server", "forward"}
}

// Synth returns the named synthetic workload:
//
//   - growth: sizes rising from about 1 KiB to about 256 MiB over the run,
//     every tenth allocation of the first fifth kept to the end (the early
//     long-lived allocations that strand outdated pages).
//   - churn: log-uniform sizes 512 B–64 MiB, geometric lifetimes (mean 20
//     allocations), live set bounded by LiveBytes.
//   - metadata: many short-lived allocations of at most 64 KiB between large
//     tensors (16–256 MiB) that live a few rounds.
//   - multistream: churn on Streams streams, interleaved at random.
//   - capture: a step run once as warmup (prepare), captured (begin…end),
//     then launched many times among ordinary allocations, then closed;
//     two graphs.
//   - transformer: training steps of a small transformer: weights in a
//     persistent window, optimizer state and gradient buffers made on the
//     first step and kept, activations growing through the forward pass and
//     freed in reverse through the backward pass.
//   - llm-server: an LLM server: weights in a persistent window, then
//     requests arriving and finishing at random, each with a KV cache that
//     grows as it decodes (re-allocated 1.5× larger when full), plus
//     per-step temporaries. Early requests that run long leave small
//     long-lived KV blocks; later ones are larger — the case relocation is
//     for.
//   - forward: a decoder-only transformer's forward pass with autograd on,
//     each layer the allocations and frees of one layer of the shared
//     snapshot transformer-ctx128-forward (synth_forward.go), at a shape
//     the seed draws: context 128–2,048 tokens, batch 1–8, width
//     1,024–4,096, 12–40 layers, fp16 or fp32. The weights come first; what
//     each layer keeps stays to the end of the pass while its attention
//     scores (batch × heads × context²) and temporaries come and go; the
//     backward pass frees it, last layer first, and passes repeat until
//     the allocations are made.
//
// An unknown name is an error wrapping ErrUnknownWorkload; negative
// parameters wrap ErrInvalidEvent.
func Synth(name string, seed uint64, p SynthParams) (iter.Seq[Event], error) {
	if p.Allocs < 0 || p.Streams < 0 {
		return nil, fmt.Errorf("%w: synth params allocs %d, streams %d must not be negative", ErrInvalidEvent, p.Allocs, p.Streams)
	}
	if p.Allocs > MaxSynthAllocs {
		return nil, fmt.Errorf("%w: synth allocs %d exceeds %d (MaxSynthAllocs)", ErrInvalidEvent, p.Allocs, MaxSynthAllocs)
	}
	if p.Allocs == 0 {
		p.Allocs = 2000
	}
	if p.Streams < 2 {
		p.Streams = 2
	}
	if p.Streams > MaxStreams {
		return nil, fmt.Errorf("%w: synth streams %d exceeds %d (MaxStreams)", ErrInvalidEvent, p.Streams, MaxStreams)
	}
	if p.LiveBytes == 0 {
		p.LiveBytes = 1 << 30
	}
	p.LiveBytes = min(p.LiveBytes, MaxSize)
	var run func(*gen, SynthParams)
	switch name {
	case "growth":
		run = synthGrowth
	case "churn":
		run = func(g *gen, p SynthParams) { synthChurn(g, p, 1) }
	case "metadata":
		run = synthMetadata
	case "multistream":
		run = func(g *gen, p SynthParams) { synthChurn(g, p, p.Streams) }
	case "capture":
		run = synthCapture
	case "transformer":
		run = synthTransformer
	case "llm-server":
		run = synthLLMServer
	case "forward":
		run = synthForward
	default:
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownWorkload, name, Workloads())
	}
	return func(yield func(Event) bool) {
		g := &gen{rng: rand.New(rand.NewPCG(seed, 0)), yield: yield, nextID: 1, sizes: map[uint64]uint64{}}
		run(g, p)
		g.freeAll()
	}, nil
}

// gen emits events; once the consumer stops, every method is a no-op.
type gen struct {
	rng     *rand.Rand
	yield   func(Event) bool
	stopped bool
	t       int64
	nextID  uint64
	sizes   map[uint64]uint64 // live IDs and their sizes
	order   []uint64          // live IDs in allocation order (may hold freed IDs)
	allocs  int
}

func (g *gen) emit(e Event) {
	if g.stopped {
		return
	}
	g.t += 1 + g.rng.Int64N(8)
	e.T = g.t
	if !g.yield(e) {
		g.stopped = true
	}
}

func (g *gen) alloc(size uint64, stream int) uint64 {
	size = max(1, min(size, MaxSize))
	id := g.nextID
	g.nextID++
	g.sizes[id] = size
	g.order = append(g.order, id)
	g.allocs++
	g.emit(Event{Op: OpAlloc, ID: id, Size: size, Stream: stream})
	return id
}

func (g *gen) free(id uint64) {
	if _, ok := g.sizes[id]; !ok {
		return
	}
	delete(g.sizes, id)
	g.emit(Event{Op: OpFree, ID: id})
}

// freeAll frees what is still live, oldest first.
func (g *gen) freeAll() {
	for _, id := range g.order {
		g.free(id)
	}
	g.order = nil
}

// logUniform draws from [lo, hi] with a uniform logarithm.
func (g *gen) logUniform(lo, hi uint64) uint64 {
	l, h := math.Log(float64(lo)), math.Log(float64(hi))
	v := uint64(math.Exp(l + g.rng.Float64()*(h-l)))
	return max(lo, min(v, hi))
}

func synthGrowth(g *gen, p SynthParams) {
	n := p.Allocs
	var short []uint64
	for i := 0; i < n && !g.stopped; i++ {
		frac := float64(i) / float64(n)
		center := math.Exp(math.Log(1<<10) + frac*(math.Log(256<<20)-math.Log(1<<10)))
		size := g.logUniform(uint64(center/2)+1, uint64(center*2))
		id := g.alloc(size, 0)
		if frac < 0.2 && i%10 == 0 {
			continue // early long-lived
		}
		short = append(short, id)
		for len(short) > 8 || (len(short) > 0 && g.rng.IntN(3) == 0) {
			j := g.rng.IntN(len(short))
			g.free(short[j])
			short = slices.Delete(short, j, j+1)
		}
	}
}

// death orders live allocations by the allocation count at which they die.
type death struct {
	at   int
	id   uint64
	size uint64
}

func synthChurn(g *gen, p SynthParams, streams int) {
	var live []death // kept sorted by at
	var liveBytes uint64
	for i := 0; i < p.Allocs && !g.stopped; i++ {
		for len(live) > 0 && live[0].at <= i {
			g.free(live[0].id)
			liveBytes -= live[0].size
			live = live[1:]
		}
		size := g.logUniform(512, 64<<20)
		for liveBytes+size > p.LiveBytes && len(live) > 0 {
			g.free(live[0].id)
			liveBytes -= live[0].size
			live = live[1:]
		}
		stream := 0
		if streams > 1 {
			stream = g.rng.IntN(streams)
		}
		id := g.alloc(size, stream)
		liveBytes += size
		// Geometric lifetime with mean 20 allocations.
		life := 1 + int(math.Floor(math.Log(1-g.rng.Float64())/math.Log(1-1.0/20)))
		d := death{at: i + life, id: id, size: size}
		j, _ := slices.BinarySearchFunc(live, d, func(a, b death) int {
			if a.at != b.at {
				return a.at - b.at
			}
			return int(a.id) - int(b.id)
		})
		live = slices.Insert(live, j, d)
	}
}

func synthMetadata(g *gen, p SynthParams) {
	var tensors []uint64
	for g.allocs < p.Allocs && !g.stopped {
		tensors = append(tensors, g.alloc(g.logUniform(16<<20, 256<<20), 0))
		if len(tensors) > 3 {
			g.free(tensors[0])
			tensors = tensors[1:]
		}
		small := 5 + g.rng.IntN(20)
		var meta []uint64
		for k := 0; k < small; k++ {
			meta = append(meta, g.alloc(g.logUniform(16, 64<<10), 0))
			if len(meta) > 2 || g.rng.IntN(2) == 0 {
				g.free(meta[0])
				meta = meta[1:]
			}
		}
		for _, id := range meta {
			g.free(id)
		}
	}
}

// step emits one training-like step: a few tensors allocated and freed.
func (g *gen) step(stream int, sizes []uint64) {
	ids := make([]uint64, 0, len(sizes))
	for i, s := range sizes {
		ids = append(ids, g.alloc(s, stream))
		if i%3 == 2 {
			g.free(ids[len(ids)-2])
		}
	}
	for i := len(ids) - 1; i >= 0; i-- {
		g.free(ids[i])
	}
}

func synthCapture(g *gen, p SynthParams) {
	for graph := 0; graph < 2 && !g.stopped; graph++ {
		sizes := make([]uint64, 6+g.rng.IntN(10))
		for i := range sizes {
			sizes[i] = g.logUniform(4<<10, 32<<20)
		}
		g.emit(Event{Op: OpCapture, Stream: 0, Phase: PhasePrepare, Graph: graph})
		g.step(0, sizes)
		g.emit(Event{Op: OpCapture, Stream: 0, Phase: PhaseBegin, Graph: graph})
		g.step(0, sizes)
		g.emit(Event{Op: OpCapture, Stream: 0, Phase: PhaseEnd, Graph: graph})
		for g.allocs < p.Allocs*(graph+1)/2 && !g.stopped {
			g.emit(Event{Op: OpCapture, Stream: 0, Phase: PhaseLaunch, Graph: graph})
			// Ordinary work between launches: an input and an output tensor.
			in := g.alloc(g.logUniform(64<<10, 8<<20), 0)
			out := g.alloc(g.logUniform(64<<10, 8<<20), 0)
			g.free(in)
			g.free(out)
		}
		g.emit(Event{Op: OpCapture, Stream: 0, Phase: PhaseClose, Graph: graph})
	}
}

func synthTransformer(g *gen, p SynthParams) {
	const (
		layers = 12
		hidden = 1024
		batch  = 8
		seq    = 512
		heads  = 16
		f32    = 4
	)
	weightSizes := []uint64{3 * hidden * hidden * f32, hidden * hidden * f32, 4 * hidden * hidden * f32, 4 * hidden * hidden * f32, hidden * f32, hidden * f32}
	g.emit(Event{Op: OpWindow, Stream: 0, Mode: ModePersistent})
	g.alloc(50257*hidden*f32, 0) // embedding
	var weights []uint64
	for range layers {
		for _, s := range weightSizes {
			weights = append(weights, g.alloc(s, 0))
		}
	}
	g.emit(Event{Op: OpWindow, Stream: 0, Mode: ModeAuto})
	act := uint64(batch * seq * hidden * f32)
	scores := uint64(batch * heads * seq * seq * f32)
	for step := 0; g.allocs < p.Allocs && !g.stopped; step++ {
		input := g.alloc(batch*seq*8, 0)
		// Forward: per layer, activations kept for backward, temporaries freed.
		var saved [][]uint64
		for range layers {
			qkv := g.alloc(3*act, 0)
			s := g.alloc(scores, 0)
			prob := g.alloc(scores, 0)
			tmp := g.alloc(act, 0)
			g.free(tmp)
			attn := g.alloc(act, 0)
			mlp := g.alloc(4*act, 0)
			gelu := g.alloc(4*act, 0)
			out := g.alloc(act, 0)
			g.free(s)
			saved = append(saved, []uint64{qkv, prob, attn, mlp, gelu, out})
		}
		logits := g.alloc(uint64(batch*seq)*50257*f32/8, 0)
		loss := g.alloc(f32, 0)
		g.free(logits)
		// Backward: reverse order; gradient buffers made on the first step.
		if step == 0 {
			for _, w := range weights {
				g.alloc(g.sizes[w], 0) // gradients live for the whole run
			}
		}
		for l := layers - 1; l >= 0 && !g.stopped; l-- {
			dOut := g.alloc(act, 0)
			dMLP := g.alloc(4*act, 0)
			g.free(dMLP)
			dScores := g.alloc(scores, 0)
			g.free(dScores)
			g.free(dOut)
			for i := len(saved[l]) - 1; i >= 0; i-- {
				g.free(saved[l][i])
			}
		}
		g.free(loss)
		g.free(input)
		// Optimizer: Adam moments made on the first step, then kept.
		if step == 0 {
			for _, w := range weights {
				g.alloc(g.sizes[w], 0) // first and second moments, kept
				g.alloc(g.sizes[w], 0)
			}
		}
		for _, w := range weights[:6] {
			tmp := g.alloc(g.sizes[w], 0)
			g.free(tmp)
		}
	}
}

func synthLLMServer(g *gen, p SynthParams) {
	const (
		kvPerToken = 2 * 32 * 8 * 128 * 2 // K and V, 32 layers, 8 KV heads, dim 128, fp16
		pageTokens = 16
		maxBatch   = 24
	)
	g.emit(Event{Op: OpWindow, Stream: 0, Mode: ModePersistent})
	for range 32 {
		g.alloc(g.logUniform(8<<20, 64<<20), 0)
	}
	g.emit(Event{Op: OpWindow, Stream: 0, Mode: ModeAuto})
	type request struct {
		kv       uint64
		capacity int // tokens the KV block holds
		tokens   int
		remain   int // tokens still to generate
	}
	var active []*request
	for g.allocs < p.Allocs && !g.stopped {
		// Arrivals: later requests have longer prompts (the load grows).
		progress := float64(g.allocs) / float64(p.Allocs)
		for len(active) < maxBatch && g.rng.IntN(3) == 0 {
			prompt := int(g.logUniform(16, uint64(64+progress*1984)))
			out := 8 + g.rng.IntN(64)
			if g.rng.IntN(10) == 0 {
				out = 400 + g.rng.IntN(400) // a long conversation
			}
			capTokens := (prompt + pageTokens) / pageTokens * pageTokens
			r := &request{capacity: capTokens, tokens: prompt, remain: out}
			r.kv = g.alloc(uint64(capTokens)*kvPerToken, 0)
			active = append(active, r)
		}
		// One decode step: temporaries sized by the batch.
		n := uint64(max(len(active), 1))
		logits := g.alloc(n*32000*2, 0)
		hiddenBuf := g.alloc(n*4096*2, 0)
		g.free(logits)
		g.free(hiddenBuf)
		// Every request generates one token; a full KV block grows 1.5×.
		kept := active[:0]
		for _, r := range active {
			r.tokens++
			r.remain--
			if r.remain <= 0 {
				g.free(r.kv)
				continue
			}
			if r.tokens >= r.capacity {
				newCap := (r.capacity*3/2 + pageTokens) / pageTokens * pageTokens
				nkv := g.alloc(uint64(newCap)*kvPerToken, 0)
				g.free(r.kv)
				r.kv, r.capacity = nkv, newCap
			}
			kept = append(kept, r)
		}
		active = kept
	}
}
