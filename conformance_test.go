package gpumem_test

import (
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/backendtest"
)

// The embedded backends pass the conformance suite every Backend passes
// (internal/backendtest): host with whole pages and with granular pages,
// and sim, whose storage holds no bytes.
func TestHostBackendConforms(t *testing.T) {
	for _, granular := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "granular"}[granular]
		t.Run(name, func(t *testing.T) {
			backendtest.TestBackend(t, func(t *testing.T, opts ...gpumem.Option) (*gpumem.Device, error) {
				return gpumem.Open(append([]gpumem.Option{gpumem.WithPageGranular(granular)}, opts...)...)
			}, backendtest.Options{Name: "host/" + name, Copy: backendtest.HostCopy})
		})
	}
}

func TestSimBackendConforms(t *testing.T) {
	backendtest.TestBackend(t, func(t *testing.T, opts ...gpumem.Option) (*gpumem.Device, error) {
		return gpumem.Open(append([]gpumem.Option{gpumem.WithSim()}, opts...)...)
	}, backendtest.Options{NoBytes: true})
}
