package vulkan

import (
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/backendtest"
)

// The vulkan backend passes the conformance suite every Backend passes
// (internal/backendtest) on the device here (lavapipe on machines without
// a GPU), validated where the layer is installed, with Write and Read
// through mapped memory and through staging buffers. Staging buffers are
// the backend's declared cache: pooled for reuse outside the device's
// accounting, so the driver may hold them after everything is freed.
func TestBackendConforms(t *testing.T) {
	for _, staging := range []bool{false, true} {
		name := map[bool]string{false: "mapped", true: "staging"}[staging]
		t.Run(name, func(t *testing.T) {
			var b *Backend
			opts := backendtest.Options{
				Name:          "vulkan/" + name,
				Copy:          copyOnStream,
				DriverObjects: func() int { return b.allocations() },
				DriverCached:  func() int { return b.stage.pooled() },
			}
			backendtest.TestBackend(t, func(t *testing.T, more ...gpumem.Option) (*gpumem.Device, error) {
				b = testBackendWith(t, Options{Staging: staging})
				return gpumem.OpenBackend(b, more...)
			}, opts)
		})
	}
}

// copyOnStream is the suite's device copy: vkCmdCopyBuffer in an op on s.
func copyOnStream(s *gpumem.Stream, dst, src gpumem.Buffer) error {
	uses := []gpumem.Use{{Buffer: dst, Access: gpumem.Write}, {Buffer: src, Access: gpumem.Read}}
	return Enqueue(s, "backendtest.copy", uses, func(op *Op) error { return op.Copy(Use(0), Use(1)) })
}

// pooled counts the idle staging buffers the pool keeps.
func (p *stagingPool) pooled() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}
