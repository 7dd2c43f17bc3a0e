// Stand-ins for queued work: holds that keep memory taken the way work
// queued on a stream does (design §9.9), for a caller that does not run
// that work — a replay of a recorded trace (package replay), whose held
// frees and holds (§13.1) say where the recorded device's queued work kept
// memory that its frees had ended.
//
// Two things hold memory on a device. A binding on a buffer (another
// stream's queued use, a mapping, a capture, a graph) keeps its slice taken
// after its Free: Buffer.Hold makes one. Work queued on a stream holds back
// the storage releases the stream makes meanwhile (page deallocations,
// granule unmaps), though the freed slices are reused in stream order:
// Stream.HoldReleases opens such a hold without any work.

package gpumem

// Hold keeps the buffer's memory bound until release is called, as a use
// by another stream's queued op does: a Free meanwhile ends the buffer
// (Stats.BytesInUse drops, the history records the free as held) but its
// memory stays taken (Stats.BytesPendingFree) — not reused, not relocated,
// its page not given back — until release. It stands in for work that is
// not run: package replay holds the buffers a trace's held frees name.
// release may be called once; later calls do nothing. It returns
// ErrAlreadyFreed for a freed buffer and ErrClosed on a closed device.
func (b Buffer) Hold() (release func(), err error) {
	if err := b.valid(); err != nil {
		return nil, err
	}
	d := b.s.d
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	if err := b.usableLocked(); err != nil {
		return nil, err
	}
	bind := b.h.Binding()
	return onceUnderLock(d, bind.Release), nil
}

// HoldReleases holds back the storage releases the stream makes from now
// on (page deallocations and granule unmaps, the ones work queued on it
// holds, design §9.9) until pass is called, as if work were queued on it
// that never completes by itself; the slices it frees are reused in stream
// order as ever. Holds pass in the order they were opened: a release made
// while holds are open goes back once the newest of them and every earlier
// one have passed (and the stream's real work allows), at the pass that
// makes it so. It stands in for work that is not run: package replay opens
// one for each hold of a trace. pass may be called once; later calls do
// nothing. A cleanup does not wait for these holds. It returns ErrClosed on
// a closed device; Close gives back what they still hold.
func (s *Stream) HoldReleases() (pass func(), err error) {
	d := s.d
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	if d.closed {
		return nil, ErrClosed
	}
	s.st.vOpened++
	n := s.st.vOpened
	return onceUnderLock(d, func() {
		s.st.passHold(n)
		s.st.releasePassed()
	}), nil
}

// onceUnderLock returns a function that runs fn under the device lock (or
// the lock an op borrows) at its first call and does nothing at later ones:
// the release a Hold or HoldReleases hands out.
func onceUnderLock(d *Device, fn func()) func() {
	done := false
	return func() {
		borrowed := d.lockOrBorrow()
		defer d.unlock(borrowed)
		if done {
			return
		}
		done = true
		fn()
	}
}

// vBusy reports whether a HoldReleases hold is open.
func (c *countedStorage) vBusy() bool { return c.vOpened > c.vPassed }

// passHold marks hold n passed.
func (c *countedStorage) passHold(n uint64) {
	if n != c.vPassed+1 {
		if c.vPassedLater == nil {
			c.vPassedLater = make(map[uint64]bool)
		}
		c.vPassedLater[n] = true
		return
	}
	c.vPassed = n
	for c.vPassedLater[c.vPassed+1] {
		delete(c.vPassedLater, c.vPassed+1)
		c.vPassed++
	}
}
