// Failure marks in stream order.
//
// An op that fails leaves the bytes it should have written unwritten; reads
// of them report the failure (ErrUnwritten) instead of returning stale
// bytes, and an op that reads them is skipped, its own outputs marked in
// turn. The device learns of a failure late, when it collects the queue's
// failures, yet the marks must not depend on when that happens:
//
//   - (W1) A failure marks only the bytes whose latest writer, in enqueue
//     order, is the failed op: a write enqueued after it (on any stream)
//     already replaced them, whether it ran before or after the collection.
//   - (W2) An op that reads bytes whose latest pending writer fails is
//     skipped at run time, on its executor, even when the failure was not
//     yet collected at its Enqueue: it depends on that writer, which its
//     stream order (or a cross-stream wait) makes finish first.
//
// Every enqueued op that writes gets a writeRecord, kept until its stream is
// known to have completed it: in the stream's pending list (seq order) and
// in the device's writers index (per allocation, enqueue order). Records and
// the index live under the device lock, except failed and skip, which the
// executor writes before the op completes and which are read after it.
//
// Collection reads every queue's completion counter before taking any
// queue's failures, so a record is dropped only after the failures of every
// op enqueued before it that wrote the same bytes were taken (that op
// finished first): W1 never misses the later write that shadows a failure.

package gpumem

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/stream"
)

// writeRecord is one enqueued op that writes, until its stream is known to
// have completed it.
type writeRecord struct {
	epoch uint64 // the device's enqueue order, from registration
	s     *Stream
	seq   uint64
	name  string
	outs  []output
	// failed is set by the op's run wrapper when the op failed or was
	// skipped, before the op completes; dependent ops read it after.
	failed atomic.Bool
	// skip is the dependency that made the op skip (set before failed).
	skip atomic.Pointer[dependency]
	// fail is the failure the op's outputs were marked with, set when its
	// failure was collected (under the device lock); 0 before.
	fail handle.FailureID
	// placeholder: marks placed without a running op (markedLocked); not in
	// any stream's pending list, dropped once no earlier writer is pending.
	placeholder bool
}

// dependency is a pending writer of bytes an op reads.
type dependency struct {
	w     *writeRecord
	input handle.ID // the buffer read
}

// errSkipped is what a skipped op's run returns: the failure it inherits is
// its dependency's, found when the failure is collected.
type errSkipped struct{ dep *dependency }

func (e *errSkipped) Error() string {
	return fmt.Sprintf("gpumem: skipped: input buffer %d was left unwritten by op %q, which failed", e.dep.input, e.dep.w.name)
}

// span is a byte range [off, end) of one allocation.
type span struct{ off, end uint64 }

// subtract returns the parts of s that no span of cover overlaps.
func (s span) subtract(cover []span) []span {
	out := []span{s}
	for _, c := range cover {
		var next []span
		for _, p := range out {
			if c.end <= p.off || p.end <= c.off {
				next = append(next, p)
				continue
			}
			if p.off < c.off {
				next = append(next, span{p.off, c.off})
			}
			if c.end < p.end {
				next = append(next, span{c.end, p.end})
			}
		}
		out = next
		if len(out) == 0 {
			break
		}
	}
	return out
}

// spansOf returns the ranges w writes of the allocation desc.
func (w *writeRecord) spansOf(desc *handle.Descriptor) []span {
	var out []span
	for _, o := range w.outs {
		if o.d == desc {
			out = append(out, span{o.off, o.off + o.len})
		}
	}
	return out
}

// newWriteRecordLocked makes a record; it takes its place in the enqueue
// order when registered.
func (d *Device) newWriteRecordLocked(s *Stream, name string, outs []output) *writeRecord {
	return &writeRecord{s: s, name: name, outs: outs}
}

// registerLocked enters an enqueued record (seq known) in the enqueue order,
// its stream's pending list and the device's writers index.
func (d *Device) registerLocked(w *writeRecord) {
	if invariantsOn {
		d.assertLocked("registerLocked")
	}
	w.s.pending = append(w.s.pending, w)
	d.indexLocked(w)
}

// indexLocked gives w its place in the enqueue order and enters it in the
// writers index, once per allocation it writes. Each allocation is keyed
// (handle.Descriptor.Key) until unregisterLocked: the record reads its
// outputs' descriptors as long as it is indexed, and the device must not
// hand them to later allocations meanwhile (H6).
func (d *Device) indexLocked(w *writeRecord) {
	d.epoch++
	w.epoch = d.epoch
	seen := make(map[*handle.Descriptor]bool, len(w.outs))
	for _, o := range w.outs {
		if !seen[o.d] {
			seen[o.d] = true
			d.writers[o.d] = append(d.writers[o.d], w)
			o.d.Key()
		}
	}
}

// markedLocked enters marks just placed without a running op (an op
// skipped at its Enqueue, one the queue refused, a recording that could not
// seal, a refused launch) in the enqueue order, as a placeholder writer: an
// earlier writer's failure collected later then leaves these bytes to it
// (W1). It is no dependency of later readers (W2): they find its marks at
// their Enqueue, unless a later write released them.
func (d *Device) markedLocked(s *Stream, name string, outs []output, f handle.FailureID) {
	if len(outs) == 0 {
		return
	}
	w := &writeRecord{s: s, name: name, outs: outs, fail: f, placeholder: true}
	d.indexLocked(w)
	d.placeholders = append(d.placeholders, w)
}

// dropPlaceholdersLocked forgets the placeholders no earlier pending writer
// of their allocations can still fail under.
func (d *Device) dropPlaceholdersLocked() {
	if len(d.placeholders) == 0 {
		return
	}
	d.placeholders = slices.DeleteFunc(d.placeholders, func(w *writeRecord) bool {
		for _, o := range w.outs {
			for _, x := range d.writers[o.d] {
				if !x.placeholder && x.epoch < w.epoch {
					return false
				}
			}
		}
		d.unregisterLocked(w)
		return true
	})
}

// outputsOf returns the written ranges of resolved uses.
func outputsOf(rs []resolved) []output {
	var outs []output
	for _, r := range rs {
		if r.use.Access.writes() {
			outs = append(outs, output{d: r.use.Buffer.h.Descriptor(), owner: r.owner, off: r.use.Offset, len: r.use.Size})
		}
	}
	return outs
}

// outputsOfWritten returns the ranges a graph's recorded ops declared
// written, as outputs.
func outputsOfWritten(ws []writtenRange) []output {
	outs := make([]output, 0, len(ws))
	for _, w := range ws {
		outs = append(outs, output{d: w.b.Descriptor(), owner: w.owner, off: w.off, len: w.len, freed: w.b.Released()})
	}
	return outs
}

// unregisterLocked removes a completed record from the writers index and
// drops its keys (indexLocked), once per allocation it writes.
func (d *Device) unregisterLocked(w *writeRecord) {
	for _, o := range w.outs {
		list := d.writers[o.d]
		i := slices.Index(list, w)
		if i < 0 {
			continue // an allocation written twice: done at its first output
		}
		list = slices.Delete(list, i, i+1)
		if len(list) == 0 {
			delete(d.writers, o.d)
		} else {
			d.writers[o.d] = list
		}
		o.d.Unkey()
	}
}

// dependenciesLocked returns the pending writers an op reading [off,
// off+size) of desc depends on: for each byte, its latest pending writer.
func (d *Device) dependenciesLocked(desc *handle.Descriptor, input handle.ID, off, size uint64, deps []dependency) []dependency {
	if invariantsOn {
		d.assertLocked("dependenciesLocked")
	}
	list := d.writers[desc]
	if len(list) == 0 || size == 0 {
		return deps
	}
	var covered []span
	read := span{off, off + size}
	for i := len(list) - 1; i >= 0; i-- {
		w := list[i]
		if w.placeholder {
			// Its marks are placed already (a reader finds them at its
			// Enqueue), and a later write that released them may have
			// completed and gone from the index: it is no dependency.
			continue
		}
		contributes := false
		for _, ws := range w.spansOf(desc) {
			ov := span{max(ws.off, read.off), min(ws.end, read.end)}
			if ov.off >= ov.end {
				continue
			}
			if len(ov.subtract(covered)) > 0 {
				contributes = true
			}
			covered = append(covered, ov)
		}
		if contributes {
			deps = append(deps, dependency{w: w, input: input})
		}
		if len(read.subtract(covered)) == 0 {
			break
		}
	}
	return deps
}

// wrapRun returns the op's run as the executor calls it: skipped when a
// dependency failed (W2), and noting its own failure for its dependents.
func wrapRun(w *writeRecord, deps []dependency, run func() error) func() error {
	if w == nil && len(deps) == 0 {
		return run
	}
	return func() (err error) {
		for i := range deps {
			if deps[i].w.failed.Load() {
				if w != nil {
					w.skip.Store(&deps[i])
					w.failed.Store(true)
				}
				return &errSkipped{dep: &deps[i]}
			}
		}
		if w == nil {
			return run()
		}
		ok := false
		defer func() {
			if !ok {
				w.failed.Store(true) // an error or a panic
			}
		}()
		err = run()
		ok = err == nil
		return err
	}
}

// collected is one failure taken from a queue, with its record.
type collected struct {
	s   *Stream
	f   stream.OpFailure
	rec *writeRecord
}

// collectFailuresLocked takes every queue's failed ops, marks the bytes
// they left unwritten (W1, in enqueue order, so a skipped op finds its
// dependency's failure), and drops the records of completed ops.
func (d *Device) collectFailuresLocked() {
	if invariantsOn {
		d.assertLocked("collectFailuresLocked")
	}
	done := make([]uint64, len(d.streams))
	for i, s := range d.streams {
		done[i] = s.q.Completed()
	}
	var fails []collected
	for _, s := range d.streams {
		for _, f := range s.q.TakeFailures() {
			fails = append(fails, collected{s: s, f: f, rec: s.pendingRecord(f.Seq)})
		}
	}
	if len(fails) > 0 {
		slices.SortStableFunc(fails, func(a, b collected) int {
			return cmp.Compare(epochOf(a.rec), epochOf(b.rec))
		})
		for _, c := range fails {
			d.markFailedLocked(c)
		}
		d.g.Prune()
	}
	for i, s := range d.streams {
		s.pending = dropPassed(s.pending, done[i], func(w *writeRecord) uint64 { return w.seq }, d.unregisterLocked)
	}
	d.dropPlaceholdersLocked()
}

func epochOf(w *writeRecord) uint64 {
	if w == nil {
		return 0
	}
	return w.epoch
}

// markFailedLocked marks what one failed (or skipped) op left unwritten.
func (d *Device) markFailedLocked(c collected) {
	w := c.rec
	if w == nil {
		return // it wrote nothing: nothing is left unwritten
	}
	var skip *errSkipped
	if errors.As(c.f.Err, &skip) {
		dep := skip.dep
		f := dep.w.fail
		if _, live := d.g.Err(f); f == 0 || !live {
			f = d.g.Fail(fmt.Errorf("gpumem: op %q (seq %d on %s) was skipped: %w", c.f.Name, c.f.Seq, c.s.name, skip), c.f.Name)
		}
		rec := handle.SkipRecord{Op: c.f.Name, Input: dep.input}
		for _, o := range w.outs {
			rec.Outputs = append(rec.Outputs, o.d.ID())
		}
		d.g.Skip(f, rec)
		w.fail = f
	} else {
		w.fail = d.g.Fail(fmt.Errorf("gpumem: op %q (seq %d on %s) failed: %w", c.f.Name, c.f.Seq, c.s.name, c.f.Err), c.f.Name)
	}
	for _, o := range w.outs {
		if o.freed {
			continue
		}
		var later []span
		for _, x := range d.writers[o.d] {
			if x.epoch > w.epoch {
				later = append(later, x.spansOf(o.d)...)
			}
		}
		for _, p := range (span{o.off, o.off + o.len}).subtract(later) {
			_ = o.owner.mem.MarkFailure(descRef{o.d}, w.fail, p.off, p.end-p.off)
		}
	}
}

// pendingRecord returns the record of the op with sequence number seq, or
// nil when it wrote nothing.
func (s *Stream) pendingRecord(seq uint64) *writeRecord {
	i, ok := slices.BinarySearchFunc(s.pending, seq, func(w *writeRecord, seq uint64) int { return cmp.Compare(w.seq, seq) })
	if !ok {
		return nil
	}
	return s.pending[i]
}
