package shadowmodel

// The executor's captures and graphs: the warmup and the recording of a
// capture function, the recording's outcome, launches (some replayed ops
// fail), closes, and a close racing a launch.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// graph is a sealed graph and what it does per launch r: fill a with
// pattern (seed, r), b = rotate(a), c = pattern (seed, r, c) — or a
// failure on launches failing(r).
type graph struct {
	g        *gpumem.Graph
	base     base
	stream   int
	a, b, c  *alloc
	seed     uint64
	rot      uint64
	every    int
	launches int
	// fixed: the graph is recorded device commands (Target.Rotate), so
	// every launch writes what the recording (run 1) wrote.
	fixed bool
}

func (g *graph) failing(r int) bool { return g.every > 0 && r > 0 && r%g.every == 0 }

// run returns the pattern run that launch r writes.
func (g *graph) run(r int) int {
	if g.fixed {
		return min(r, 1)
	}
	return r
}

func (g *graph) patA(r int) rope { return g.base.pat(g.seed^uint64(r)<<20, g.a.size) }
func (g *graph) patB(r int) rope { return g.patA(r).rotate(g.rot) }
func (g *graph) patC(r int) rope { return g.base.pat(g.seed^uint64(r)<<20^0xcccc, g.c.size) }

// phase records which of a capture function's ops were enqueued.
type phase struct {
	attempted, ok [3]bool
	ran           bool
}

// run captures the graph and models the warmup, the recording's outcome
// and (through graph) later launches.
func (op captureOp) run(w *worker) {
	run := w.run
	var as [3]*alloc
	var bufs [3]gpumem.Buffer
	for i, r := range []Ref{op.A, op.B, op.C} {
		if as[i], bufs[i] = w.handle(r); as[i] == nil {
			w.void("%s is not live", r)
			return
		}
	}
	if as[0].size != as[1].size || op.Rot >= as[0].size || as[0] == as[1] || as[1] == as[2] || as[0] == as[2] {
		w.void("a capture over a%d, a%d, a%d (rotation %d): want three allocations, the first two of one size above the rotation", as[0].id, as[1].id, as[2].id, op.Rot)
		return
	}
	s, n, scratch := op.S, as[0].size, op.Scratch
	device := run.cfg.device()
	gr := &graph{base: run.base, stream: s, a: as[0], b: as[1], c: as[2], seed: op.Seed, rot: op.Rot, every: op.Every, fixed: device}
	if device {
		gr.every = 0 // recorded device commands cannot fail on some launches only
	}
	aRef, bRef, cRef := bufs[0], bufs[1], bufs[2]
	var phases [2]phase
	calls := 0
	wid, at := w.id, w.at
	violate := func(format string, args ...any) { run.violate(wid, at, format, args...) }
	fn := func(ctx context.Context, st *gpumem.Stream) error {
		calls++
		if calls > 2 {
			violate("capture function called %d times", calls)
			return errors.New("called too often")
		}
		p := &phases[calls-1]
		p.ran = true
		// counter is the run number of this instance's ops: 0 for the
		// warmup, then 1, 2, … for the launches of the recording.
		counter := calls - 2
		// The scratch buffer is freed after the rotation and a second one
		// allocated for graph-c: in the recording it takes the first one's
		// slice (stream-ordered reuse), which every launch writes twice.
		var tmp, tmp2 gpumem.Buffer
		if scratch != 0 {
			var err error
			if tmp, err = st.Alloc(ctx, scratch); err != nil {
				return err
			}
			defer func() {
				if !tmp.IsZero() {
					_ = tmp.Free()
				}
				if !tmp2.IsZero() {
					_ = tmp2.Free()
				}
			}()
		}
		// toDevice stages p into the op's use r on a device backend: at
		// recording the copy is recorded, with its bytes.
		toDevice := func(r storage.Resource, p rope) error {
			t, ok := run.d.Backend().(gpumem.HostTransfers)
			if !ok {
				return fmt.Errorf("the %s backend implements no gpumem.HostTransfers", run.d.Backend().Name())
			}
			return t.CopyToDevice(st.Queue(), r, p.materialize())
		}
		p.attempted[0] = true
		err := st.Enqueue("graph-fill", []gpumem.Use{{Buffer: aRef, Access: gpumem.Write}}, func(res []storage.Resource) error {
			counter++
			if device {
				return toDevice(res[0], gr.patA(counter))
			}
			if res[0].Bytes != nil {
				gr.patA(counter).writeTo(res[0].Bytes)
			}
			return nil
		})
		if err != nil {
			return err
		}
		p.ok[0] = true
		uses := []gpumem.Use{{Buffer: aRef, Access: gpumem.Read}, {Buffer: bRef, Access: gpumem.Write}}
		if !tmp.IsZero() {
			uses = append(uses, gpumem.Use{Buffer: tmp, Access: gpumem.Write})
		}
		p.attempted[1] = true
		if device {
			// The shadow checks a's bytes at every later read instead of
			// here: a recorded op reads nothing on the host.
			err = run.tgt.Rotate(st, "graph-rotate", uses, n, gr.rot, min(n, scratch))
		} else {
			err = st.Enqueue("graph-rotate", uses, func(res []storage.Resource) error {
				if res[0].Bytes == nil {
					return nil
				}
				if want := gr.patA(counter); !want.equal(res[0].Bytes) {
					violate("graph-rotate run %d on stream %d: input differs: %s", counter, s, diff(res[0].Bytes, want.materialize()))
				}
				run.compared.Add(uint64(len(res[0].Bytes)))
				gr.patB(counter).writeTo(res[1].Bytes)
				if len(res) > 2 {
					copy(res[2].Bytes, res[0].Bytes)
				}
				return nil
			})
		}
		if err != nil {
			return err
		}
		p.ok[1] = true
		cUses := []gpumem.Use{{Buffer: cRef, Access: gpumem.Write}}
		if !tmp.IsZero() {
			if err := tmp.Free(); err != nil {
				return err
			}
			tmp = gpumem.Buffer{}
			if tmp2, err = st.Alloc(ctx, scratch); err != nil {
				return err
			}
			cUses = append(cUses, gpumem.Use{Buffer: tmp2, Access: gpumem.Write})
		}
		p.attempted[2] = true
		err = st.Enqueue("graph-c", cUses, func(res []storage.Resource) error {
			if len(res) > 1 && res[1].Bytes != nil {
				junk(res[1].Bytes[:min(len(res[1].Bytes), 4096)]) // the second scratch: nobody reads it
			}
			if gr.failing(counter) {
				if res[0].Bytes != nil {
					junk(res[0].Bytes[:min(len(res[0].Bytes), 4096)])
				}
				return fmt.Errorf("shadow: graph-c fails on run %d", counter)
			}
			if device {
				return toDevice(res[0], gr.patC(counter))
			}
			if res[0].Bytes != nil {
				gr.patC(counter).writeTo(res[0].Bytes)
			}
			return nil
		})
		if err != nil {
			return err
		}
		p.ok[2] = true
		return nil
	}
	gate := &run.gates[s]
	gate.Lock()
	run.capturing.Add(1)
	run.captureEpoch.Add(1)
	g, err := run.streams[s].Capture(bg, fn)
	run.capturing.Add(-1)
	run.captureEpoch.Add(1)
	gate.Unlock()
	run.pulse()
	run.captures.Add(1)

	// The warmup ran for real: its enqueued ops took effect.
	warm := phases[0]
	host := !run.sim()
	for i, a := range as {
		if a.owner != s {
			a.foreign |= 1 << s
		}
		a.used |= 1 << s
		if warm.ok[i] {
			a.wrote(0, a.size, [...]rope{gr.patA(0), gr.patB(0), gr.patC(0)}[i], host)
		}
	}
	if err == nil {
		if !phases[1].ok[2] {
			w.fail("Capture returned a graph, but the recording did not enqueue every op")
		}
		gr.g = g
		w.graphs[op.G] = gr
		if ops := g.Ops(); ops != 3 {
			w.fail("graph has %d ops, want 3", ops)
		}
		return
	}
	w.log.note(err.Error())
	// A recording that could not seal marks every range it declared written.
	rec := phases[1]
	for i, a := range as {
		if rec.attempted[i] {
			a.failed = a.failed.add(0, a.size) // op i writes allocation i
		}
	}
	switch {
	case !rec.ran && errors.Is(err, gpumem.ErrOutOfMemory) && run.oomOK:
		run.ooms.Add(1) // the warmup's scratch allocation found no memory
	case rec.ran && errors.Is(err, gpumem.ErrPageUpdateForbidden) && errors.Is(err, gpumem.ErrOutOfMemory) && run.oomOK:
		// The rehearsal before the recording found no memory for the
		// scratch room (the capacity was full of other goroutines'
		// buffers, or an injected fault refused the page), and the error
		// says so: allowed, counted.
		run.ooms.Add(1)
	// Another graph sealed while this one recorded may guard the page
	// its room lies on, yet not take that room: the rehearsal's room is
	// held for the recording until the seal (R7, design §10.2). A
	// recording refused for want of held room is a violation.
	case errors.Is(err, gpumem.ErrCaptureInvalidated) && strings.Contains(err.Error(), "storage"):
		w.fail("Capture on stream %d: %v (a storage call inside the recording: cf. defect 3)", s, err)
	default:
		w.fail("Capture on stream %d: %v", s, err)
	}
}

// run replays the graph and applies the launch to the shadow of its
// buffers that are still allocated.
func (op launchOp) run(w *worker) {
	gr := w.graphs[op.G]
	if gr == nil {
		w.void("no graph %s", graphName(op.G))
		return
	}
	unlock := w.lock(gr.stream)
	err := gr.g.Launch(bg)
	unlock()
	w.run.pulse()
	if err != nil {
		w.log.note(err.Error())
		w.fail("Launch: %v", err)
		return
	}
	w.run.launches.Add(1)
	w.launched(gr)
}

func graphName(g GraphID) string { b, _ := g.MarshalText(); return string(b) }

// launched applies one accepted launch to the shadow.
func (w *worker) launched(gr *graph) {
	gr.launches++
	r := gr.launches
	for _, a := range []*alloc{gr.a, gr.b, gr.c} {
		if a.owner != gr.stream {
			a.foreign |= 1 << gr.stream
		}
		a.used |= 1 << gr.stream
	}
	host := !w.run.sim()
	p := gr.run(r)
	if a := gr.a; a.live {
		a.wrote(0, a.size, gr.patA(p), host)
	}
	if b := gr.b; b.live {
		b.wrote(0, b.size, gr.patB(p), host)
	}
	if c := gr.c; c.live {
		if gr.failing(r) {
			c.failed = c.failed.add(0, c.size)
			w.run.fails.Add(1)
		} else {
			c.wrote(0, c.size, gr.patC(p), host)
		}
	}
}

func (op closeOp) run(w *worker) {
	gr := w.graphs[op.G]
	if gr == nil {
		w.void("no graph %s", graphName(op.G))
		return
	}
	delete(w.graphs, op.G)
	w.closeGraph(gr, op.Relaunch)
}

// closeGraph closes gr; with relaunch, a launch of the closed graph must
// fail.
func (w *worker) closeGraph(gr *graph, relaunch bool) {
	unlock := w.lock(gr.stream)
	err := gr.g.Close()
	unlock()
	w.run.pulse()
	if err != nil {
		w.fail("Graph.Close: %v", err)
	}
	if relaunch {
		unlock := w.lock(gr.stream)
		err := gr.g.Launch(bg)
		unlock()
		w.run.pulse()
		if !errors.Is(err, gpumem.ErrClosed) {
			w.fail("Launch of a closed graph: %v, want ErrClosed", err)
		}
		if err == nil {
			w.launched(gr) // it did launch: keep the shadow right
		}
	}
}

// run closes the graph while another goroutine launches it (the script's
// earlier operations freed its buffers, sometimes, and delayed its
// stream: Close waits for it outside the device lock). A launch accepted
// in Close's window must not write into slices Close gave back (defect 1).
func (op racyCloseOp) run(w *worker) {
	run := w.run
	gr := w.graphs[op.G]
	if gr == nil {
		w.void("no graph %s", graphName(op.G))
		return
	}
	delete(w.graphs, op.G)
	unlock := w.lock(gr.stream)
	launched := make(chan error, 1)
	st := run.streams[gr.stream]
	pause, hold := op.Pause, op.Hold
	go func() {
		// The launch lands in Close's wait, most of the time, and its ops
		// are held back past Close's return, when the slices Close gave
		// back may already belong to new buffers.
		time.Sleep(pause)
		if err := st.Enqueue("hold", nil, func([]storage.Resource) error { time.Sleep(hold); return nil }); err != nil {
			launched <- err
			return
		}
		launched <- gr.g.Launch(bg)
	}()
	cerr := gr.g.Close()
	lerr := <-launched
	unlock()
	run.pulse()
	w.log.note(fmt.Sprintf("close %v, launch %v", cerr, lerr))
	if cerr != nil {
		w.fail("Graph.Close racing Launch: %v", cerr)
	}
	switch {
	case lerr == nil:
		run.launches.Add(1)
		w.launched(gr)
	case !errors.Is(lerr, gpumem.ErrClosed):
		w.fail("Launch racing Graph.Close: %v", lerr)
	}
}
