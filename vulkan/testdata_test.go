package vulkan

import _ "embed"

// The SPIR-V of testdata/once.comp, a kernel that does not loop over the
// grid, compiled with the shipped kernels' flags and committed, embedded
// so the test binary needs neither glslc nor the source tree (the GPU kit
// runs it without both); TestCommittedSPIRVMatchesAFreshCompile checks it
// against a fresh compile of the embedded source.
var (
	//go:embed testdata/once.comp
	onceGLSL []byte
	//go:embed testdata/once.spv
	onceSPIRV []byte
)

// NonLoopingSPIRV returns testdata/once.spv: one buffer, push constants
// (n, k uint32), v[i] += k for i < n, one item per invocation.
func NonLoopingSPIRV() []byte { return onceSPIRV }
