//go:build invariants

package gpumem

import "fmt"

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
