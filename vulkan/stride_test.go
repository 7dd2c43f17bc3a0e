package vulkan

import "testing"

// Every shipped kernel is GridStride, so its module must read
// gl_NumWorkGroups; text is no module.
func TestShippedGridStrideKernelsReadNumWorkgroups(t *testing.T) {
	for name, spec := range shippedSpecs() {
		reads, err := spirvReadsNumWorkgroups(mustShipped(t, name))
		if err != nil || !reads || !spec.GridStride {
			t.Errorf("%s: reads gl_NumWorkGroups %v (%v), GridStride %v; want both", name, reads, err, spec.GridStride)
		}
	}
	if _, err := spirvReadsNumWorkgroups([]byte("not spir-v at all!!!")); err == nil {
		t.Error("text accepted as SPIR-V")
	}
}
