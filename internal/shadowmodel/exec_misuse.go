package shadowmodel

// The executor's misuse and faults: wrong calls must return their
// documented errors and change nothing; injected storage faults must only
// ever surface as the errors the configuration explains.

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
)

// run allocates above the max page: a dedicated allocation, or out of
// memory.
func (op tooBigOp) run(w *worker) {
	run := w.run
	unlock := w.lock(op.S)
	b, err := run.streams[op.S].Alloc(bg, op.Size)
	unlock()
	run.pulse()
	if err == nil {
		if b.Size() != op.Size {
			w.fail("Alloc(%d) above the max page gave a buffer of %d bytes", op.Size, b.Size())
		}
		_ = b.Free()
	} else if errors.Is(err, gpumem.ErrBufferTooBig) || !errors.Is(err, gpumem.ErrOutOfMemory) && !errors.Is(err, gpumem.ErrPageUpdateForbidden) {
		// The device serves any size it has the bytes for; what it
		// cannot hold is ErrOutOfMemory (a recording stream's held
		// room only: ErrPageUpdateForbidden).
		w.fail("Alloc(%d) above the max page: %v, want a buffer or ErrOutOfMemory", op.Size, err)
	}
}

// run enqueues a use outside its buffer, next to a valid output: nothing
// runs, nothing is marked.
func (op outsideOp) run(w *worker) {
	run := w.run
	a, b := w.handle(op.In)
	if a == nil {
		w.void("%s is not live", op.In)
		return
	}
	uses := []gpumem.Use{{Buffer: b, Access: gpumem.Read, Offset: a.size, Size: op.N}}
	if o, ob := w.handle(op.Out); o != nil && o != a {
		uses = append([]gpumem.Use{{Buffer: ob, Access: gpumem.Write}}, uses...)
	}
	wid, at := w.id, w.at
	unlock := w.lock(op.S)
	err := run.streams[op.S].Enqueue("outside", uses, func([]storage.Resource) error {
		run.violate(wid, at, "an op with a use outside its buffer ran")
		return nil
	})
	unlock()
	run.pulse()
	if !errors.Is(err, gpumem.ErrInvalidUse) {
		w.fail("Enqueue with a use outside its buffer: %v, want ErrInvalidUse", err)
	}
}

// run calls a freed handle: ErrAlreadyFreed (Clone: nil).
func (op staleOp) run(w *worker) {
	run := w.run
	b := w.bufs[op.Ref]
	if a := w.allocs[op.Ref.Alloc]; b.IsZero() || a == nil || a.live && slices.Contains(a.refs, op.Ref) {
		w.void("%s is not a freed handle", op.Ref)
		return
	}
	var err error
	var what string
	switch op.Call {
	case staleRead:
		what = "Read"
		_, err = b.Read(bg)
	case staleWrite:
		what = "Write"
		err = b.Write(bg, make([]byte, op.N))
	case staleFree:
		what = "Free"
		err = b.Free()
	case staleClone:
		if c := b.Clone(); !c.IsZero() {
			w.fail("Clone of a freed handle returned a buffer")
		}
		run.pulse()
		return
	case staleEnqueue:
		what = "Enqueue"
		wid, at := w.id, w.at
		unlock := w.lock(op.S)
		err = run.streams[op.S].Enqueue("freed", []gpumem.Use{{Buffer: b, Access: gpumem.Read}}, func([]storage.Resource) error {
			run.violate(wid, at, "an op over a freed buffer ran")
			return nil
		})
		unlock()
	}
	run.pulse()
	if !errors.Is(err, gpumem.ErrAlreadyFreed) {
		hint := ""
		if op.Call == staleWrite {
			hint = " (cf. defect 10)"
		}
		w.fail("%s of a freed buffer (buffer %d): %v, want ErrAlreadyFreed%s", what, b.ID(), err, hint)
	}
}

// run arms one storage fault.
func (op faultOp) run(w *worker) {
	run := w.run
	if len(run.faults) == 0 {
		w.void("no faulty storage (the config is not faulty)")
		return
	}
	f := run.faults[op.Storage%len(run.faults)]
	switch op.Kind {
	case refuseAllocs:
		f.RefuseNextAllocs(op.N)
	case refuseMaps:
		f.RefuseNextMaps(op.N)
	case refuseCopy:
		k := op.N
		f.RefuseCopies(func(n int) bool { return n == k })
	case refuseAbove:
		above := run.d.BytesAllocated() + op.Above
		w.log.note(fmt.Sprintf("above %d", above))
		f.RefuseAllocAbove(above)
	case thresholdOff:
		f.RefuseAllocAbove(0)
	case refuseWait:
		// A refused wait may leak a relocation's source and target for
		// good (design §7.5): the generator arms two at most a run.
		run.waitFaults.Add(1)
		k := op.N
		f.RefuseWaits(func(n int) bool { return n == k })
	}
	run.pulse()
}
