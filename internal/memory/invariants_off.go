//go:build !invariants

package memory

// invariantsOn says whether the invariants build tag is set.
const invariantsOn = false

// checkInvariants compiles to nothing in the release build: the checks live
// behind the invariants build tag (invariants.go).
func (m *Manager) checkInvariants(string) {}

// invariantSampler is empty in the release build.
type invariantSampler struct{}
