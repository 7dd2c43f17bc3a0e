package shadowmodel

// The executor's ops on streams: what an op must find in its inputs and
// leave in its outputs comes from the shadow when it is enqueued; the op
// checks and writes them when it runs (that catches bytes changed under a
// pending op); ops that fail, panic, or read a failed range (and so must
// be skipped, never run) exercise the failure marks.

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// junkByte is what failing ops write into their outputs before failing: a
// failure mark must hide it.
const junkByte = 0xEE

func junk(b []byte) {
	for i := range b {
		b[i] = junkByte
	}
}

// shadowUse is an op's use resolved to the goroutine's allocation.
type shadowUse struct {
	use
	a   *alloc
	buf gpumem.Buffer
}

// resolve finds the op's allocations, or says why the op is void: a
// buffer that is not live, a range outside it, or (on host) bytes the
// shadow does not know yet, read or partly written.
func (op enqueueOp) resolve(w *worker) ([]shadowUse, string) {
	us := make([]shadowUse, len(op.Uses))
	for i, u := range op.Uses {
		a, b := w.handle(u.Ref)
		switch {
		case a == nil:
			return nil, u.Ref.String() + " is not live"
		case u.Off+u.N > a.size || u.N == 0:
			return nil, fmt.Sprintf("%s is outside a%d's %d bytes", u, a.id, a.size)
		case !w.run.sim() && !a.init && (u.reads() || u.Off != 0 || u.N != a.size):
			return nil, fmt.Sprintf("a%d was never written whole", a.id)
		}
		us[i] = shadowUse{u, a, b}
	}
	// The shapes' own arguments: a rotation per output (xform, all as long
	// as the input) or one (inplace), each shorter than the range.
	rots := 0
	switch op.Shape {
	case xform:
		rots = len(us) - 1
		for _, u := range us[1:] {
			if u.N != us[0].N {
				return nil, fmt.Sprintf("xform output %s is not as long as its input", u)
			}
		}
	case inplace:
		rots = 1
	}
	if len(op.Rots) < rots {
		return nil, fmt.Sprintf("%d rotations for %d", len(op.Rots), rots)
	}
	for _, r := range op.Rots[:rots] {
		if r >= us[0].N {
			return nil, fmt.Sprintf("rotation %d of %d bytes", r, us[0].N)
		}
	}
	return us, ""
}

func (op enqueueOp) run(w *worker) {
	run := w.run
	us, why := op.resolve(w)
	if us == nil {
		w.void("%s", why)
		return
	}
	s := op.S
	skipped := false
	for _, u := range us {
		if u.reads() && u.a.failed.intersects(u.Off, u.Off+u.N) {
			skipped = true
		}
	}
	host := !run.sim()
	// What the op must find (inputs) and leave (outputs), from the shadow.
	var want, next []rope
	if host && !skipped {
		want = make([]rope, len(us))
		for i, u := range us {
			if u.reads() {
				want[i] = u.a.data.slice(u.Off, u.Off+u.N)
			}
		}
		if op.Fail == succeed {
			next = make([]rope, len(us))
			switch op.Shape {
			case xform:
				for i := 1; i < len(us); i++ {
					next[i] = want[0].rotate(op.Rots[i-1])
				}
			case inplace:
				next[0] = want[0].rotate(op.Rots[0])
			case fill:
				next[0] = run.base.pat(op.Key, us[0].N)
			}
		}
	}
	name := fmt.Sprintf("op%d", w.at)
	gu := make([]gpumem.Use, len(us))
	for i, u := range us {
		size := u.N
		if u.Rest {
			size = 0 // "the rest of the buffer"
		}
		gu[i] = gpumem.Use{Buffer: u.buf, Access: u.Access, Offset: u.Off, Size: size}
	}
	desc, _ := op.Uses.MarshalText()
	wid, at := w.id, w.at
	violate := func(format string, args ...any) { run.violate(wid, at, format, args...) }
	var ran atomic.Bool
	run1 := func(res []storage.Resource) (err error) {
		if run.cfg.device() {
			var flush func() error
			res, flush, err = deviceBytes(run, s, us, res)
			if err != nil {
				violate("op %s on stream %d: copying its uses to the host: %v", name, s, err)
				return err
			}
			defer func() {
				if ferr := flush(); ferr != nil {
					violate("op %s on stream %d: copying its outputs to the device: %v", name, s, ferr)
					err = errors.Join(err, ferr)
				}
			}()
		}
		if ran.Swap(true) {
			violate("op %s ran twice", name)
		}
		if skipped {
			violate("op %s (%s) ran although an input range carried a failure: it must be skipped and its outputs marked (cf. defect 5)", name, desc)
			return nil
		}
		if op.Calls > 0 {
			callDevice(run, violate, name, s, op.Calls)
		}
		for i, r := range res {
			if len(r.Bytes) != 0 && uint64(len(r.Bytes)) != us[i].N {
				violate("op %s: use %d resolved to %d bytes, want %d", name, i, len(r.Bytes), us[i].N)
				return nil
			}
		}
		if host {
			for i, u := range us {
				if u.reads() && res[i].Bytes != nil {
					if !want[i].equal(res[i].Bytes) {
						violate("op %s (%s) on stream %d: input %d differs from the shadow: %s",
							name, desc, s, i, diff(res[i].Bytes, want[i].materialize()))
					}
					run.compared.Add(u.N)
				}
			}
		}
		if op.Fail != succeed {
			for i, u := range us {
				if u.writes() && res[i].Bytes != nil {
					junk(res[i].Bytes[:min(len(res[i].Bytes), 4096)])
				}
			}
			if op.Fail == failPanic {
				panic("shadow: deliberate panic in " + name)
			}
			return errors.New("shadow: deliberate failure of " + name)
		}
		// The outputs are written from what the inputs should hold (a wrong
		// input was reported above; this keeps it from spreading).
		for i := range next {
			if next[i] != nil && res[i].Bytes != nil {
				next[i].writeTo(res[i].Bytes)
			}
		}
		return nil
	}
	if skipped {
		w.log.note("skipped: an input carries a failure")
	}
	unlock := w.lock(s)
	err := run.streams[s].Enqueue(name, gu, run1)
	unlock()
	run.pulse()
	if err != nil {
		w.log.note(err.Error())
		w.fail("Enqueue %s: %v", name, err)
		return
	}
	switch {
	case skipped:
		run.skips.Add(1)
	case op.Fail != succeed:
		run.fails.Add(1)
	}
	for i, u := range us {
		if u.a.owner != s {
			u.a.foreign |= 1 << s
		}
		u.a.used |= 1 << s
		if !u.writes() {
			continue
		}
		if skipped || op.Fail != succeed {
			u.a.failed = u.a.failed.add(u.Off, u.Off+u.N)
			continue
		}
		var x rope
		if next != nil {
			x = next[i]
		}
		u.a.wrote(u.Off, u.N, x, host)
	}
}

// callDevice is what an op that calls the device does from inside its
// run: stats and report; a scratch allocation, written, cloned and freed;
// and a Synchronize of its own stream, which must be refused
// (ErrCalledFromOp) rather than wait for the op itself. The allocation and
// the wait need the stream's gate: an allocation on a recording stream would
// doom the recording, by design.
func callDevice(run *runState, violate func(string, ...any), name string, s int, scratch uint64) {
	_ = run.d.Stats()
	_ = run.d.Report()
	gate := &run.gates[s]
	if !gate.TryRLock() {
		return
	}
	defer gate.RUnlock()
	st := run.streams[s]
	b, err := st.Alloc(bg, scratch)
	if run.cfg.device() {
		// Such a backend (Vulkan, CUDA) runs the op inside Enqueue with the
		// device held: an Alloc could wait for the streams, so it is
		// refused (Stream.Enqueue's contract).
		if err == nil {
			_ = b.Free()
		}
		if !errors.Is(err, gpumem.ErrCalledFromOp) {
			violate("op %s: Alloc(%d) from inside the op on the %s backend returned %v, want ErrCalledFromOp", name, scratch, run.d.Backend().Name(), err)
		}
		err = nil
		b = gpumem.Buffer{}
	}
	switch {
	case b.IsZero() && err == nil:
	case err == nil:
		if err := b.Write(bg, run.base[:min(scratch, 512)]); err != nil {
			violate("op %s: Write of its scratch buffer from inside the op: %v", name, err)
		}
		c := b.Clone()
		if c.IsZero() {
			violate("op %s: Clone of its scratch buffer from inside the op returned nil", name)
		} else if err := c.Free(); err != nil {
			violate("op %s: Free of a clone from inside the op: %v", name, err)
		}
		if err := b.Free(); err != nil {
			violate("op %s: Free of its scratch buffer from inside the op: %v", name, err)
		}
	case errors.Is(err, gpumem.ErrOutOfMemory) && run.oomOK:
	default:
		violate("op %s: Alloc(%d) from inside the op: %v", name, scratch, err)
	}
	if err := st.Synchronize(bg); !errors.Is(err, gpumem.ErrCalledFromOp) {
		violate("op %s: Synchronize of its own stream from inside the op returned %v, want ErrCalledFromOp", name, err)
	}
}

// deviceBytes gives an op on a backend that holds no host bytes
// (Config.device) host copies of its uses: each window is copied to the
// host through gpumem.HostTransfers (inside the op, after the stream's
// earlier work, as a host op would see it), and flush copies the windows
// the op writes back to the device. The op's own checks and writes then
// run on the copies unchanged. A panicking op still flushes (the junk it
// wrote reaches the device, as on host), since flush runs deferred.
func deviceBytes(run *runState, s int, us []shadowUse, res []storage.Resource) ([]storage.Resource, func() error, error) {
	t, ok := run.d.Backend().(gpumem.HostTransfers)
	if !ok {
		return res, nil, fmt.Errorf("the %s backend implements no gpumem.HostTransfers", run.d.Backend().Name())
	}
	q := run.streams[s].Queue()
	host := make([]storage.Resource, len(res))
	for i, r := range res {
		host[i] = r
		if r.Bytes != nil || r.Size == 0 {
			continue
		}
		host[i].Bytes = make([]byte, r.Size)
		if err := t.CopyToHost(q, host[i].Bytes, r); err != nil {
			return res, nil, fmt.Errorf("use %d: %w", i, err)
		}
	}
	flush := func() error {
		for i, u := range us {
			if u.writes() && res[i].Bytes == nil && host[i].Bytes != nil {
				if err := t.CopyToDevice(q, res[i], host[i].Bytes); err != nil {
					return fmt.Errorf("use %d: %w", i, err)
				}
			}
		}
		return nil
	}
	return host, flush, nil
}

func (op delayOp) run(w *worker) { w.delay(op.S, op.D) }

// delay enqueues an op that sleeps d on stream s.
func (w *worker) delay(s int, d time.Duration) {
	unlock := w.lock(s)
	err := w.run.streams[s].Enqueue("delay", nil, func([]storage.Resource) error { time.Sleep(d); return nil })
	unlock()
	w.run.pulse()
	if err != nil {
		w.fail("Enqueue delay: %v", err)
	}
}
