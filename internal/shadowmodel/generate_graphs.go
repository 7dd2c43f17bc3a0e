package shadowmodel

// The generator's captures and graphs (generate.go has the mix and the
// buffers).

import (
	"slices"
	"time"
)

func durationMicros(n int) time.Duration { return time.Duration(n) * time.Microsecond }

// capture allocates a, b (and c) on an owner stream and captures on stream
// s a graph that fills a, rotates it into b and fills or fails c.
func (w *genWorker) capture() {
	g := w.g
	if len(w.graphs) >= maxGraphs || w.liveBytes > g.budget || len(w.allocs)+3 > maxAllocs {
		return
	}
	s := w.r.IntN(w.streams())
	o := s
	if w.streams() > 1 && w.r.IntN(2) == 0 { // buffers of another stream's memory
		o = (s + 1 + w.r.IntN(w.streams()-1)) % w.streams()
	}
	n := 1 + w.r.Uint64N(256<<10)
	op := captureOp{S: s, Seed: w.r.Uint64(), Rot: w.r.Uint64N(n)}
	if !g.known[6] && w.r.IntN(2) == 0 {
		op.Every = 2 + w.r.IntN(3)
	}
	if g.cfg.device() {
		// Recorded device commands: every launch replays the recording,
		// which cannot fail on some launches only (Target.Rotate).
		op.Every = 0
	}
	gr := &genGraph{stream: s, every: op.Every}
	gr.a = w.alloc(o, n, auto, true)
	gr.b = w.alloc(o, n, auto, true)
	gr.c = w.alloc(o, 1+w.r.Uint64N(64<<10), auto, true)
	if o != s {
		w.sync(o) // the recording must not wait on the owner's pending writes
	}
	if !g.known[3] && w.r.IntN(2) == 0 {
		op.Scratch = 1 + w.r.Uint64N(128<<10)
	}
	op.A, op.B, op.C = gr.a.ref(w.r), gr.b.ref(w.r), gr.c.ref(w.r)
	w.nextGraph++
	gr.id, op.G = GraphID(w.nextGraph), GraphID(w.nextGraph)
	w.emit(op)
	// The warmup writes every buffer whole; the generator assumes the
	// recording seals.
	for _, a := range []*genAlloc{gr.a, gr.b, gr.c} {
		if o != s {
			a.foreign |= 1 << s
		}
		a.used |= 1 << s
		a.wrote(0, a.size, g.sim())
	}
	w.graphs = append(w.graphs, gr)
}

func (w *genWorker) launch(gr *genGraph) {
	w.emit(launchOp{G: gr.id})
	w.launched(gr)
	if gr.failing(gr.launches) && (w.g.known[4] || w.g.known[5] || w.g.known[12]) {
		w.sync(gr.stream)
	}
}

// launched applies one launch to the model of the graph's live buffers.
func (w *genWorker) launched(gr *genGraph) {
	gr.launches++
	for _, a := range []*genAlloc{gr.a, gr.b, gr.c} {
		if a.owner != gr.stream {
			a.foreign |= 1 << gr.stream
		}
		a.used |= 1 << gr.stream
		switch {
		case !a.live:
		case a == gr.c && gr.failing(gr.launches):
			a.failed = a.failed.add(0, a.size)
		default:
			a.wrote(0, a.size, w.g.sim())
		}
	}
}

func (w *genWorker) closeGraph(i int) {
	gr := w.graphs[i]
	w.graphs = slices.Delete(w.graphs, i, i+1)
	w.emit(closeOp{G: gr.id, Relaunch: w.r.IntN(2) == 0})
}

// racyClose frees the graph's buffers (sometimes; the graph keeps their
// slices), delays the graph's stream, then closes the graph while another
// goroutine launches it; afterwards it allocates buffers of the same sizes
// on the owner stream, which may reuse the slices.
func (w *genWorker) racyClose(i int) {
	gr := w.graphs[i]
	w.graphs = slices.Delete(w.graphs, i, i+1)
	freed := w.r.IntN(2) == 0
	if freed {
		for _, a := range []*genAlloc{gr.a, gr.b, gr.c} {
			for a.live {
				w.free(a)
			}
		}
	}
	w.delay(gr.stream) // Close waits for it outside the device lock
	pause := durationMicros(w.r.IntN(300))
	hold := durationMicros(500 + w.r.IntN(1500))
	w.emit(racyCloseOp{G: gr.id, Pause: pause, Hold: hold})
	if freed {
		for _, a := range []*genAlloc{gr.a, gr.b, gr.c} {
			w.alloc(a.owner, a.size, auto, true)
		}
	}
}
