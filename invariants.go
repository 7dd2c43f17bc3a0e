//go:build invariants

package gpumem

import (
	"fmt"

	"github.com/gpumem/gpumem/internal/handle"
)

// Built with -tags invariants, the device asserts that its …Locked
// functions run under the device lock (or a lock lent to the calling op,
// settle.go), and the memories check their pools after every mutation
// (internal/memory/invariants.go). The release build compiles none of it.

// invariantsOn says whether the invariants build tag is set.
const invariantsOn = true

// assertLocked panics when the device lock is free: fn was called without
// it.
func (d *Device) assertLocked(fn string) {
	if d.mu.TryLock() {
		d.mu.Unlock()
		panic(fmt.Sprintf("gpumem: %s called without the device lock", fn))
	}
}

// assertUnkeyedLocked panics when a structure that keys on buffers'
// descriptors still names desc, which the device's recycler just handed to
// a new buffer: that structure's key was not counted (handle.Descriptor.Key
// or Keep), and it would take the new allocation for the old one.
func (d *Device) assertUnkeyedLocked(desc *handle.Descriptor) {
	fail := func(where string) {
		panic(fmt.Sprintf("gpumem: the descriptor handed to buffer %d is still named by %s (H6)", desc.ID(), where))
	}
	if _, ok := d.writers[desc]; ok {
		fail("the writers index")
	}
	if _, ok := d.foreign[desc]; ok {
		fail("a cross-stream note")
	}
	names := func(ws []*writeRecord) bool {
		for _, w := range ws {
			for _, o := range w.outs {
				if o.d == desc {
					return true
				}
			}
		}
		return false
	}
	if names(d.placeholders) {
		fail("a placeholder writer")
	}
	for _, s := range d.streams {
		if names(s.pending) {
			fail("a pending writer")
		}
		for _, u := range s.deferred {
			if u.b.Descriptor() == desc {
				fail("a deferred cross-stream use")
			}
		}
		c := s.cap
		if c == nil {
			continue
		}
		if _, ok := c.warm[desc]; ok {
			fail("a capture's warmup")
		}
		if _, ok := c.recorded[desc]; ok {
			fail("a capture's recorded buffers")
		}
		for _, t := range c.touched {
			if t.b.Descriptor() == desc {
				fail("a capture's touched buffers")
			}
		}
		for _, w := range c.written {
			if w.b.Descriptor() == desc {
				fail("a capture's written ranges")
			}
		}
		for _, rs := range c.opReads {
			for _, r := range rs {
				if r.d == desc {
					fail("a capture's read ranges")
				}
			}
		}
	}
}
