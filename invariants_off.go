//go:build !invariants

package gpumem

// invariantsOn says whether the invariants build tag is set (invariants.go
// holds the checks).
const invariantsOn = false

func (d *Device) assertLocked(string) {}
